"""RocketMQ's pop consumption (RocketMQ 5): POP_MESSAGE to one broker at a time (the brokers in
turn), acks as one BATCH_ACK_MESSAGE a broker where it has it (RocketMQ 5.1.3 and later) or an
ACK_MESSAGE a handle, CHANGE_MESSAGE_INVISIBLETIME; a popped message's receipt handle is where it
is and the pop that handed it out (``Receipt``)."""

from __future__ import annotations

import base64
import itertools
import time

import numpy as np
import orjson

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers
from rmq_spark.client.remoting.versions import POP
from rmq_spark.client.transport import AckFailure, Popped, PopQuery
from rmq_spark.errors import InvalidRequestError, RmqError
from rmq_wire.codec.records import read_headers
from rmq_wire.record import PROPERTY_INNER_NUM, SysFlag, find_property
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode

_NOTHING = (ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL, ResponseCode.PULL_NOT_FOUND,
            ResponseCode.NO_MESSAGE)  # a pop's answers when there is nothing to hand out


class Pops:
    def __init__(self, calls: Calls, names: NameServers):
        self.calls = calls
        self.names = names
        self._turns = itertools.count()

    def pop(self, query: PopQuery) -> Popped:
        """A POP_MESSAGE; the acks it carries go first, as a batch ack (RocketMQ's pop takes none)."""
        if query.ack_handles:
            failures = self.ack(query.group, list(query.ack_handles))
            return self.pop(query._replace(ack_handles=()))._replace(ack_failures=failures)
        route = self.names.route(query.topic)
        readers = [b for b in route.brokers if b.read_queues]
        if query.queue_id >= 0:
            entry = next(b for b in route.brokers if b.broker == route.only_broker())
        else:  # a pop goes to one broker: the brokers in turn
            entry = readers[next(self._turns) % len(readers)]
        self.calls.require(POP, entry.broker, entry.address)
        fields = {"consumerGroup": query.group, "topic": query.topic, "queueId": query.queue_id,
                  "maxMsgNums": query.max_messages, "invisibleTime": query.invisible_ms, "pollTime": query.poll_ms,
                  "bornTime": int(time.time() * 1000), "initMode": 0, "expType": "TAG",
                  "exp": query.tag_filter or "*", "order": str(query.orderly).lower()}
        answer = self.calls.invoke(entry.address, RequestCode.POP_MESSAGE, fields,
                                   timeout_ms=self.calls.config.timeout_ms + query.poll_ms)
        head = answer.ext_fields
        invisible_until = int(head.get("popTime", 0)) + int(head.get("invisibleTime", query.invisible_ms))
        if answer.code != ResponseCode.SUCCESS:
            if answer.code not in _NOTHING:
                raise refused(answer, f"broker {entry.broker} refused a pop of {query.topic!r} by {query.group!r}")
            return Popped(query.topic, invisible_until, answer.code == ResponseCode.POLLING_FULL, (), (), (), (), (),
                          (), (), memoryview(b""), entry.broker)
        return _popped(query, answer, entry.broker, invisible_until)

    def ack(self, group: str, receipt_handles: list[str]) -> list[AckFailure]:
        """One BATCH_ACK_MESSAGE a broker (RocketMQ 5.1.3 and later, and broker_sim), else an
        ACK_MESSAGE a handle. A batch ack's answer is one for all its handles: a refusal fails
        each of them (RocketMQ answers SUCCESS whatever it could ack)."""
        failures, by_address = [], {}
        for index, handle in enumerate(receipt_handles):
            try:
                receipt = Receipt.parse(handle)
                address = self.names.route(receipt.topic).address(receipt.broker)
            except (ValueError, RmqError) as err:
                failures.append(AckFailure(index, True, f"not a receipt handle of this client: {err}"))
                continue
            by_address.setdefault(address, []).append((index, receipt))
        calls, sent = [], []
        for address, receipts in by_address.items():
            body = _batch_ack_body(group, receipts) if len(receipts) > 1 else None
            if body is not None and self.calls.broker_version(address).batch_ack:
                answer = self.calls.invoke(address, RequestCode.BATCH_ACK_MESSAGE, {}, body)
                if answer.code != ResponseCode.SUCCESS:
                    failures += [AckFailure(index, answer.code != ResponseCode.NO_MESSAGE, answer.remark or "")
                                 for index, _receipt in receipts]
                continue
            calls += [(address, RequestCode.ACK_MESSAGE, receipt.fields(group)) for _index, receipt in receipts]
            sent += [index for index, _receipt in receipts]
        for index, answer in zip(sent, self.calls.invoke_all(calls)):
            if answer.code != ResponseCode.SUCCESS:
                failures.append(AckFailure(index, answer.code != ResponseCode.NO_MESSAGE, answer.remark or ""))
        return sorted(failures)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        try:
            receipt = Receipt.parse(receipt_handle)
        except ValueError as err:
            raise InvalidRequestError(f"not a receipt handle of this client: {err}") from None
        address = self.names.route(receipt.topic).address(receipt.broker)
        answer = self.calls.invoke(address, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                                   {**receipt.fields(group), "invisibleTime": invisible_ms})
        if answer.code != ResponseCode.SUCCESS:
            raise refused(answer, f"broker {receipt.broker} refused to change the invisible time")
        head = answer.ext_fields
        renewed = receipt.renewed(int(head["popTime"]), int(head["invisibleTime"]), head.get("reviveQid", "0"))
        return renewed.encode(), int(head["popTime"]) + int(head["invisibleTime"])


