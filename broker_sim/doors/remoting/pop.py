"""RocketMQ 5's pop over remoting (POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME) on the same RocksDB pop state as our gRPC door's pop.

RocketMQ's clients name a popped message by its "extra info" (ExtraInfoUtil): the pop time,
the invisible time, whether it came from the retry topic, its queue and offset, built from the
pop response's header. Their sum is the unit's visibility deadline, which with the group,
topic, queue and offset is the unit's key in the pop state: the door turns it back into a
receipt handle and acks or changes through the core.
"""

from __future__ import annotations

import base64
import binascii
import time

import numpy as np
import orjson

from broker_sim.core import BrokerCore, BrokerFault, Reason, parse_tag_filter, refused, retry_topic
from broker_sim.core.limits import client_key
from broker_sim.doors.remoting import bodies
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
                RequestCode.BATCH_ACK_MESSAGE: (self.batch_ack, False),
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
                             fields.integer("pollTime"), expression, orderly, answer, client=connection.remote,
                             quota_client=client_key(connection.client, request.account))

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

    def batch_ack(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """The acks of many popped messages in one request (RocketMQ 5.1.3's BATCH_ACK_MESSAGE):
        per pop of a queue, the pop's start offset and a bitset of the offsets acked from it;
        acked through the core in one call per group. RocketMQ answers SUCCESS whatever it
        could ack; this door says, as its ACK_MESSAGE does, when some could not be."""
        handles: dict[str, list[str]] = {}
        missing: list[BrokerFault] = []  # messages no longer in flight, found so by their receipt
        for ack in batch_acks(request.body):
            group, topic = ack["group"], ack["topic"]
            if ack["retry"] in (RETRY_V1, RETRY_V2):
                topic = retry_topic(group, topic)
            deadline, orderly = ack["pop_time"] + ack["invisible_time"], ack["revive_queue"] == ORDER_REVIVE_QUEUE
            for bit in ack["bits"]:
                try:
                    handles.setdefault(group, []).append(
                        self.core.receipt_at(group, topic, ack["queue_id"], ack["start_offset"] + bit, deadline,
                                             orderly))
                except BrokerFault as err:
                    if err.reason is not Reason.RECEIPT_HANDLE_EXPIRED:
                        raise
                    missing.append(err)
        total = sum(map(len, handles.values())) + len(missing)
        if not total:
            return request.response(ResponseCode.NO_MESSAGE, "the batch ack names no message")
        failures = [f.detail for group, named in handles.items() for f in self.core.ack(group, named)]
        failures += [err.message for err in missing]
        if failures:
            return request.response(ResponseCode.NO_MESSAGE, f"{len(failures)} of {total} acks failed (the rest were "
                                                             f"acked); the first: {failures[0]}")
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


_BATCH_ACK = "batch ack"
# BatchAck's fields: the short names RocketMQ's clients write, and the long ones fastjson also reads
_BATCH_ACK_FIELDS = {"group": ("c", "consumerGroup"), "topic": ("t", "topic"), "retry": ("r", "retry"),
                     "start_offset": ("so", "startOffset"), "queue_id": ("q", "queueId"),
                     "revive_queue": ("rq", "reviveQueueId"), "pop_time": ("pt", "popTime"),
                     "invisible_time": ("it", "invisibleTime")}


def batch_acks(body: bytes) -> list[dict]:
    """The acks of a BatchAckMessageRequestBody, each with ``bits``: the offsets acked, from
    its start offset (its bitset, java.util.BitSet's bytes in Base64). A body that is not one
    is refused, naming what is wrong."""
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as bad:
        raise refused(Reason.INVALID_ARGUMENT, f"the batch ack's body is not JSON: {bad}") from None
    if not isinstance(data, dict):
        raise refused(Reason.INVALID_ARGUMENT, "the batch ack's body is not a BatchAckMessageRequestBody object")
    acks = []
    for item in bodies.objects(data, "acks", _BATCH_ACK):
        ack = {}
        for name, (short, long) in _BATCH_ACK_FIELDS.items():
            key = short if short in item else long
            if name in ("group", "topic", "retry"):
                ack[name] = bodies.text(item, key, _BATCH_ACK, NORMAL if name == "retry" else "")
            else:
                ack[name] = bodies.integer(item, key, _BATCH_ACK, 0)
        if not ack["group"] or not ack["topic"]:
            raise refused(Reason.INVALID_ARGUMENT, "an ack of the batch names no consumer group or topic: send "
                                                   "them as RocketMQ's clients do (c, t)")
        bitset = bodies.text(item, "b" if "b" in item else "bitSet", _BATCH_ACK)
        try:
            raw = base64.b64decode(bitset, validate=True)
        except (binascii.Error, ValueError):
            raise refused(Reason.INVALID_ARGUMENT, f"an ack's bitset {bitset[:40]!r} is not Base64: send "
                                                   "java.util.BitSet's toByteArray() as fastjson writes it") from None
        ack["bits"] = np.flatnonzero(np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")).tolist()
        acks.append(ack)
    return acks


def _bad_extra_info(request: RemotingCommand) -> BrokerFault:
    return refused(Reason.INVALID_ARGUMENT, f"extraInfo {request.ext_fields.get('extraInfo', '')[:80]!r} is not "
                                            "what a pop answered: send the message's POP_CK property as it came")
