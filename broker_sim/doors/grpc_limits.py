"""The gRPC port's per-client limit: calls being served at once per client address, for our
contract and RocketMQ 5's MessagingService alike (broker_sim.core.limits holds the limits).

grpc python offers no hook per connection, so connections per address are not limited here;
what one client holds is bounded by its calls in flight instead, and what one connection
holds by ``grpc.max_concurrent_streams`` (``max_streams_per_connection``). A call past the limit is refused as it
arrives, on the event loop, before it waits for a thread: RESOURCE_EXHAUSTED with reason
TOO_MANY_REQUESTS on our contract, TOO_MANY_REQUESTS (42900) in the answer's status on
RocketMQ 5's, as its proxy's flow control answers.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from concurrent.futures import Executor

import grpc
from grpc._cython import cygrpc

from broker_sim.core.limits import ClientLimits, client_key, too_many_requests
from broker_sim.doors.grpc_acl import caller
from broker_sim.doors.grpc_common import abort_stream
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2

_V2_SERVICE = v2.DESCRIPTOR.services_by_name["MessagingService"]
_V2_PREFIX = f"/{_V2_SERVICE.full_name}/"
_V2_ANSWERS = {_V2_PREFIX + m.name: getattr(v2, m.output_type.name) for m in _V2_SERVICE.methods}
# Not calls but sessions or long polls: a client's Telemetry stream lasts as long as the client,
# and ReceiveMessage waits under the pop service's own cap of waiting pops.
UNCOUNTED = frozenset({_V2_PREFIX + "Telemetry", _V2_PREFIX + "ReceiveMessage"})
_PEER = re.compile(r"^ipv[46]:\[?(.*?)\]?:\d+$")
UNCOUNTED_STREAMS_PER_CONNECTION = 64  # Telemetry sessions and ReceiveMessage polls one connection may hold


def max_streams_per_connection(limits: ClientLimits) -> int:
    """gRPC's max_concurrent_streams: room for the calls a client may have in flight, so that
    the one past them reaches the broker and is refused with a sentence (rather than wait in
    the client), and for a bounded number of the calls not counted."""
    return limits.max_requests_in_flight_per_ip + UNCOUNTED_STREAMS_PER_CONNECTION


def peer_address(peer: str) -> str:
    """The client's address in gRPC's peer string ("ipv4:127.0.0.1:5555" -> "127.0.0.1")."""
    match = _PEER.match(peer or "")
    return match.group(1) if match else (peer or "")


def client_of(context) -> str:
    """The client a call comes from, for every per-client limit of the gRPC port: its account
    inside a handler admitted by ACLs, else its address (calls in flight are counted by address,
    before any signature is checked)."""
    return client_key(peer_address(context.peer()), caller())


class CallsInFlight(grpc.aio.ServerInterceptor):
    """Refuses a call at once when its client has ``limit`` calls being served. Sync handlers
    (unary ones of the pool) are run in ``pool`` by this interceptor, as grpc runs them, so that
    a call is counted (or refused) when it arrives rather than once a thread takes it."""

    def __init__(self, limit: int, pool: Executor):
        self.limit = limit
        self.pool = pool
        self.calls: dict[str, int] = {}  # client -> calls being served; touched on the loop only

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or details.method in UNCOUNTED:
            return handler
        answer = _V2_ANSWERS.get(details.method)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._counted_unary(handler.unary_unary, answer), handler.request_deserializer,
                handler.response_serializer)
        if handler.unary_stream and _async(handler.unary_stream):
            return grpc.unary_stream_rpc_method_handler(
                self._counted_stream(handler.unary_stream, answer), handler.request_deserializer,
                handler.response_serializer)
        return handler  # a kind of call the broker does not serve: not counted

    def _enter(self, client: str):
        """None when the call may go on (counted), else the refusal."""
        held = self.calls.get(client, 0)
        if held >= self.limit:
            return too_many_requests(held, f"client {client}", "max-requests-in-flight-per-ip")
        self.calls[client] = held + 1
        return None

    def _leave(self, client: str) -> None:
        held = self.calls.pop(client) - 1
        if held:
            self.calls[client] = held

    def _counted_unary(self, behavior, answer):
        call = behavior if _async(behavior) else self._in_pool(behavior)

        async def counted(request, context):
            client = client_of(context)
            refusal = self._enter(client)
            if refusal is not None:
                if answer is not None:  # RocketMQ 5: the outcome travels in the answer's status
                    return answer(status=v2.Status(code=v2.TOO_MANY_REQUESTS, message=refusal.message))
                await abort_stream(context, refusal)
            try:
                return await call(request, context)
            finally:
                self._leave(client)

        return counted

    def _counted_stream(self, behavior, answer):
        if inspect.isasyncgenfunction(behavior):
            async def counted_responses(request, context):
                client = client_of(context)
                refusal = self._enter(client)
                if refusal is not None:
                    if answer is None:
                        await abort_stream(context, refusal)
                    yield answer(status=v2.Status(code=v2.TOO_MANY_REQUESTS, message=refusal.message))
                    return
                try:
                    async for response in behavior(request, context):
                        yield response
                finally:
                    self._leave(client)

            return counted_responses

        async def counted_writes(request, context):  # a handler that writes its responses itself
            client = client_of(context)
            refusal = self._enter(client)
            if refusal is not None:
                await abort_stream(context, refusal)
            try:
                await behavior(request, context)
            finally:
                self._leave(client)

        return counted_writes

    def _in_pool(self, behavior):
        async def call(request, context):
            # The context a sync handler gets from grpc: it may abort from the pool's thread.
            sync_context = cygrpc._SyncServicerContext(context)
            return await asyncio.get_running_loop().run_in_executor(self.pool, behavior, request, sync_context)

        return call


def _async(behavior) -> bool:
    return inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)
