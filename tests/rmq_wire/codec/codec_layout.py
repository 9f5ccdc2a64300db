"""Stored records and MessageBatch payloads built by hand with struct, following the reference
layout (../shared/reference/rocketmq-model.md), independently of rmq_wire.codec."""

from __future__ import annotations

import struct
import zlib

MAGIC_V1 = 0xDAA320A7
INNER_BATCH = 0x80
NEED_UNWRAP = 0x40
# TOTALSIZE MAGICCODE BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
# STORETIMESTAMP STOREHOST RECONSUMETIMES PREPARED_TX_OFFSET BODYLEN
RECORD_HEADER = struct.Struct(">iIIiiqqiq8sq8siqi")
BATCH_ENTRY = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLEN
COMPRESSION_FLAGS = {"none": 0, "lz4": 0x1 | (1 << 8), "zstd": 0x1 | (2 << 8)}


def properties(pairs) -> bytes:
    """``key\\x01value\\x02`` for each (key, value) pair, in order."""
    return b"".join(k.encode() + b"\x01" + v.encode() + b"\x02" for k, v in pairs)


def message_batch(messages) -> bytes:
    """RocketMQ's MessageBatch encoding of (body, raw properties bytes[, flag]) tuples."""
    parts = []
    for body, props, *flag in messages:
        total = 20 + len(body) + 2 + len(props)
        parts += [BATCH_ENTRY.pack(total, 0, 0, flag[0] if flag else 0, len(body)), body,
                  struct.pack(">h", len(props)), props]
    return b"".join(parts)


def record(*, queue_offset: int, body: bytes, props: bytes = b"", topic: bytes = b"topic-a", queue_id: int = 3,
           sys_flag: int = 0, born: int = 1_700_000_000_000, store: int = 1_700_000_000_500,
           crc_property: bool = True) -> bytes:
    """One stored V1 record; like broker_sim's, it ends with a ``__HCRC32#`` property."""
    if crc_property:
        props += b"__HCRC32#\x01" + b"%010d" % 1234567890 + b"\x02"
    total = 91 + len(body) + len(topic) + len(props)
    header = RECORD_HEADER.pack(total, MAGIC_V1, zlib.crc32(body), queue_id, 0, queue_offset, 4096, sys_flag, born,
                                bytes([127, 0, 0, 1, 0, 0, 0x1F, 0x90]), store, bytes([10, 0, 0, 2, 0, 0, 0x27, 0x11]),
                                0, 0, len(body))
    return header + body + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props


def inner_record(*, base: int, count: int, payload: bytes, codec: str | None = "rmq", compression: str = "none",
                 tags: str | None = None, inner_base: int | None = None, extra=(), **kwargs) -> bytes:
    """A stored inner batch of ``count`` messages at ``base`` (INNER_NUM, INNER_BASE, BATCH_CODEC)."""
    pairs = ([("TAGS", tags)] if tags is not None else []) + [("INNER_NUM", str(count))]
    if codec is not None:
        pairs.append(("BATCH_CODEC", codec))
    pairs += [("INNER_BASE", str(base if inner_base is None else inner_base)), *extra]
    flag = INNER_BATCH | NEED_UNWRAP | COMPRESSION_FLAGS[compression]
    return record(queue_offset=base, body=payload, props=properties(pairs), sys_flag=flag, **kwargs)
