"""What both gRPC doors (our contract and RocketMQ 5's, on one port) share: where the core's refusals
(``broker_sim.core.errors``: a reason and a sentence) become gRPC statuses, a request refused before
its handler (``RefusedRequest``), and the caller's address as RocketMQ's BORNHOST (``peer_host``).
ACLs and the per-client limit of the port are ``grpc_acl`` and ``grpc_limits`` beside it.

Every refusal carries a gRPC status code, a sentence a user can act on (the status details),
and the trailing metadata key ``rmq-reason`` with the reason's name, so that clients raise typed
errors without parsing sentences. A sentence shows what the client sent (names, expressions,
ids) through ``broker_sim.store.echo``, cut short: it never grows with the input.

=========================  ===================  ==============================================
rmq-reason                 gRPC code            when
=========================  ===================  ==============================================
TOPIC_NOT_FOUND            NOT_FOUND            the topic does not exist (the sentence names it
                                                and the topics that do)
QUEUE_NOT_FOUND            NOT_FOUND            the topic has no such queue id (the sentence
                                                gives the valid ids). NOT_FOUND, not
                                                INVALID_ARGUMENT: like a topic, a queue is an
                                                entity that does not exist
MESSAGE_TOO_LARGE          INVALID_ARGUMENT     a body or batch over max_message_bytes, or a
                                                record larger than a commitlog segment
MESSAGE_ILLEGAL            INVALID_ARGUMENT     the store refused the message: a malformed
                                                batch payload (an inner batch's that does not
                                                decompress, parse as its codec or hold its
                                                count), RocketMQ's batch rules broken
                                                (delay, transaction, retry topic, WAIT values)
PROPERTIES_SIZE_EXCEEDED   INVALID_ARGUMENT     properties over 32767 bytes with the store's own
WRONG_QUEUE_TYPE           FAILED_PRECONDITION  an inner batch sent to a SimpleCQ topic
TOPIC_CONFLICT             ALREADY_EXISTS       the topic exists with another queue count or
                                                type (fixed at creation)
INVALID_ARGUMENT           INVALID_ARGUMENT     a malformed request: bytes that do not parse
                                                as the request message, empty names, negative
                                                counts or timestamps, unset or unknown enum
                                                values, a batch count that does not match its
                                                payload, reserved property names, a client
                                                creating or deleting a %RETRY% or %DLQ% topic
BAD_OFFSET_RANGE           INVALID_ARGUMENT     an offset or range that cannot be: negative
                                                offsets, end <= start (end != 0), a negative
                                                byte budget, a group offset committed past
                                                its queue's end. Offsets that are well formed but
                                                outside the stored data are no error: ReadRanges
                                                answers them with a RangeStatus
TRANSACTION_NOT_FOUND      NOT_FOUND            an end or query names a transaction id the
                                                broker does not know (no batch was prepared
                                                under it, or it ended before the retention)
TRANSACTION_ENDED          FAILED_PRECONDITION  the transaction's state forbids the call: a
                                                batch sent under an ended transaction, a
                                                commit of a rolled back one, a rollback of a
                                                committed one
TRANSACTION_INCOMPLETE     FAILED_PRECONDITION  a commit whose transaction holds another
                                                number of messages than the client says it
                                                sent, or a prepared batch damaged on disk;
                                                nothing was committed
GROUP_NOT_FOUND            NOT_FOUND            an ack or change of invisible time for a group
                                                that never popped on this broker
MESSAGE_NOT_FOUND          NOT_FOUND            a message id naming no stored message (remoting:
                                                view by id, a consumer's send-back)
RECEIPT_HANDLE_INVALID     INVALID_ARGUMENT     a receipt handle this broker did not issue
                                                (forged, damaged) or issued to another group
RECEIPT_HANDLE_EXPIRED     FAILED_PRECONDITION  ChangeInvisibleDuration on a handle whose message
                                                was acked, revived, or moved by an earlier change
                                                (acks answer per handle with an AckStatus instead)
SERVICE_NOT_AVAILABLE      UNAVAILABLE          the broker is stopping or its store is closed;
                                                retry against a running broker
SEND_IN_PROGRESS           ABORTED              an idempotent send whose earlier attempt is
                                                still being stored: retry to get its answer
STREAM_STALLED             DEADLINE_EXCEEDED    a ReadRanges client took no response for the
                                                broker's stream write timeout (60 s): the
                                                stream was ended; read again from the last
                                                next_offset received
TOO_MANY_REQUESTS          RESOURCE_EXHAUSTED   the client's address has as many calls being
                                                served as the broker allows (limits.py,
                                                --max-requests-in-flight-per-ip): nothing was
                                                done; retry later or send fewer at once
LIMIT_EXCEEDED             RESOURCE_EXHAUSTED   a topic creation past the topics or queues
                                                one client may create, or the broker may hold
                                                (--max-topics-created-per-client, --max-topics,
                                                ...): nothing was created
DISK_FULL                  RESOURCE_EXHAUSTED   the disk has less free space than the broker's
                                                reserve, or a file could not grow; nothing was
                                                stored: send again once space is freed
DISK_FAILED                UNAVAILABLE          the disk failed a flush or a write: the broker
                                                accepts no write until it is restarted (reads
                                                go on)
UNAUTHENTICATED            UNAUTHENTICATED      the broker checks ACLs (--acl-file) and the call
                                                proves no account: no authorization header, an
                                                unknown access key, a wrong secret, or a date
                                                too far from the broker's clock (a replay)
PERMISSION_DENIED          PERMISSION_DENIED    the account may not do this: publish to or read
                                                a topic, use a group, manage topics, or end
                                                another account's transaction; or the topic's
                                                perm forbids it (a send to a read-only topic,
                                                a read of a write-only one); nothing happened
INTERNAL                   INTERNAL             a fault of the broker (a bug): the sentence says
                                                so, its log has the traceback
=========================  ===================  ==============================================

Expected outcomes of reads (no message yet, offset too small, past the end, budget spent) are
``RangeStatus`` values in the ReadRanges stream, never errors.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import re
import struct
import time
from typing import Callable

import grpc

from broker_sim.core import ZERO_HOST
from broker_sim.core.errors import BrokerFault, Reason, from_exception, invalid
from rmq_wire import record as fmt
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2_pb2

REASON_KEY = "rmq-reason"

CODES = {
    Reason.TOPIC_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.QUEUE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.MESSAGE_TOO_LARGE: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.MESSAGE_ILLEGAL: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.PROPERTIES_SIZE_EXCEEDED: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.WRONG_QUEUE_TYPE: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.TOPIC_CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    Reason.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.BAD_OFFSET_RANGE: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.TRANSACTION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.TRANSACTION_ENDED: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.TRANSACTION_INCOMPLETE: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.GROUP_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.MESSAGE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Reason.RECEIPT_HANDLE_INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.RECEIPT_HANDLE_EXPIRED: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.SERVICE_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.SEND_IN_PROGRESS: grpc.StatusCode.ABORTED,
    Reason.STREAM_STALLED: grpc.StatusCode.DEADLINE_EXCEEDED,
    Reason.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.LIMIT_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.DISK_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.DISK_FAILED: grpc.StatusCode.UNAVAILABLE,
    Reason.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Reason.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Reason.INTERNAL: grpc.StatusCode.INTERNAL,
}


def code_of(error: BrokerFault) -> grpc.StatusCode:
    return CODES[error.reason]


class RefusedRequest:
    """Stands for a request refused before its handler: each door answers ``refusal()`` as its
    protocol does."""

    def __init__(self, error: BrokerFault):
        self.error = error

    def refusal(self) -> BrokerFault:
        return self.error


class MalformedRequest(RefusedRequest):
    """Stands for a request whose bytes do not parse as its message type."""

    def __init__(self, type_name: str, error: Exception):
        super().__init__(invalid(f"the request is not a valid {type_name} message ({error}); send it with the "
                                 "client of this protocol version"))


# The reason of the refusal a call ends with, for the broker's metrics (``timed``).
_REFUSED: contextvars.ContextVar[str | None] = contextvars.ContextVar("refused", default=None)


def abort(context: grpc.ServicerContext, error: BrokerFault):
    """End the call with the error's code, sentence and reason (raises, as context.abort)."""
    _REFUSED.set(error.reason.value)
    context.set_trailing_metadata(((REASON_KEY, error.reason.value),))
    context.abort(code_of(error), error.message)


