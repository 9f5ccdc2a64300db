"""Sends as the core takes them from any door: one message, an early batch (RocketMQ's
MessageBatch encoding: a record per message) or an inner batch (one record for the batch), with
RocketMQ's rules for what a sender may set, and the message ids the answer carries.

The request and answer types are plain slotted dataclasses, made once per send and never
changed: frozen ones cost ~0.6 us more each to make, on the path of every single send."""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker_sim.core.errors import invalid
from broker_sim.store import ZERO_HOST, BatchPut, Compression, PutContext, PutResult, echo
from rmq_wire import record as fmt
from rmq_wire.types import InnerBatchIds

# Properties the store writes itself, and the two that have fields of their own.
_RESERVED_PROPERTIES = {fmt.PROPERTY_INNER_NUM, fmt.PROPERTY_INNER_BASE, fmt.PROPERTY_BATCH_CODEC,
                        fmt.PROPERTY_RECORD_CRC, fmt.PROPERTY_PRODUCER}
_FIELD_PROPERTIES = {fmt.PROPERTY_TAGS: "tags", fmt.PROPERTY_KEYS: "keys"}
_SEPARATORS = re.compile("[\x01\x02]")


@dataclass(slots=True)
class SingleSend:
    """One message; ``tags`` and ``keys`` become its TAGS and KEYS properties; ``sys_flag``
    RocketMQ's SYSFLAG bits a client sets (its body compressed)."""

    body: bytes
    properties: dict = field(default_factory=dict)
    tags: str = ""
    keys: str = ""
    flag: int = 0
    sys_flag: int = 0


@dataclass(slots=True)
class EarlyBatchSend:
    """``count`` messages in RocketMQ's MessageBatch encoding, stored as a record each."""

    payload: bytes
    count: int


@dataclass(slots=True)
class InnerBatchSend:
    """``count`` messages encoded by ``codec`` ("rmq" or "arrow"), to be stored as one record
    (an inner batch) on a BatchCQ topic; ``tags`` is the batch's TAGS property. The core hands
    the store a ``BatchPut`` for it, and answers ``InnerBatchIds``."""

    payload: bytes
    count: int
    codec: str = "rmq"
    compression: Compression = Compression.NONE
    properties: dict = field(default_factory=dict)
    tags: str = ""


@dataclass(slots=True)
class SendRequest:
    """A send to ``queue_id`` of ``topic``. ``born_timestamp_ms`` 0: the broker's time;
    ``producer_id`` and ``sequence`` make it idempotent; ``transaction_id``: prepared under that
    transaction, visible at its commit; ``owner``: with ACLs, the sender's access key (the
    transaction is its own); ``client`` (limits.client_key): who sends, charged for a topic its
    send creates; ``new_topic_queues``: the queues that topic gets at most (RocketMQ's
    defaultTopicQueueNums of a producer; 0: the broker's)."""

    topic: str
    queue_id: int
    content: SingleSend | EarlyBatchSend | InnerBatchSend
    born_timestamp_ms: int = 0
    born_host: bytes = ZERO_HOST
    producer_id: str = ""
    sequence: int = 0
    transaction_id: str = ""
    reconsume_times: int = 0
    owner: str | None = None
    client: str = ""
    new_topic_queues: int = 0

    def context(self) -> PutContext:
        producer = (self.producer_id, self.sequence) if self.producer_id else None
        return PutContext(self.born_timestamp_ms or None, self.born_host, producer, self.reconsume_times)


@dataclass(slots=True)
class SendOutcome:
    """Where a send was stored: offsets ``base_offset`` .. ``base_offset + count - 1`` of
    ``queue_id``; a prepared send gets its offsets and ids at the commit (none here)."""

    queue_id: int
    base_offset: int
    count: int
    message_ids: list
    store_timestamp_ms: int
    duplicate: bool


_DELAY_PROPERTIES = (fmt.PROPERTY_DELAY_TIME_LEVEL, *fmt.PROPERTY_TIMER_PROPERTIES)


def asks_delay(request: SendRequest) -> bool:
    """Whether the send's properties ask for a delay (a few dict lookups: every send pays them)."""
    properties = request.content.properties if not isinstance(request.content, EarlyBatchSend) else None
    return bool(properties) and any(name in properties for name in _DELAY_PROPERTIES)


def content_bytes(content: SingleSend | EarlyBatchSend | InnerBatchSend) -> int:
    """The bytes a send carries: a message's body, a batch's payload as sent."""
    return len(content.body) if isinstance(content, SingleSend) else len(content.payload)


