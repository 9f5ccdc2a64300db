"""Messages between RocketMQ 5's gRPC protocol and the core: what a v2 client sends becomes a
core send with RocketMQ's properties (as the proxy's SendMessageActivity builds them), and a
stored record becomes v2 messages (as the proxy's GrpcConverter builds them), an inner batch
handed out message by message."""

from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from broker_sim.core import EarlyBatchSend, InnerBatchSend, Reason, SendRequest, SingleSend, refused
from broker_sim.doors.rocketmq_v2 import receipts
from broker_sim.doors.rocketmq_v2.errors import V2Refusal
from rmq_wire import record as fmt
from rmq_wire.codec import SYSTEM_PROPERTIES, Compression, decompress
from rmq_wire.codec.records import decode_records
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2

SHARDING_KEY = "__SHARDINGKEY"  # a FIFO message's group
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_HOST = "__BORNHOST"
CHECK_IMMUNITY_SECONDS = fmt.PROPERTY_CHECK_IMMUNITY_SECONDS
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
_SYSTEM_ONLY = {fmt.PROPERTY_UNIQ_KEY, SHARDING_KEY, TIMER_DELIVER_MS, TRACE_CONTEXT, BORN_HOST, CHECK_IMMUNITY_SECONDS,
                DLQ_ORIGIN_TOPIC, DLQ_ORIGIN_MESSAGE_ID, fmt.PROPERTY_TRANSACTION_PREPARED, "PGROUP", "RETRY_TOPIC",
                "REAL_TOPIC", "REAL_QID", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "MAX_RECONSUME_TIMES",
                "__BORNTIMESTAMP", *fmt.PROPERTY_TIMER_PROPERTIES, fmt.PROPERTY_DELAY_TIME_LEVEL}
MAX_DELAY_MS = 24 * 3600 * 1000  # the proxy's maxDelayTimeMills
MAX_MESSAGE_GROUP_BYTES = 64  # maxMessageGroupSize
ACCEPTED_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)


@dataclass
class Outgoing:
    """One message a client sent, as the core stores it."""

    message_id: str
    body: bytes
    properties: dict  # user properties and RocketMQ's system ones, TAGS and KEYS apart
    tags: str
    keys: str
    sys_flag: int
    born_ms: int
    kind: int  # v2.MessageType
    group: str  # the FIFO message group, "" for none


def outgoing(message, max_body_bytes: int, now_ms: int | None = None) -> Outgoing:
    """The message as the core stores it; refuses what the real proxy refuses, with its codes."""
    system = message.system_properties
    body = message.body
    if not body:
        raise V2Refusal(v2.MESSAGE_BODY_EMPTY, "the message body is empty: send at least one byte")
    if len(body) > max_body_bytes:
        raise V2Refusal(v2.MESSAGE_BODY_TOO_LARGE, f"the body has {len(body)} bytes; the most a message may carry is "
                                                   f"{max_body_bytes} (the settings' publishing.max_body_size)")
    if not system.message_id.strip():
        raise V2Refusal(v2.ILLEGAL_MESSAGE_ID, "system_properties.message_id is empty: give each message its id "
                                               "(the official clients make one)")
    properties = {}
    for name, value in message.user_properties.items():
        if name in _SYSTEM_ONLY or name in (fmt.PROPERTY_TAGS, fmt.PROPERTY_KEYS):
            raise V2Refusal(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name!r} is a name RocketMQ uses itself: "
                                                             "choose another")
        if _has_control(name) or _has_control(value):
            raise V2Refusal(v2.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name[:40]!r} holds a control character: "
                                                             "remove it")
        properties[name] = value
    tag = system.tag if system.HasField("tag") else ""
    if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
        raise V2Refusal(v2.ILLEGAL_MESSAGE_TAG, f"tag {tag[:40]!r} is blank or holds '|' or a control character, "
                                                "which tag filters cannot match: choose another tag")
    for key in system.keys:
        if not key.strip() or _has_control(key):
            raise V2Refusal(v2.ILLEGAL_MESSAGE_KEY, f"key {key[:40]!r} is blank or holds a control character")
    properties[fmt.PROPERTY_UNIQ_KEY] = system.message_id
    kind = system.message_type
    sys_flag = fmt.SysFlag.COMPRESSED if system.body_encoding == v2.GZIP else 0
    if kind == v2.TRANSACTION:
        properties[fmt.PROPERTY_TRANSACTION_PREPARED] = "true"
        if system.HasField("orphaned_transaction_recovery_duration"):
            properties[CHECK_IMMUNITY_SECONDS] = str(system.orphaned_transaction_recovery_duration.seconds)
    if system.HasField("delivery_timestamp"):
        deliver_ms = _millis(system.delivery_timestamp, "delivery_timestamp", v2.ILLEGAL_DELIVERY_TIME)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if deliver_ms - now_ms > MAX_DELAY_MS:
            raise V2Refusal(v2.ILLEGAL_DELIVERY_TIME, f"the delivery time is {(deliver_ms - now_ms) // 1000} s away; "
                                                      f"the most is {MAX_DELAY_MS // 1000} s (one day)")
        properties[TIMER_DELIVER_MS] = str(deliver_ms)
    group = system.message_group if system.HasField("message_group") else ""
    if group:
        if not group.strip() or _has_control(group) or len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
            raise V2Refusal(v2.ILLEGAL_MESSAGE_GROUP, f"message group {group[:40]!r} is blank, holds a control "
                                                      f"character or has {MAX_MESSAGE_GROUP_BYTES} bytes or more")
        properties[SHARDING_KEY] = group
    if system.HasField("trace_context") and system.trace_context:
        properties[TRACE_CONTEXT] = system.trace_context
    if system.born_host:
        properties[BORN_HOST] = system.born_host
    born_ms = _millis(system.born_timestamp, "born_timestamp", v2.BAD_REQUEST) \
        if system.HasField("born_timestamp") else 0
    return Outgoing(system.message_id, body, properties, tag, " ".join(system.keys), sys_flag, max(born_ms, 0),
                    kind, group)


