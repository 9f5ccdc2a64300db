"""The Pop service's servicer: protobuf <-> BrokerCore pop calls, nothing more."""

from __future__ import annotations

import asyncio

from broker_sim.core import AckStatus, BrokerCore
from broker_sim.doors.contract.serialized import with_bytes_field
from broker_sim.doors.grpc_common import translated
from broker_sim.doors.grpc_limits import client_of
from rmq_wire.contract import pop_pb2 as pb
from rmq_wire.contract import pop_pb2_grpc as pb_grpc

_RECORDS_FIELD = pb.PopResponse.DESCRIPTOR.fields_by_name["records"].number
_ACK_STATUS = {AckStatus.EXPIRED: pb.ACK_EXPIRED, AckStatus.INVALID: pb.ACK_INVALID}


class PopServicer(pb_grpc.PopServicer):
    """Pops and acks run on the event loop when their state writes never wait for a disk sync
    (a pool thread's hand-off costs more than the call, as for sends); a pop that finds
    nothing and may wait for messages waits in the pool, and so does every pop while its read
    may wait for the index (read-your-writes: ``BrokerCore.reads_may_wait``)."""

    def __init__(self, core: BrokerCore):
        self._core = core

    @translated
    async def Pop(self, request, context):
        quota_client = client_of(context)
        loop = asyncio.get_running_loop()
        acked = []  # the acks the pop carries, done once, before it
        if request.ack_receipt_handles:
            acked = (await loop.run_in_executor(None, self._acked, request) if self._core.pop_waits_for_disk
                     else self._acked(request))
        if not self._core.pop_waits_for_disk and not self._core.reads_may_wait():
            found, answer = self._pop(request, 0, context.peer(), quota_client, acked)
            if found or not request.poll_time_ms:
                return answer
        _found, answer = await loop.run_in_executor(
            None, self._pop, request, request.poll_time_ms, context.peer(), quota_client, acked)
        return answer

    @translated
    async def Ack(self, request, context):
        if self._core.pop_waits_for_disk:
            return await asyncio.get_running_loop().run_in_executor(None, self._ack, request)
        return self._ack(request)

    def _pop(self, request, poll_time_ms: int, peer: str, quota_client: str = "",
             ack_failures: list = ()) -> tuple[bool, bytes]:
        """Whether the pop found deliveries, and its answer; ``peer``: who pops; ``quota_client``:
        who is charged for a group this makes (limits.client_key); ``ack_failures``: of the acks
        it carried."""
        def answer(result):  # its records are views of the store: copied into the answer here
            found = result.deliveries
            checkpoints = [d.checkpoint for d in found]
            head = pb.PopResponse(
                receipt_handles=[d.receipt_handle for d in found], topic=request.topic,
                queue_ids=[ck.queue_id for ck in checkpoints], offsets=[ck.offset for ck in checkpoints],
                counts=[ck.count for ck in checkpoints], reconsume_times=[ck.reconsume_times for ck in checkpoints],
                retry=[d.retry for d in found], record_bytes=[d.record_size for d in found],
                invisible_until_ms=checkpoints[0].deadline_ms if checkpoints else 0,
                polling_full=result.polling_full, ack_failures=ack_failures)
            return bool(found), with_bytes_field(head, _RECORDS_FIELD, result.parts)

        return self._core.pop(request.group, request.topic, request.queue_id, request.max_messages,
                              request.invisible_time_ms, poll_time_ms, request.tag_filter, request.orderly, answer,
                              client=peer, quota_client=quota_client)

    def _ack(self, request):
        return pb.AckResponse(failures=self._acked(request))

    def _acked(self, request) -> list:
        """Ack the handles of an AckRequest, or those a PopRequest carries; the failures."""
        handles = request.receipt_handles if isinstance(request, pb.AckRequest) else request.ack_receipt_handles
        return [pb.AckFailure(index=f.index, status=_ACK_STATUS[f.status], detail=f.detail)
                for f in self._core.ack(request.group, list(handles))]

    @translated
    def ChangeInvisibleDuration(self, request, context):
        handle, until = self._core.change_invisible_duration(request.group, request.receipt_handle,
                                                             request.invisible_time_ms)
        return pb.ChangeInvisibleDurationResponse(receipt_handle=handle, invisible_until_ms=until)
