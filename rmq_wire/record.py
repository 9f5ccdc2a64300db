"""The CommitLog record layout, as RocketMQ's (V1 magic, IPv4 hosts), and the batch encoding.

Record (big-endian), 91 fixed bytes plus body, topic and properties::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 |
    PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 | STORETIMESTAMP 8 |
    STOREHOST 8 | RECONSUMETIMES 4 | PREPARED TX OFFSET 8 | BODYLEN 4 | BODY |
    TOPICLEN 1 | TOPIC | PROPLEN 2 | PROPERTIES

BODYCRC covers the body only, so a torn or flipped byte in the header, topic or properties
would pass it. Every record therefore ends with a ``__HCRC32#`` property, shaped as RocketMQ's
optional ``__CRC32#`` (name, 10 decimal digits) but covering every record byte outside the
body and before the property itself; BODYCRC covers the body, so the body is read once, not
twice, and together they cover every byte. Recovery and reads check both.
"""

from __future__ import annotations

import enum
import socket
import struct
from dataclasses import dataclass

from rmq_wire.errors import BatchFormatError, CodecError

try:  # ISA-L's CRC-32 (SIMD) is ~12x zlib's on 32 KiB bodies; the same polynomial and values
    from isal.isal_zlib import crc32
except ImportError:  # a platform without isal's wheel: zlib's
    from zlib import crc32

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB  # RocketMQ's V2 records (2-byte topic length): neither written nor read here
BLANK_MAGIC = 0xCBD43194
# A record is written only where it fits with room for a BLANK marker after it.
END_FILE_MIN_BLANK_BYTES = 8
BLANK = struct.Struct(">iI")

# TOTALSIZE .. BODYLEN: everything before the body.
HEADER = struct.Struct(">iIIiiqqiq8sq8siqi")
FIXED_BYTES = HEADER.size + 1 + 2  # + TOPICLEN + PROPLEN = 91
BODYLEN_AT = HEADER.size - 4
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767