def _millis(stamp, what: str, code: int) -> int:
    try:
        return stamp.ToMilliseconds()
    except ValueError:  # out of protobuf's range (years 1 to 9999)
        raise V2Refusal(code, f"{what} has seconds={stamp.seconds}, not a time: give seconds since the epoch (note: "
                              "rocketmq-python-client 5.1.2 puts Message.delivery_timestamp into the seconds field "
                              "unchanged, so set it in seconds there, not milliseconds)") from None


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def batch_content(messages: list[Outgoing], batch_cq: bool):
    """Several messages of one request: ONE inner batch on a BatchCQ topic (its messages keep
    their ids and properties), else a record per message."""
    entries = [(m.body, {**m.properties, **_field_properties(m)}, 0) for m in messages]
    payload = fmt.encode_message_batch(entries)
    if batch_cq:
        return InnerBatchSend(payload, len(messages), "rmq", properties={fmt.PROPERTY_UNIQ_KEY: messages[0].message_id})
    return EarlyBatchSend(payload, len(messages))


def _field_properties(message: Outgoing) -> dict:
    out = {}
    if message.tags:
        out[fmt.PROPERTY_TAGS] = message.tags
    if message.keys:
        out[fmt.PROPERTY_KEYS] = message.keys
    return out


def single_request(topic: str, queue_id: int, message: Outgoing, born_host: bytes, transaction_id: str = "",
                   owner: str | None = None):
    content = SingleSend(message.body, message.properties, message.tags, message.keys, 0, message.sys_flag)
    return SendRequest(topic, queue_id, content, message.born_ms, born_host, transaction_id=transaction_id,
                       owner=owner)


# --- stored records -> v2 messages -----------------------------------------------------------

def timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def duration(ms: int) -> Duration:
    span = Duration()
    span.FromMilliseconds(ms)
    return span


def incoming(record_bytes, topic: str, first_offset: int, reconsume_times: int | None, receipt: str | None,
             invisible_ms: int | None = None) -> list:
    """The v2 messages of one stored record from ``first_offset`` on (an inner batch may be
    entered in its middle); ``reconsume_times`` its pop's (None: the record's); ``receipt`` the
    unit's receipt handle (None for pulls). An inner
    batch's messages each get a handle of their own (``receipts.join``) and their UNIQ_KEY as
    their id, else the record's offsetMsgId and their index."""
    record = fmt.decode_record(record_bytes)
    if reconsume_times is None:
        reconsume_times = record.reconsume_times
    store_host = "%s:%d" % fmt.decode_host(record.store_host)
    born_host = "%s:%d" % fmt.decode_host(record.born_host)
    record_id = fmt.message_id(record.store_host, record.physical_offset)

    def message(index, body, properties, born_ms):
        handle = receipt if receipt is None or record.inner_count == 1 else \
            receipts.join(receipt, index, record.inner_count)
        message_id = properties.get(fmt.PROPERTY_UNIQ_KEY) or \
            (record_id if record.inner_count == 1 else f"{record_id}-{index}")
        return _message(topic, body, properties, record, record.queue_offset + index, born_ms, message_id,
                        store_host, born_host, reconsume_times, handle, invisible_ms)

    if not record.sys_flag & fmt.SysFlag.INNER_BATCH:
        return [message(0, _plain_body(record), dict(record.properties), record.born_timestamp)]
    first = max(0, first_offset - record.queue_offset)
    return [message(index, body, properties, born_ms)
            for index, body, properties, born_ms in _inner(record, record_bytes) if index >= first]