class Receipt:
    """Where a popped message is and the pop that handed it out: what an ack or a change of
    invisible time names (RocketMQ's extra info), as one string."""

    SEPARATOR = "\x1f"

    def __init__(self, broker: str, topic: str, queue_id: int, offset: int, extra: list[str]):
        self.broker, self.topic, self.queue_id, self.offset, self.extra = broker, topic, queue_id, offset, extra

    @classmethod
    def parse(cls, handle: str) -> "Receipt":
        parts = handle.split(cls.SEPARATOR)
        if len(parts) != 5 or len(parts[4].split(" ")) != 8:
            raise ValueError(f"{handle[:60]!r} is not broker, topic, queue, offset and pop info")
        return cls(parts[0], parts[1], int(parts[2]), int(parts[3]), parts[4].split(" "))

    def encode(self) -> str:
        parts = [self.broker, self.topic, str(self.queue_id), str(self.offset), " ".join(self.extra)]
        return self.SEPARATOR.join(parts)

    def fields(self, group: str) -> dict:
        return {"consumerGroup": group, "topic": self.topic, "queueId": self.queue_id, "offset": self.offset,
                "extraInfo": " ".join(self.extra)}

    def renewed(self, pop_time: int, invisible_ms: int, revive_queue: str) -> "Receipt":
        extra = list(self.extra)
        extra[1:4] = [str(pop_time), str(invisible_ms), revive_queue]
        return Receipt(self.broker, self.topic, self.queue_id, self.offset, extra)


def _batch_ack_body(group: str, receipts: list[tuple[int, Receipt]]) -> bytes | None:
    """A BatchAckMessageRequestBody as RocketMQ's Java client makes one: an ack per pop of a
    queue (its retry mark, queue, start offset and pop time), with the offsets acked as a
    java.util.BitSet from the start offset (its bytes, little-endian, in Base64). None when a
    handle's pop info does not fit one (each is then acked alone, and answered on its own)."""
    acks = {}
    for _index, receipt in receipts:
        start, pop_time, invisible, revive_queue, mark = receipt.extra[:5]
        if not all(part.lstrip("-").isdigit() for part in (start, pop_time, invisible, revive_queue)) or \
                receipt.offset < int(start):
            return None
        ack = acks.get((mark, receipt.queue_id, start, pop_time))
        if ack is None:
            ack = acks[(mark, receipt.queue_id, start, pop_time)] = {
                "c": group, "t": receipt.topic, "r": mark, "so": int(start), "q": receipt.queue_id,
                "rq": int(revive_queue), "pt": int(pop_time), "it": int(invisible), "b": []}
        ack["b"].append(receipt.offset - int(start))
    for ack in acks.values():
        bits = np.zeros(max(ack["b"]) + 1, dtype=bool)
        bits[ack["b"]] = True
        ack["b"] = base64.b64encode(np.packbits(bits, bitorder="little").tobytes()).decode()
    broker = receipts[0][1].broker
    return orjson.dumps({"brokerName": broker, "acks": list(acks.values())})


def _popped(query: PopQuery, answer: RemotingCommand, broker: str, invisible_until: int) -> Popped:
    """A pop answer's records as the SDK's deliveries (one a stored record)."""
    head = answer.ext_fields
    starts = {}
    for part in (head.get("startOffsetInfo") or "").split(";"):
        mark, queue_id, start = (part.split(" ") + ["", "", ""])[:3]
        if start:
            starts[(mark, int(queue_id))] = start
    records = read_headers(answer.body)
    view = memoryview(answer.body)
    handles, counts, retry, reconsumes = [], [], [], []
    for i in range(len(records)):
        topic = bytes(view[records.topic_start[i]:records.topic_start[i] + records.topic_length[i]]).decode()
        is_retry = topic.startswith("%RETRY%")
        mark = ("2" if "+" in topic else "1") if is_retry else "0"
        queue_id, offset = int(records.queue_id[i]), int(records.queue_offset[i])
        start = records.start[i]
        reconsumes.append(int.from_bytes(view[start + 72:start + 76], "big", signed=True))
        extra = [starts.get((mark, queue_id), str(offset)), head.get("popTime", "0"), head.get("invisibleTime", "0"),
                 head.get("reviveQid", "0"), mark, broker, str(queue_id), str(offset)]
        handles.append(Receipt(broker, query.topic, queue_id, offset, extra).encode())
        counts.append(_inner_num(view, records, i))
        retry.append(is_retry)
    return Popped(query.topic, invisible_until, False, handles, records.queue_id.tolist(),
                  records.queue_offset.tolist(), counts, reconsumes, retry, records.total.tolist(), view, broker)


def _inner_num(view: memoryview, records, i: int) -> int:
    if not records.sys_flag[i] & SysFlag.INNER_BATCH:
        return 1
    props = bytes(view[records.props_start[i]:records.props_start[i] + records.props_length[i]])
    count = find_property(props, PROPERTY_INNER_NUM.encode())
    return int(count) if count is not None else 1
