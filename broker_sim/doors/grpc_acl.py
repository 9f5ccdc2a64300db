"""ACLs on the gRPC port: every call of our contract and of RocketMQ 5's MessagingService is
checked before its handler runs, by the ``authorization`` header RocketMQ's gRPC clients send.

A refused call reaches its handler as a ``RefusedRequest``, which each door already answers in
its protocol (a gRPC status on ours, the response's Status on v2's), so nothing of it happens.
The account of an admitted unary call is ``caller()`` while its handler runs: transactions
belong to the account that opened them.

What each method of our contract needs is below (``DEMANDS``, and ``demands_of`` for the one
that reads a record to know its demand); v2's is in v2/acl.py.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from typing import Callable

from broker_sim.acl import Demand, Guard, Perm, claimed_access_key
from broker_sim.core.errors import from_exception
from broker_sim.doors.grpc_common import RefusedRequest, peer_remote
from rmq_wire import record as fmt

_CALLER = contextvars.ContextVar("rmq_caller", default=None)
_NAMED_SINKS = contextvars.ContextVar("rmq_named_sinks", default=frozenset())


def caller() -> str | None:
    """The access key of the call being served (None without ACLs)."""
    return _CALLER.get()


def named_sinks() -> frozenset:
    """The sink ids the ACL file names for the caller (its sinkPerms): granted by name, they are
    its whatever account committed under them first."""
    return _NAMED_SINKS.get()


class GrpcAdmission:
    """Wraps a door's handlers: ``demands[method name](request)`` says what a call needs. Every
    method has its entry (``account_only`` where an account is all it needs): a method with
    none is refused at start, not served unchecked."""

    def __init__(self, guard: Guard, demands: dict[str, Callable]):
        self.guard = guard
        self.demands = demands

    def guarded(self, name: str, handler: Callable, client_streaming: bool) -> Callable:
        """``handler`` (sync or async, unary or streaming) behind the check."""
        demands = self.demands.get(name)
        if demands is None:
            raise ValueError(f"the gRPC method {name} has no ACL demand: give it one in its door's DEMANDS "
                             "(broker_sim/doors/grpc_acl.py or broker_sim/doors/rocketmq_v2/acl.py), "
                             "account_only if an account is "
                             "all it needs")
        if client_streaming:
            return self._guarded_stream_in(name, handler)

        def admitted(request, context):
            try:
                account = self.guard.grpc_account(context.invocation_metadata())
                if not isinstance(request, RefusedRequest):
                    self.guard.authorize(account, demands(request))
            except Exception as err:
                self._log_refusal(err, name, context)
                return RefusedRequest(from_exception(err)), None
            return request, account

        if inspect.iscoroutinefunction(handler):
            @functools.wraps(handler)
            async def unary_async(request, context):
                request, account = admitted(request, context)
                tokens = _as_caller(account)
                try:
                    return await handler(request, context)
                finally:
                    _reset(tokens)
            return unary_async
        if inspect.isasyncgenfunction(handler):
            @functools.wraps(handler)
            async def streaming_async(request, context):  # checked before the first answer
                async for response in handler(admitted(request, context)[0], context):
                    yield response
            return streaming_async
        if inspect.isgeneratorfunction(handler):
            @functools.wraps(handler)
            def streaming(request, context):
                yield from handler(admitted(request, context)[0], context)
            return streaming

        @functools.wraps(handler)
        def unary(request, context):
            request, account = admitted(request, context)
            tokens = _as_caller(account)
            try:
                return handler(request, context)
            finally:
                _reset(tokens)
        return unary

    def _guarded_stream_in(self, name: str, handler: Callable) -> Callable:
        """A client-streaming call (v2's Telemetry, an async generator) is checked by its
        headers: a refused one sees a single RefusedRequest in place of the client's messages."""

        @functools.wraps(handler)
        async def telemetry(request_iterator, context):
            try:
                self.guard.grpc_account(context.invocation_metadata())
            except Exception as err:
                self._log_refusal(err, name, context)
                request_iterator = _one(RefusedRequest(from_exception(err)))
            async for response in handler(request_iterator, context):
                yield response

        return telemetry

    def _log_refusal(self, err: Exception, name: str, context) -> None:
        client = peer_remote(context.peer())
        self.guard.log_refusal(err, f"gRPC call {name} from {client}",
                               account=claimed_access_key(context.invocation_metadata()), client=client)


async def _one(item):
    yield item


def _as_caller(account) -> tuple:
    return (_CALLER.set(account.access_key if account is not None else ""),
            _NAMED_SINKS.set(frozenset(account.sink_perms) if account is not None else frozenset()))


def _reset(tokens: tuple) -> None:
    _CALLER.reset(tokens[0])
    _NAMED_SINKS.reset(tokens[1])


def account_only(_request) -> list:
    """An account, nothing more (the method's own checks, if any, are in its handler)."""
    return []


def _topic(perm: Perm) -> Callable:
    return lambda request: [Demand.topic(request.topic, perm)]


def _group_and_topic(request) -> list:
    return [Demand.group(request.group), Demand.topic(request.topic, Perm.SUB)]


def _message_at(record_topic: Callable[[int], "str | None"]) -> Callable:
    """GetMessage: the SUB of the topic of the record at the offset, read first, which a refusal
    names by the offset only (the remoting door's VIEW_MESSAGE_BY_ID does the same). No record
    there: nothing (the handler answers that no message starts there)."""

    def demands(request) -> list:
        offset = request.commitlog_offset
        topic = record_topic(offset) if offset >= 0 else None
        if topic is None:
            return []
        return [Demand.topic(topic, Perm.SUB, f"the topic of the message at commitlog offset {offset}")]

    return demands


def demands_of(record_topic: Callable[[int], "str | None"]) -> dict:
    """``DEMANDS`` with GetMessage's own: ``record_topic(offset)`` is the topic of the record at a
    commitlog offset (None: no record), the core's ``message_topic``."""
    return {**DEMANDS, "GetMessage": _message_at(record_topic)}


DEMANDS = {
    "CreateTopic": lambda _r: [Demand.admin("create topics")],
    "DeleteTopic": lambda _r: [Demand.admin("delete topics")],
    # TBW102 tells a writer what a topic its first send creates gets: any account may learn it
    "DescribeTopic": lambda r: [] if r.name == fmt.AUTO_CREATE_TOPIC else [Demand.topic(r.name, Perm.PUB | Perm.SUB)],
    "GetOffsets": lambda r: [Demand.topic(t, Perm.PUB | Perm.SUB) for t in r.topics] or [Demand.admin(
        "list every topic's offsets (name the topics)")],
    "OffsetForTimestamp": _topic(Perm.SUB),
    "BrokerStats": lambda _r: [Demand.admin("read the broker's stats")],
    "CommitOffsets": lambda r: [Demand.group(r.group), *(Demand.topic(o.topic, Perm.SUB) for o in r.offsets)],
    "QueryOffsets": lambda r: [Demand.group(r.group), *(Demand.topic(t, Perm.SUB) for t in r.topics)],
    "ListGroups": lambda r: [Demand.group(g) for g in r.groups] or [Demand.admin("list every group (name the "
                                                                                  "groups)")],
    # An operator's, as RocketMQ's updateTopic and deleteSubGroup (ADMIN_CODE in plain_acl)
    "UpdateTopic": lambda _r: [Demand.admin("change topics")],
    "DeleteGroup": lambda _r: [Demand.admin("delete consumer groups")],
    # A topic's messages by key: its SUB, as RocketMQ's QUERY_MESSAGE
    "QueryMessages": _topic(Perm.SUB),
    # A message by its commitlog offset may be any topic's: an admin's here; served with demands_of,
    # the SUB of the topic of the record found there (read first, never named to a refused caller)
    "GetMessage": lambda _r: [Demand.admin("read messages by commitlog offset")],
    "Send": _topic(Perm.PUB),
    "SendMany": lambda r: [Demand.topic(t, Perm.PUB) for t in {s.topic for s in r.sends}],
    "ReadRanges": lambda r: [Demand.topic(t, Perm.SUB) for t in {x.topic for x in r.ranges}],
    "Pop": _group_and_topic,
    "Ack": lambda r: [Demand.group(r.group)],
    "ChangeInvisibleDuration": lambda r: [Demand.group(r.group)],
    # Topic names, queue counts and types: no more than the name server's open lookups tell.
    "ListTopics": account_only,
    # A transaction is its owner's: the core refuses another account's (and lists it as unknown).
    "EndTransaction": lambda r: [Demand.sink(r.sink_batch.sink_id, Perm.PUB)] if r.HasField("sink_batch") else [],
    "ListTransactions": account_only,
    # Sink ids are resources of their own, as Kafka's transactional ids (sinkPerms, defaultSinkPerm):
    # PUB commits under one, SUB looks it up; without a grant by name, a sink is the account's that
    # first committed under it (the transaction service refuses another's).
    "GetSinkBatch": lambda r: [Demand.sink(r.sink_id, Perm.PUB | Perm.SUB)],
    "ListSinks": lambda _r: [Demand.admin("list the sinks")],
    "ReleaseSink": lambda _r: [Demand.admin("release a sink")],
}