def _inner(record, record_bytes):
    """(index, body, properties, born ms) of each message of an inner batch: an rmq payload is
    read as it is (its messages keep their UNIQ_KEYs), an arrow one decoded into columns."""
    if record.properties.get(fmt.PROPERTY_BATCH_CODEC, "rmq") == "rmq":
        payload = decompress(record.body, Compression.from_sys_flag(record.sys_flag))
        batch_tags = record.properties.get(fmt.PROPERTY_TAGS)
        for index, (_flag, body, raw) in enumerate(fmt.iter_message_batch(payload, record.inner_count)):
            properties = fmt.decode_properties(raw)
            if batch_tags and fmt.PROPERTY_TAGS not in properties:
                properties[fmt.PROPERTY_TAGS] = batch_tags
            yield index, bytes(body), properties, record.born_timestamp
        return
    rows = decode_records(record_bytes, record.queue_offset, include_properties=True).to_pylist()
    for index, row in enumerate(rows):
        properties = dict(row["properties"] or [])
        properties.update({name: row[column] for name, column in ((fmt.PROPERTY_TAGS, "tags"),
                                                                  (fmt.PROPERTY_KEYS, "keys")) if row[column]})
        born_ms = int(row["born_timestamp"].timestamp() * 1000) if row["born_timestamp"] else record.born_timestamp
        yield index, row["body"], properties, born_ms


def _plain_body(record) -> bytes:
    """The body as the sender wrote it: a compressed one (RocketMQ's Java clients compress large
    bodies with zlib) is inflated here and handed out as IDENTITY."""
    if record.sys_flag & fmt.SysFlag.COMPRESSED:
        try:
            return bytes(decompress(record.body, Compression.from_sys_flag(record.sys_flag)))
        except ValueError as bad:
            raise refused(Reason.MESSAGE_ILLEGAL, f"the stored message at queue offset {record.queue_offset} is "
                                                  f"flagged compressed but does not inflate: {bad}") from None
    return bytes(record.body)


def _message(topic, body, properties, record, queue_offset, born_ms, message_id, store_host, born_host,
             reconsume_times, receipt, invisible_ms):
    system = v2.SystemProperties(
        message_id=message_id, body_encoding=v2.IDENTITY,
        body_digest=v2.Digest(type=v2.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        message_type=_type_of(properties), born_timestamp=timestamp(born_ms),
        born_host=properties.get(BORN_HOST, born_host), store_timestamp=timestamp(record.store_timestamp),
        store_host=store_host, queue_id=record.queue_id, queue_offset=queue_offset,
        delivery_attempt=reconsume_times + 1)
    if fmt.PROPERTY_TAGS in properties:
        system.tag = properties[fmt.PROPERTY_TAGS]
    if properties.get(fmt.PROPERTY_KEYS):
        system.keys.extend(properties[fmt.PROPERTY_KEYS].split(" "))
    if TIMER_DELIVER_MS in properties:
        system.delivery_timestamp.CopyFrom(timestamp(int(properties[TIMER_DELIVER_MS])))
    if SHARDING_KEY in properties:
        system.message_group = properties[SHARDING_KEY]
    if TRACE_CONTEXT in properties:
        system.trace_context = properties[TRACE_CONTEXT]
    if receipt is not None:
        system.receipt_handle = receipt
    if invisible_ms is not None:
        system.invisible_duration.CopyFrom(duration(invisible_ms))
    if DLQ_ORIGIN_TOPIC in properties and DLQ_ORIGIN_MESSAGE_ID in properties:
        system.dead_letter_queue.CopyFrom(v2.DeadLetterQueue(topic=properties[DLQ_ORIGIN_TOPIC],
                                                             message_id=properties[DLQ_ORIGIN_MESSAGE_ID]))
    user = {k: v for k, v in properties.items()
            if k not in _SYSTEM_ONLY and k not in SYSTEM_PROPERTIES}
    return v2.Message(topic=v2.Resource(name=topic), user_properties=user, system_properties=system, body=body)


def _type_of(properties: dict) -> int:
    if properties.get(fmt.PROPERTY_TRANSACTION_PREPARED) == "true":
        return v2.TRANSACTION
    if TIMER_DELIVER_MS in properties or fmt.PROPERTY_DELAY_TIME_LEVEL in properties \
            or "TIMER_DELAY_SEC" in properties:
        return v2.DELAY
    if SHARDING_KEY in properties:
        return v2.FIFO
    return v2.NORMAL


# --- queue choice ----------------------------------------------------------------------------

def consistent_hash(value: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash: the proxy's queue for a FIFO message group (of its
    String.hashCode), so that a group lands where the real proxy puts it."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


class QueueChooser:
    """The queue of a send: a FIFO group's by consistent hash, others round robin."""

    def __init__(self):
        self._turn = itertools.count()

    def choose(self, queue_count: int, group: str) -> int:
        if group:
            return consistent_hash(fmt.java_string_hash(group), queue_count)
        return next(self._turn) % queue_count