def check_send(request: SendRequest) -> None:
    """Refuse what no store call would make sense of: empty names, negative times, counts that
    cannot be right."""
    if not request.topic:
        raise invalid("the topic name is empty; name the topic to send to")
    if request.topic == fmt.SINK_TOPIC:  # a forged record would mark a sink batch committed at the next start
        raise invalid(f"topic {fmt.SINK_TOPIC} records committed sink batches and only the broker writes to it: "
                      "send to a topic of your own")
    if request.topic == fmt.AUTO_CREATE_TOPIC:  # RocketMQ refuses it too (TopicValidator)
        raise invalid(f"topic {fmt.AUTO_CREATE_TOPIC} stands for the topics a first send creates and holds no "
                      "messages: send to a topic of your own")
    if request.born_timestamp_ms < 0:
        raise invalid(f"born_timestamp_ms {request.born_timestamp_ms} is negative: give milliseconds since the "
                      "epoch, or 0 for the broker's time")
    content = request.content
    if isinstance(content, EarlyBatchSend):
        _check_early_batch_count(content.payload, content.count)
    elif isinstance(content, InnerBatchSend) and content.count < 1:
        raise invalid(f"inner batch count {content.count}: give the number of messages the payload holds, 1 or more")


def put(target, request: SendRequest) -> PutResult:
    """Store the send through ``target``: the store, or a transaction's prepared puts."""
    content, context = request.content, request.context()
    if isinstance(content, SingleSend):
        properties = user_properties(content.properties, "the message")
        properties.update(_field_properties(content.tags, content.keys))
        return target.put_message(request.topic, request.queue_id, content.body, properties=properties,
                                  flag=content.flag, sys_flag=content.sys_flag, context=context)
    if isinstance(content, EarlyBatchSend):
        return target.put_early_batch(request.topic, request.queue_id, content.payload, context=context)
    properties = user_properties(content.properties, "the batch")
    properties.update(_field_properties(content.tags, ""))
    batch = BatchPut(content.payload, content.count, content.codec, content.compression, properties)
    return target.put_inner_batch(request.topic, request.queue_id, batch, context=context)


def message_ids(request: SendRequest, result: PutResult, store_host: bytes) -> Sequence[str]:
    """RocketMQ's offsetMsgId of each message (the store host and the record's position); the
    messages of an inner batch share their record's, with their index appended."""
    if request.transaction_id:
        return []  # offsets and ids are given at commit
    if isinstance(request.content, InnerBatchSend):
        return InnerBatchIds(fmt.message_id(store_host, result.physical_offsets[0]), result.count)
    return [fmt.message_id(store_host, p) for p in result.physical_offsets]


def user_properties(properties, what: str) -> dict:
    out = {}
    for name, value in properties.items():
        if not name:
            raise invalid(f"{what} has a property with an empty name")
        if _SEPARATORS.search(name) or _SEPARATORS.search(value):
            raise invalid(f"property {echo(name)} of {what} holds a \\x01 or \\x02 character, which separate stored "
                          "properties: remove it")
        if name in _FIELD_PROPERTIES:
            raise invalid(f"{what} sets {name} as a property: use the {_FIELD_PROPERTIES[name]} field instead")
        if name in _RESERVED_PROPERTIES:
            raise invalid(f"property {echo(name)} of {what} is reserved for the broker: use another name")
        out[name] = value
    return out


def _field_properties(tags: str, keys: str) -> dict:
    out = {}
    for name, value in ((fmt.PROPERTY_TAGS, tags), (fmt.PROPERTY_KEYS, keys)):
        if value:
            if _SEPARATORS.search(value):
                raise invalid(f"{_FIELD_PROPERTIES[name]} {echo(value)} holds a \\x01 or \\x02 character: remove it")
            out[name] = value
    return out


def _check_early_batch_count(payload: bytes, count: int) -> None:
    """Refuse a declared count that is not the number of entries of a well-formed payload. A
    malformed payload is left to the store, which says where it breaks (MESSAGE_ILLEGAL)."""
    if count < 1:
        raise invalid(f"early batch count {count}: give the number of messages the payload holds, 1 or more")
    smallest = fmt.BATCH_ENTRY_FIXED_BYTES
    if count > len(payload) // smallest:
        raise invalid(f"early batch count {count} cannot be right: a payload of {len(payload)} bytes holds at most "
                      f"{len(payload) // smallest} messages of {smallest} bytes or more")
    pos, n, end = 0, 0, len(payload)
    while pos < end:
        if end - pos < 4:
            return
        (total,) = struct.unpack_from(">i", payload, pos)
        if total < smallest or total > end - pos:
            return
        pos += total
        n += 1
        if n > count:
            break
    if n != count:
        found = f"more than {count}" if n > count else str(n)
        raise invalid(f"early batch count {count} does not match its payload, which holds {found} messages: "
                      "send the number of messages encoded")