NAME_VALUE_SEPARATOR = b"\x01"
PROPERTY_SEPARATOR = b"\x02"

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # a message's id, as RocketMQ's clients give it
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_TIMER_PROPERTIES = ("__STARTDELIVERTIME", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS")
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"  # a transactional message's producer group, whose checks it gets
PROPERTY_CHECK_IMMUNITY_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"  # a half message is not checked before
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_BATCH_CODEC = "BATCH_CODEC"
PROPERTY_RECORD_CRC = "__HCRC32#"
PROPERTY_PRODUCER = "__PRODUCER#"  # an idempotent send's stamp, in its first record

CRC_PROPERTY_PREFIX = PROPERTY_RECORD_CRC.encode() + NAME_VALUE_SEPARATOR
CRC_DIGITS = 10
# The CRC property is always the last one: prefix, 10 digits, separator.
CRC_RESERVED_BYTES = len(CRC_PROPERTY_PREFIX) + CRC_DIGITS + 1

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # RocketMQ's: delayed messages wait here
SINK_TOPIC = "RMQ_SYS_SINK_BATCHES"  # committed sink batches, as RocketMQ's op records of transactions
# RocketMQ's: where a broker creates topics on a first send (autoCreateTopicEnable), its route stands
# for theirs until they exist (clients send a new topic's first messages by it).
AUTO_CREATE_TOPIC = "TBW102"
RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"
BATCH_CODECS = ("rmq", "arrow")


class SysFlag:
    """SYSFLAG bits, plain ints (enum.IntFlag arithmetic is slow on the append path)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    BORNHOST_V6 = 0x10  # RocketMQ's 20-byte hosts: not written here, refused by readers
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80  # the record is an inner batch: its body a batch payload of INNER_NUM messages


# The compression type of a record's body, SYSFLAG bits 8-10 (RocketMQ's).
COMPRESSION_SHIFT = 8
COMPRESSION_MASK = 0x7 << COMPRESSION_SHIFT
# What a client may set on a single message: its body compressed (and how), several tags.
CLIENT_SYS_FLAGS = SysFlag.COMPRESSED | SysFlag.MULTI_TAGS | COMPRESSION_MASK


class Compression(enum.IntEnum):
    """Compression of a batch payload or a record's body; the value is RocketMQ's compression
    type, stored in SYSFLAG bits 8-10 (with the COMPRESSED bit 0x1 set when the type is not
    NONE; the bit alone, as RocketMQ 4.x writes it, means zlib)."""

    NONE = 0
    LZ4 = 1
    ZSTD = 2
    ZLIB = 3

    @classmethod
    def parse(cls, value: "Compression | str | int | None") -> "Compression":
        """The compression named by ``value`` ("none", "lz4", "zstd", "zlib", any case), an int or a member.

        ``None`` means NONE. Raises CodecError naming the accepted values.
        """
        if value is None:
            return cls.NONE
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = cls.__members__.get(value.strip().upper())
            if member is not None:
                return member
        elif isinstance(value, int) and not isinstance(value, bool) and value in cls._value2member_map_:
            return cls(value)
        raise CodecError(f"unknown compression {value!r}; use one of: {', '.join(c.name.lower() for c in cls)}")

    @classmethod
    def from_sys_flag(cls, sys_flag: int) -> "Compression":
        """The compression recorded in a record's SYSFLAG.

        Raises CodecError for a compression type this package cannot decode.
        """
        found = _BY_SYS_FLAG_BITS.get(sys_flag & (SysFlag.COMPRESSED | COMPRESSION_MASK))
        if found is not None:
            return found
        kind = (sys_flag & COMPRESSION_MASK) >> COMPRESSION_SHIFT
        raise CodecError(f"SYSFLAG {sys_flag:#x} marks compression type {kind}, unknown; this client reads "
                         f"{', '.join(c.name.lower() for c in cls)} only")

    def sys_flag(self) -> int:
        """The SYSFLAG bits that record this compression."""
        if self is Compression.NONE:
            return 0
        return SysFlag.COMPRESSED | (self.value << COMPRESSION_SHIFT)


# SYSFLAG's compression bits -> Compression: type bits without the COMPRESSED bit mean none;
# the COMPRESSED bit with no type is RocketMQ 4.x's zlib.
_BY_SYS_FLAG_BITS = {kind << COMPRESSION_SHIFT: Compression.NONE for kind in range(8)}
_BY_SYS_FLAG_BITS.update({c.sys_flag(): c for c in Compression if c is not Compression.NONE})
_BY_SYS_FLAG_BITS[SysFlag.COMPRESSED] = Compression.ZLIB


def encode_host(host: str, port: int) -> bytes:
    return socket.inet_aton(host) + struct.pack(">i", port)


def decode_host(raw: bytes) -> tuple[str, int]:
    return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:8])[0]


def encode_properties(properties: dict[str, str] | None) -> bytes:
    if not properties:
        return b""
    return b"".join(
        k.encode() + NAME_VALUE_SEPARATOR + str(v).encode() + PROPERTY_SEPARATOR for k, v in properties.items()
    )


def decode_properties(raw: "bytes | memoryview | str") -> dict[str, str]:
    """All properties of one message (encoded, or as the remoting header's text), system ones
    included. Like RocketMQ's decoder, an entry without a ``\\x01`` or with an empty name is
    skipped, and the last separator may be missing. Raises UnicodeDecodeError for bytes that
    are not UTF-8."""
    out = {}
    for item in (raw if isinstance(raw, str) else bytes(raw).decode()).split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name:
            out[name] = value
    return out


def find_property(raw: bytes, name: bytes) -> bytes | None:
    """One property's value from encoded properties, without decoding the rest."""
    key = name + NAME_VALUE_SEPARATOR
    at = 0
    while True:
        at = raw.find(key, at)
        if at < 0:
            return None
        if at == 0 or raw[at - 1] == PROPERTY_SEPARATOR[0]:
            start = at + len(key)
            end = raw.find(PROPERTY_SEPARATOR, start)
            return raw[start : end if end >= 0 else len(raw)]
        at += 1


def properties_of(record) -> bytes:
    """The encoded properties of a whole record, without decoding the rest."""
    (body_len,) = struct.unpack_from(">i", record, BODYLEN_AT)
    at = HEADER.size + body_len
    at += 1 + record[at]
    (props_len,) = struct.unpack_from(">h", record, at)
    return bytes(record[at + 2 : at + 2 + props_len])


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), RocketMQ's tagsCode."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offsetMsgId (MessageDecoder.createMessageId): store host (4-byte IPv4, 4-byte
    port) and the record's 8-byte commitlog offset, as 32 uppercase hex characters."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


def record_size(body_len: int, topic_len: int, properties_len: int) -> int:
    """TOTALSIZE of a record whose properties (without the CRC property) have this length."""
    return FIXED_BYTES + body_len + topic_len + properties_len + CRC_RESERVED_BYTES