ABORT = None  # how our contract answers a refusal: the call ends with the reason's gRPC status


def answering(answer: Callable[[BrokerFault], object] | None):
    """The decorator of a door's unary handlers, sync or coroutines: a request refused before its
    handler (``RefusedRequest``) or an exception of the handler becomes a ``BrokerFault``
    (``from_exception``), which the door answers its way: ``answer(error)`` is the response
    (RocketMQ 5's door: a response whose Status carries the code), or with ``ABORT`` the call
    ends with the error's gRPC status and its reason in the trailers (our contract)."""

    def decorate(method):
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def handler(self, request, context):
                try:
                    if isinstance(request, RefusedRequest):
                        raise request.refusal()
                    return await method(self, request, context)
                except Exception as err:  # context.abort raises too: only our own call is inside
                    error = from_exception(err)
                if answer is not ABORT:
                    return answer(error)
                await abort_stream(context, error)
        else:
            @functools.wraps(method)
            def handler(self, request, context):
                try:
                    if isinstance(request, RefusedRequest):
                        raise request.refusal()
                    return method(self, request, context)
                except Exception as err:
                    error = from_exception(err)
                if answer is not ABORT:
                    return answer(error)
                abort(context, error)

        return handler

    return decorate


translated = answering(ABORT)  # our contract's unary handlers, sync or coroutines


