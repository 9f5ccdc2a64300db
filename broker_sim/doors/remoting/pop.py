"""RocketMQ 5's pop over remoting (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME) on
the same RocksDB pop state as our gRPC door's pop.

RocketMQ's clients name a popped message by its "extra info" (ExtraInfoUtil): the pop time,
the invisible time, whether it came from the retry topic, its queue and offset, built from the
pop response's header. Their sum is the unit's visibility deadline, which with the group,
topic, queue and offset is the unit's key in the pop state: the door turns it back into a
receipt handle and acks or changes through the core.
"""

from __future__ import annotations

import time

from broker_sim.core import BrokerCore, BrokerError, Reason, parse_tag_filter, refused, retry_topic
from broker_sim.doors.remoting.fields import Fields
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode

NORMAL, RETRY_V1, RETRY_V2 = "0", "1", "2"  # ExtraInfoUtil's topic marks
ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: the reviveQid of orderly pops


class PopRequests:
    def __init__(self, core: BrokerCore):
        self.core = core

    def handlers(self) -> dict:
        """{code: (handler, blocking)}: a pop may wait for messages (its pollTime)."""
        return {RequestCode.POP_MESSAGE: (self.pop, True), RequestCode.ACK_MESSAGE: (self.ack, False),
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: (self.change_invisible_time, False)}

    def pop(self, request: RemotingCommand, connection) -> RemotingCommand:
        fields = Fields(request)
        group, topic = fields.text("consumerGroup"), fields.text("topic")
        invisible = fields.integer("invisibleTime")
        orderly = fields.flag("order")
        expression = fields.text("exp", "*") if fields.text("expType", "TAG") == "TAG" else "*"
        parse_tag_filter(expression)  # refused before any wait

        def answer(result):
            header = self._pop_header(result, invisible, orderly)
            if not result.deliveries:  # the header still goes: RocketMQ's clients decode it on every answer
                code = ResponseCode.POLLING_FULL if result.polling_full else ResponseCode.POLLING_TIMEOUT
                return request.response(code, "no new message" if code == ResponseCode.POLLING_TIMEOUT
                                        else "too many pops wait already: pop again later", header)
            return request.response(ResponseCode.SUCCESS, ext_fields=header, body=result.records)

        return self.core.pop(group, topic, fields.integer("queueId"), fields.integer("maxMsgNums"), invisible,
                             fields.integer("pollTime"), expression, orderly, answer, client=connection.remote)

    @staticmethod
    def _pop_header(result, invisible_ms: int, orderly: bool) -> dict:
        starts, offsets = {}, {}
        for unit in result.deliveries:
            ck = unit.checkpoint
            key = f"{RETRY_V2 if unit.retry else NORMAL} {ck.queue_id}"
            starts.setdefault(key, ck.offset)
            offsets.setdefault(key, []).extend(range(ck.offset, ck.offset + ck.count))
        pop_time = result.deliveries[0].checkpoint.deadline_ms - invisible_ms if result.deliveries \
            else int(time.time() * 1000)
        return {"popTime": str(pop_time), "invisibleTime": str(invisible_ms),
                "reviveQid": str(ORDER_REVIVE_QUEUE if orderly else 0), "restNum": "0",
                "startOffsetInfo": ";".join(f"{k} {v}" for k, v in starts.items()),
                "msgOffsetInfo": ";".join(f"{k} {','.join(map(str, v))}" for k, v in offsets.items())}

    def ack(self, request: RemotingCommand, _connection) -> RemotingCommand:
        group, handle = self._handle(request)
        failures = self.core.ack(group, [handle])
        if failures:
            return request.response(ResponseCode.NO_MESSAGE, failures[0].detail)
        return request.response(ResponseCode.SUCCESS)

    def change_invisible_time(self, request: RemotingCommand, _connection) -> RemotingCommand:
        group, handle = self._handle(request)
        invisible = Fields(request).integer("invisibleTime")
        _handle, deadline = self.core.change_invisible_duration(group, handle, invisible)
        orderly = self._extra_info(request)[3] == str(ORDER_REVIVE_QUEUE)
        return request.response(ResponseCode.SUCCESS, ext_fields={
            "popTime": str(deadline - invisible), "invisibleTime": str(invisible),
            "reviveQid": str(ORDER_REVIVE_QUEUE if orderly else 0)})

    def _handle(self, request: RemotingCommand) -> tuple[str, str]:
        """(group, the receipt handle of the message the request names)."""
        fields = Fields(request)
        group, topic = fields.text("consumerGroup"), fields.text("topic")
        extra = self._extra_info(request)
        try:
            pop_time, invisible = int(extra[1]), int(extra[2])
            orderly = int(extra[3]) == ORDER_REVIVE_QUEUE
        except ValueError:
            raise _bad_extra_info(request) from None
        if extra[4] in (RETRY_V1, RETRY_V2):
            topic = retry_topic(group, topic)
        handle = self.core.receipt_at(group, topic, fields.integer("queueId"), fields.integer("offset"),
                                      pop_time + invisible, orderly)
        return group, handle

    @staticmethod
    def _extra_info(request: RemotingCommand) -> list[str]:
        extra = Fields(request).text("extraInfo").split(" ")
        if len(extra) < 5:
            raise _bad_extra_info(request)
        return extra


def _bad_extra_info(request: RemotingCommand) -> BrokerError:
    return refused(Reason.INVALID_ARGUMENT, f"extraInfo {request.ext_fields.get('extraInfo', '')[:80]!r} is not "
                                            "what a pop answered: send the message's POP_CK property as it came")
