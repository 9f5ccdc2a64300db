"""The Pop service's servicer: protobuf <-> PopService calls, nothing more."""

from __future__ import annotations

from rmq_spark.protocol.v1 import pop_pb2 as pb
from rmq_spark.protocol.v1 import pop_pb2_grpc as pb_grpc

from broker_sim.pop import AckStatus, PopService

from .errors import translated
from .servicers import CallGate, TagFilter

_ACK_STATUS = {AckStatus.OK: pb.ACK_OK, AckStatus.EXPIRED: pb.ACK_EXPIRED, AckStatus.INVALID: pb.ACK_INVALID}


class PopServicer(pb_grpc.PopServicer):
    def __init__(self, service: PopService, gate: CallGate):
        self._service = service
        self._gate = gate

    @translated
    def Pop(self, request, context):
        tags = TagFilter.parse(request.tag_filter)
        with self._gate:  # records are copied out of the store inside
            result = self._service.pop(request.group, request.topic, request.queue_id, request.max_messages,
                                       request.invisible_time_ms, request.poll_time_ms, tags, request.orderly)
        return pb.PopResponse(deliveries=[
            pb.PopDelivery(receipt_handle=d.receipt_handle, topic=d.origin_topic, queue_id=d.checkpoint.queue_id,
                           offset=d.checkpoint.offset, count=d.checkpoint.count,
                           reconsume_times=d.checkpoint.reconsume_times, invisible_until_ms=d.checkpoint.deadline_ms,
                           retry=d.retry, record_bytes=d.record_size)
            for d in result.deliveries], records=result.records, polling_full=result.polling_full)

    @translated
    def Ack(self, request, context):
        with self._gate:
            outcomes = self._service.ack(request.group, list(request.receipt_handles))
        return pb.AckResponse(results=[pb.AckResult(status=_ACK_STATUS[o.status], detail=o.detail) for o in outcomes])

    @translated
    def ChangeInvisibleDuration(self, request, context):
        with self._gate:
            handle, until = self._service.change_invisible_duration(request.group, request.receipt_handle,
                                                                    request.invisible_time_ms)
        return pb.ChangeInvisibleDurationResponse(receipt_handle=handle, invisible_until_ms=until)