def body_crc(body) -> int:
    """BODYCRC as RocketMQ writes it (UtilAll.crc32): the CRC-32 of the body, its top bit cleared."""
    return crc32(body) & 0x7FFFFFFF


def body_crc_matches(body, stored: int) -> bool:
    """Whether ``stored`` is the body's BODYCRC; stores written before 2026-11 kept all 32 bits."""
    crc = crc32(body)
    return stored in (crc & 0x7FFFFFFF, crc)


def record_crc(header, after_body) -> int:
    """The record CRC: over the header (up to BODYLEN) and the bytes from the body's end to
    the CRC property (topic length, topic, properties length, properties)."""
    return crc32(after_body, crc32(header))


def crc_property(crc: int) -> bytes:
    return CRC_PROPERTY_PREFIX + b"%010d" % crc + PROPERTY_SEPARATOR


@dataclass(frozen=True)
class Record:
    """A stored record, decoded; ``body`` is a view into the buffer it was decoded from."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: memoryview
    topic: str
    properties: dict

    @property
    def inner_count(self) -> int:
        """How many messages (queue offsets) this record holds."""
        if self.sys_flag & SysFlag.INNER_BATCH:
            return int(self.properties[PROPERTY_INNER_NUM])
        return 1

    @property
    def compression(self) -> Compression:
        return Compression.from_sys_flag(self.sys_flag)


def check_immunity_s(properties: dict) -> int:
    """A half message's CHECK_IMMUNITY_TIME_IN_SECONDS: how long the broker leaves it unchecked
    (0: none given, or not a number of seconds)."""
    value = properties.get(PROPERTY_CHECK_IMMUNITY_SECONDS, "")
    return int(value) if value.isdigit() else 0


def decode_record(buf, pos: int = 0) -> Record:
    view = memoryview(buf)
    (total, magic, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_host,
     store_ts, store_host, reconsume, prepared, body_len) = HEADER.unpack_from(view, pos)
    if magic != MAGIC_V1:
        raise ValueError(f"no record at {pos}: magic {magic:#x}")
    at = pos + HEADER.size
    body = view[at : at + body_len]
    at += body_len
    topic_len = view[at]
    topic = bytes(view[at + 1 : at + 1 + topic_len]).decode()
    at += 1 + topic_len
    (props_len,) = struct.unpack_from(">h", view, at)
    props = decode_properties(view[at + 2 : at + 2 + props_len])
    props.pop(PROPERTY_RECORD_CRC, None)
    return Record(total, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_host,
                  store_ts, store_host, reconsume, prepared, body, topic, props)


NO_MORE_RECORDS = "no more records (zero bytes)"  # the normal end of a log: nothing was written there


class Check(enum.Enum):
    OK = "ok"
    BLANK = "blank"
    BAD_BODY = "bad body"  # header, topic, properties and their CRC are intact; the body CRC fails
    INVALID = "invalid"


def check_record(buf, pos: int, limit: int) -> tuple[Check, int, str]:
    """Validate the record at ``pos`` (bytes up to ``limit`` are readable).

    Returns (Check, size, reason): OK with the record's size, BLANK with the space it marks,
    BAD_BODY with the record's size (its header is trustworthy, its body is not), or INVALID
    with a sentence saying why. The record CRC is checked before the body CRC, so that a bad
    body is told apart from a bad header.
    """
    view = memoryview(buf)
    if limit - pos < BLANK.size:
        return Check.INVALID, 0, "fewer than 8 bytes left"
    total, magic = BLANK.unpack_from(view, pos)
    if magic == BLANK_MAGIC:
        if total != limit - pos:
            return Check.INVALID, 0, f"BLANK marker of {total} bytes where {limit - pos} are left"
        return Check.BLANK, total, ""
    if magic == 0 and total == 0:
        return Check.INVALID, 0, NO_MORE_RECORDS
    if magic != MAGIC_V1:
        return Check.INVALID, 0, f"unknown magic {magic:#x}"
    if total < FIXED_BYTES + CRC_RESERVED_BYTES or total > limit - pos:
        return Check.INVALID, 0, f"record length {total} does not fit"
    fields = HEADER.unpack_from(view, pos)
    body_crc, body_len = fields[2], fields[-1]
    body_at = pos + HEADER.size
    if body_len < 0 or body_at + body_len + 3 > pos + total:
        return Check.INVALID, 0, f"body length {body_len} does not fit the record"
    at = body_at + body_len
    topic_len = view[at]
    at += 1 + topic_len
    if at + 2 > pos + total:
        return Check.INVALID, 0, f"topic length {topic_len} does not fit the record"
    (props_len,) = struct.unpack_from(">h", view, at)
    if at + 2 + props_len != pos + total or props_len < CRC_RESERVED_BYTES:
        return Check.INVALID, 0, "recomputed length differs from TOTALSIZE"
    crc_at = pos + total - CRC_RESERVED_BYTES
    tail = bytes(view[crc_at : pos + total])
    if not (tail.startswith(CRC_PROPERTY_PREFIX) and tail.endswith(PROPERTY_SEPARATOR)):
        return Check.INVALID, 0, "record CRC property missing"
    digits = tail[len(CRC_PROPERTY_PREFIX) : -1]
    body_end = body_at + body_len
    if not digits.isdigit() or int(digits) != record_crc(view[pos : body_at], view[body_end:crc_at]):
        return Check.INVALID, 0, "record CRC mismatch"
    if not body_crc_matches(view[body_at:body_end], body_crc):
        return Check.BAD_BODY, total, "body CRC mismatch"
    return Check.OK, total, ""



# MessageBatch, RocketMQ's client batch encoding: per message
# TOTALSIZE 4 | MAGIC 4 | BODYCRC 4 | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES
BATCH_ENTRY = struct.Struct(">iiiii")
BATCH_ENTRY_FIXED_BYTES = BATCH_ENTRY.size + 2


def encode_message_batch(messages) -> bytes:
    """Encode (body, properties dict, flag) triples as a MessageBatch payload."""
    parts = []
    for body, properties, flag in messages:
        props = encode_properties(properties)
        total = BATCH_ENTRY_FIXED_BYTES + len(body) + len(props)
        parts += [BATCH_ENTRY.pack(total, 0, 0, flag, len(body)), body, struct.pack(">h", len(props)), props]
    return b"".join(parts)


def iter_message_batch(payload, max_count: int):
    """Yield (flag, body view, properties bytes) per message of a MessageBatch payload.

    Raises BatchFormatError on a short or inconsistent entry, or past ``max_count`` entries.
    """
    view = memoryview(payload)
    pos, n, end = 0, 0, len(view)
    while pos < end:
        if n >= max_count:
            raise BatchFormatError(f"batch holds more than {max_count} messages")
        if end - pos < BATCH_ENTRY_FIXED_BYTES:
            raise BatchFormatError(f"message {n} at byte {pos}: {end - pos} bytes left, an entry needs at least "
                                   f"{BATCH_ENTRY_FIXED_BYTES}")
        total, _magic, _crc, flag, body_len = BATCH_ENTRY.unpack_from(view, pos)
        if total < BATCH_ENTRY_FIXED_BYTES or total > end - pos:
            raise BatchFormatError(f"message {n} at byte {pos}: TOTALSIZE {total} with {end - pos} bytes left")
        if body_len < 0 or BATCH_ENTRY.size + body_len + 2 > total:
            raise BatchFormatError(f"message {n} at byte {pos}: BODYLEN {body_len} exceeds TOTALSIZE {total}")
        at = pos + BATCH_ENTRY.size + body_len
        (props_len,) = struct.unpack_from(">h", view, at)
        if at + 2 + props_len != pos + total:
            raise BatchFormatError(f"message {n} at byte {pos}: PROPLEN {props_len} disagrees with TOTALSIZE {total}")
        yield flag, view[pos + BATCH_ENTRY.size : at], bytes(view[at + 2 : at + 2 + props_len])
        pos += total
        n += 1
    if n == 0:
        raise BatchFormatError("batch is empty")


def encode_message(*, topic: str, queue_id: int, body: bytes, properties: bytes, flag: int = 0, sys_flag: int = 0,
                   queue_offset: int = 0, physical_offset: int = 0, born_timestamp: int = 0,
                   born_host: bytes = bytes(8), store_timestamp: int = 0, store_host: bytes = bytes(8),
                   reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> bytes:
    """A message in the record layout, as RocketMQ's MessageDecoder.encode sends one to a
    client (a transaction check, a message looked up by id): no CRC property of our own."""
    topic_raw = topic.encode()
    total = FIXED_BYTES + len(body) + len(topic_raw) + len(properties)
    header = HEADER.pack(total, MAGIC_V1, body_crc(body), queue_id, flag, queue_offset, physical_offset, sys_flag,
                         born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
                         prepared_transaction_offset, len(body))
    return b"".join((header, body, struct.pack(">B", len(topic_raw)), topic_raw, struct.pack(">h", len(properties)),
                     properties))
