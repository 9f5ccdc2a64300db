"""Stored records as the SDK's StoredMessage (what a broker answers a query by key or by id
with), and RocketMQ's offset message id: the store host and commitlog offset of a record, as
32 hex characters (MessageDecoder.createMessageId)."""

from __future__ import annotations

from rmq_spark.errors import InvalidRequestError
from rmq_spark.structs import StoredMessage
from rmq_wire.record import (
    PROPERTY_INNER_NUM,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    Compression,
    SysFlag,
    decode_host,
    decode_record,
    message_id,
)

MAX_BODY_BYTES = 64 << 20  # a body decompressed for display, at most


def stored_messages(records, broker: str = "") -> list[StoredMessage]:
    """Every record of ``records`` (stored records, concatenated), in order."""
    view, at, out = memoryview(records or b""), 0, []
    while at < len(view):
        record = decode_record(view, at)
        out.append(_stored(record, broker))
        at += record.total_size
    return out


def _stored(record, broker: str) -> StoredMessage:
    properties = dict(record.properties)
    inner = bool(record.sys_flag & SysFlag.INNER_BATCH)
    body = bytes(record.body)
    compression = Compression.from_sys_flag(record.sys_flag)
    if not inner and compression is not Compression.NONE:  # RocketMQ's Java producer zlibs large bodies
        from rmq_wire.codec.compression import decompress_bounded  # (pyarrow's package: loaded when needed)

        body = bytes(decompress_bounded(body, compression, MAX_BODY_BYTES))
    count = int(properties.get(PROPERTY_INNER_NUM, "1") or 1) if inner else 1
    return StoredMessage(record.topic, record.queue_id, record.queue_offset, record.physical_offset,
                         message_id(bytes(record.store_host), record.physical_offset),
                         properties.get(PROPERTY_UNIQ_KEY, ""), properties.get(PROPERTY_KEYS, ""),
                         properties.get(PROPERTY_TAGS, ""), record.born_timestamp, record.store_timestamp, properties,
                         body, count, broker)


def offset_message_id(text: str) -> tuple[str, int]:
    """(the broker's address "ip:port", the record's commitlog offset) of an offset message id;
    InvalidRequestError saying what an id looks like otherwise."""
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise InvalidRequestError(f"{text!r} is not a message id of a stored message (32 hex characters: the store "
                                  "host and commitlog offset, RocketMQ's offsetMsgId); for the id a producer gave a "
                                  "message (its UNIQ_KEY) name its topic too (--topic)")
    host, port = decode_host(raw[:8])
    return f"{host}:{port}", int.from_bytes(raw[8:], "big")