def translated_stream(method):
    """Decorate a response-streaming handler for the asyncio server: ``method`` is an async
    generator of responses, each sent by the servicer's ``write_response``, which answers the
    refusal that ends the stream when it cannot be sent: a client that takes none for
    ``write_timeout_s`` gets STREAM_STALLED (waiting, it held no thread: only the response on
    its way), one cut by the broker's memory budget TOO_MANY_REQUESTS. Exceptions of ``method`` become statuses as in
    ``translated``, also after some responses; a failed write (the client went away) is gRPC's
    to handle."""

    @functools.wraps(method)
    async def handler(self, request, context):
        if isinstance(request, RefusedRequest):
            await abort_stream(context, request.refusal())
        # Alone, first: an abort after a write that timed out must not send it again (gRPC refuses).
        await context.send_initial_metadata(())
        async with contextlib.aclosing(method(self, request, context)) as responses:
            while True:
                try:
                    response = await anext(responses)
                except StopAsyncIteration:
                    return
                except Exception as err:
                    error = from_exception(err)
                    break
                error = await self.write_response(context, response)
                if error is not None:
                    break
        await abort_stream(context, error)

    return handler


async def abort_stream(context: grpc.aio.ServicerContext, error: BrokerFault):
    """``abort`` for the asyncio handlers, unary or streaming."""
    _REFUSED.set(error.reason.value)
    await context.abort(code_of(error), error.message, ((REASON_KEY, error.reason.value),))


def timed(behavior, protocol: str, request_code: str, metrics):
    """``behavior`` (a handler: sync, a coroutine, a generator or an async one) with each call in the
    broker's metrics (``metrics.answered``): its door, its method, and how it ended, in lower
    case as RocketMQ names codes: the reason of the refusal it ended with (``topic_not_found``),
    the Status code of a RocketMQ 5 response (``bad_request``), ``ok``, or ``failed`` for an
    exception no refusal named (gRPC's INTERNAL)."""
    clock = time.perf_counter

    def answered(started: float, response, failed: bool) -> None:
        metrics.answered(protocol, request_code, _response_code(response, failed), clock() - started)

    if inspect.isasyncgenfunction(behavior):
        async def streamed(request, context):
            started, last, failed = clock(), None, True
            _REFUSED.set(None)
            try:
                async for last in behavior(request, context):
                    yield last
                failed = False
            finally:
                answered(started, last, failed)
        return streamed
    if inspect.isgeneratorfunction(behavior):
        def generated(request, context):
            started, last, failed = clock(), None, True
            _REFUSED.set(None)
            try:
                for last in behavior(request, context):
                    yield last
                failed = False
            finally:
                answered(started, last, failed)
        return generated
    if inspect.iscoroutinefunction(behavior):
        async def awaited(request, context):
            started, response, failed = clock(), None, True
            _REFUSED.set(None)
            try:
                response = await behavior(request, context)
                failed = False
                return response
            finally:
                answered(started, response, failed)
        return awaited

    def called(request, context):
        started, response, failed = clock(), None, True
        _REFUSED.set(None)
        try:
            response = behavior(request, context)
            failed = False
            return response
        finally:
            answered(started, response, failed)
    return called


def _response_code(response, failed: bool) -> str:
    refused = _REFUSED.get()
    if refused is not None:
        return refused.lower()
    if failed:
        return "failed"
    status = getattr(response, "status", None)
    if isinstance(status, v2_pb2.Status) and status.code != v2_pb2.OK:
        return v2_pb2.Code.Name(status.code).lower() if status.code in v2_pb2.Code.values() else str(status.code)
    return "ok"


_PEER_IPV4 = re.compile(r"^ipv4:(\d+\.\d+\.\d+\.\d+):(\d+)$")


def peer_remote(peer: str) -> str:
    """The client's address as the logs write it ("ipv4:127.0.0.1:5555" -> "127.0.0.1:5555")."""
    kind, sep, address = (peer or "").partition(":")
    return address if sep and kind in ("ipv4", "ipv6") else (peer or "")


def peer_host(peer: str) -> bytes:
    """The client's address as RocketMQ's BORNHOST (IPv4 and port); zeros when not IPv4."""
    match = _PEER_IPV4.match(peer or "")
    if match:
        try:
            return fmt.encode_host(match.group(1), int(match.group(2)))
        except (OSError, struct.error):
            pass
    return ZERO_HOST
