"""Stored commitlog records, as the broker streams them, decoded into the read schema.

A read returns stored records concatenated, in RocketMQ's V1 layout (big-endian, IPv4 hosts;
drawn field by field in ``rmq_wire.record``, whose constants this module reads by).

A record with SYSFLAG INNER_BATCH is an inner batch: its body is a batch payload (codec in
property BATCH_CODEC, absent = rmq; compression in SYSFLAG), holding INNER_NUM messages at
offsets QUEUEOFFSET .. QUEUEOFFSET + INNER_NUM - 1. Any other record is one message.

Header fields are read for all records at once with numpy, and Python runs a few steps per
inner batch (its properties, decompressing it, for arrow reading its one IPC message). The
inner batches of a chunk are decoded together, each codec in one pass: rmq payloads are
decompressed into one buffer and their entries found for all at once; arrow payloads'
record batches are concatenated once, column by column. Only the first and the last batch of
a range are cut. The one loop that may run per message or record is the walk along a
TOTALSIZE chain where sizes vary: a tight loop over ints (runs of equal sizes, the usual batch
of a producer, and many payloads' chains side by side are walked by numpy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from rmq_wire.codec import arrow, rmq
from rmq_wire.codec._bytes import ChainError, as_uint8, concat_ranges, entry_starts, matches, read_at
from rmq_wire.codec._gather import RangeColumn
from rmq_wire.codec._messages import Finished, MessageColumns
from rmq_wire.codec.columns import BATCH_SCHEMA, PROPERTIES_TYPE
from rmq_wire.codec.compression import PayloadError, decompress_all, decompress_each
from rmq_wire.errors import CodecError
from rmq_wire.record import (
    BLANK_MAGIC,
    FIXED_BYTES,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_BATCH_CODEC,
    PROPERTY_INNER_BASE,
    PROPERTY_INNER_NUM,
    PROPERTY_TAGS,
    Compression,
    SysFlag,
    decode_properties,
)

_OTHER_MAGICS = {MAGIC_V2: "a V2 record (2-byte topic length), not supported by this client",
                 BLANK_MAGIC: "a BLANK end-of-segment marker, not a record"}
_SYSFLAG_IPV6_HOSTS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6  # 20-byte hosts

# Every field before the body, as numpy reads them in one gather per buffer.
_HEADER = np.dtype([
    ("total", ">i4"), ("magic", ">u4"), ("body_crc", ">u4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"), ("born", ">i8"), ("born_host", "V8"),
    ("store", ">i8"), ("store_host", "V8"), ("reconsume_times", ">i4"), ("prepared_offset", ">i8"),
    ("body_length", ">i4"),
])
_BODY = _HEADER.itemsize  # 88: where the body starts

_TIMESTAMP = pa.timestamp("us", tz="UTC")
READ_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("body", pa.binary()),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("born_timestamp", _TIMESTAMP),
    pa.field("store_timestamp", _TIMESTAMP),
])
_READ_SCHEMA_WITH_PROPERTIES = READ_SCHEMA.append(pa.field("properties", PROPERTIES_TYPE))


def read_schema(include_properties: bool = False) -> pa.Schema:
    """The read schema; with ``include_properties``, a last column of user properties."""
    return _READ_SCHEMA_WITH_PROPERTIES if include_properties else READ_SCHEMA


class RecordFormatError(CodecError):
    """Stored records that do not parse; the message names the record and byte offset."""


@dataclass
class RecordHeaders:
    """The header fields of every record of a buffer (numpy arrays, one element a record)."""

    start: np.ndarray
    total: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    born_ms: np.ndarray
    store_ms: np.ndarray
    body_start: np.ndarray
    body_length: np.ndarray
    topic_start: np.ndarray
    topic_length: np.ndarray
    props_start: np.ndarray
    props_length: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


def read_headers(buf) -> RecordHeaders:
    """Find and check every record of ``buf`` (concatenated V1 records, filling it exactly).

    Raises RecordFormatError naming the first bad record, its byte offset and what is wrong.
    """
    try:
        start = entry_starts(buf, FIXED_BYTES, "record")
    except ChainError as err:
        raise RecordFormatError(str(err)) from None
    total = np.empty_like(start)
    total[:-1] = start[1:] - start[:-1]
    total[-1] = len(buf) - start[-1]
    fields = read_at(buf, start, _HEADER)
    # Lengths are clipped to their record before use, so that a bad one reads inside the
    # buffer and is reported below rather than read past.
    body_length = fields["body_length"].astype(np.int64)
    body = np.clip(body_length, 0, total - FIXED_BYTES)
    topic_at = start + _BODY + body
    topic_length = as_uint8(buf)[topic_at].astype(np.int64)
    topic = np.minimum(topic_length, total - FIXED_BYTES - body)
    props_at = topic_at + 1 + topic
    props_length = read_at(buf, props_at, ">i2").astype(np.int64)
    sys_flag = fields["sys_flag"].astype(np.int32)
    bad = ((fields["magic"] != MAGIC_V1) | ((sys_flag & _SYSFLAG_IPV6_HOSTS) != 0) | (body != body_length)
           | (topic != topic_length) | (props_length != total - FIXED_BYTES - body - topic))
    if bad.any():
        i = int(np.argmax(bad))
        problem = _problem(int(fields["magic"][i]), int(sys_flag[i]), int(total[i]), int(body_length[i]),
                           int(topic_length[i]), int(props_length[i]))
        raise RecordFormatError(f"record {i} at byte {start[i]}: {problem}")
    return RecordHeaders(
        start=start, total=total, queue_id=fields["queue_id"].astype(np.int32),
        queue_offset=fields["queue_offset"].astype(np.int64), sys_flag=sys_flag,
        born_ms=fields["born"].astype(np.int64), store_ms=fields["store"].astype(np.int64),
        body_start=start + _BODY, body_length=body_length, topic_start=topic_at + 1, topic_length=topic_length,
        props_start=props_at + 2, props_length=props_length)


def _problem(magic: int, sys_flag: int, total: int, body_length: int, topic_length: int, props_length: int) -> str:
    """What is wrong with a record's header, in the order the fields come."""
    if magic != MAGIC_V1:
        return f"magic {magic:#x} is {_OTHER_MAGICS.get(magic, 'unknown')} (a V1 record has {MAGIC_V1:#x})"
    if sys_flag & _SYSFLAG_IPV6_HOSTS:
        return f"SYSFLAG {sys_flag:#x} marks IPv6 hosts; this client reads IPv4-host records only"
    if not 0 <= body_length <= total - FIXED_BYTES:
        return f"BODYLEN {body_length} does not fit its TOTALSIZE {total}"
    if topic_length > total - FIXED_BYTES - body_length:
        return f"TOPICLEN {topic_length} does not fit its TOTALSIZE {total}"
    return (f"PROPLEN {props_length} disagrees with TOTALSIZE {total} (BODYLEN {body_length}, "
            f"TOPICLEN {topic_length})")


@dataclass(frozen=True)
class RecordHeader:
    """One stored record's header, topic and properties; ``body`` is a view of the buffer."""

    position: int
    total_size: int
    queue_id: int
    queue_offset: int
    sys_flag: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    topic: str
    properties: dict
    body: memoryview

    @property
    def inner_batch(self) -> bool:
        return bool(self.sys_flag & SysFlag.INNER_BATCH)

    @property
    def count(self) -> int:
        """The queue offsets this record takes: INNER_NUM for an inner batch, else 1."""
        if not self.inner_batch:
            return 1
        return _inner_count(self.properties.get(PROPERTY_INNER_NUM), f"record at byte {self.position}")


def iter_record_headers(buf) -> Iterator[RecordHeader]:
    """Each record of ``buf`` in order, with its properties decoded (system ones included)."""
    headers = read_headers(buf)
    view = memoryview(buf).cast("B")
    for i in range(len(headers)):
        topic_start, props_start = int(headers.topic_start[i]), int(headers.props_start[i])
        body_start = int(headers.body_start[i])
        yield RecordHeader(
            int(headers.start[i]), int(headers.total[i]), int(headers.queue_id[i]), int(headers.queue_offset[i]),
            int(headers.sys_flag[i]), int(headers.born_ms[i]), int(headers.store_ms[i]),
            bytes(view[topic_start:topic_start + int(headers.topic_length[i])]).decode(),
            decode_properties(view[props_start:props_start + int(headers.props_length[i])]),
            view[body_start:body_start + int(headers.body_length[i])])


def _inner_count(raw: str | None, where: str) -> int:
    """An inner batch's INNER_NUM property as a count."""
    if raw is None or not raw.isdigit() or int(raw) < 1:
        raise RecordFormatError(f"{where} is an inner batch with INNER_NUM {raw!r}; it needs a positive count")
    return int(raw)


@dataclass
class _InnerBatches:
    """What decoding the inner batch records needs from their headers and properties (one
    element an inner batch record, in record order)."""

    record: np.ndarray  # its index among the records
    count: np.ndarray  # INNER_NUM
    arrow: np.ndarray  # whether its codec is arrow (else rmq)
    compression: list[Compression]
    tags: list[str | None]  # the record's TAGS

    def where(self, batch: int, headers: RecordHeaders) -> str:
        """"record 3 at byte 1234", for errors."""
        return _where(int(self.record[batch]), headers)


def _where(record: int, headers: RecordHeaders) -> str:
    return f"record {record} at byte {headers.start[record]}"


def decode_records(buf, start, end=None, include_properties: bool = False) -> pa.RecordBatch:
    """The messages of stored records with ``start <= queue_offset < end``, in the read schema.

    Parameters
    ----------
    buf : bytes-like
        Concatenated stored records, as the broker streams them: of one queue, or of many
        ranges' chunks joined so that they decode together.
    start, end : int or numpy.ndarray
        The offsets to keep; ``end`` None keeps everything from ``start`` on. A range may start
        or end inside an inner batch: exactly its offsets come out. Arrays give each record
        its own bounds (one element a record, in order), for records of many ranges.
    include_properties : bool
        Add the ``properties`` column (user properties only).

    Returns
    -------
    pyarrow.RecordBatch
        In ``read_schema(include_properties)``, in record order. Inner batch messages take the
        record's topic, queue and store time; their tags are their own or else the record's
        TAGS, their born time their own (arrow codec) or else the record's. Every column is
        copied out of ``buf``.

    Raises
    ------
    CodecError
        (RecordFormatError) for records or payloads that do not parse, an unknown codec or
        compression, or a payload whose count differs from INNER_NUM; the message names the
        record, its byte offset and what is wrong.
    """
    buf = memoryview(buf).cast("B")
    schema = read_schema(include_properties)
    if not len(buf):
        return _empty(schema)
    headers = read_headers(buf)
    inner = _inner_batches(buf, headers)
    cut = _cut(headers, inner, start, end)
    if cut.nrows == 0:
        return _empty(schema)
    done = _decode_messages(buf, headers, inner, cut, include_properties)
    arrays = _record_columns(buf, headers, cut, done)
    if include_properties:
        arrays.append(done.properties)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass
class _Cut:
    """Which messages of each record are kept (numpy arrays, one element a record)."""

    first: np.ndarray  # the index in its record of the first message kept
    rows: np.ndarray  # how many are kept
    row_start: np.ndarray  # the row the first one becomes
    nrows: int


def _cut(headers: RecordHeaders, inner: _InnerBatches, start, end) -> _Cut:
    for name, bound in (("start", start), ("end", end)):
        if isinstance(bound, np.ndarray) and bound.shape != (len(headers),):
            raise CodecError(f"{name} gives bounds for {bound.size} records; the buffer holds {len(headers)}")
    count = np.ones(len(headers), dtype=np.int64)
    count[inner.record] = inner.count
    base = headers.queue_offset
    first = np.clip(start - base, 0, count)
    stop = count if end is None else np.clip(end - base, 0, count)
    rows = np.maximum(stop - first, 0)
    row_start = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(rows[:-1], out=row_start[1:])
    return _Cut(first, rows, row_start, int(rows.sum()))


def _decode_messages(buf: memoryview, headers: RecordHeaders, inner: _InnerBatches, cut: _Cut,
                     include_properties: bool) -> Finished:
    """Body, keys, tags, properties and born times of the kept messages."""
    columns = MessageColumns(cut.nrows, include_properties)
    singles = (headers.sys_flag & SysFlag.INNER_BATCH) == 0
    compressed = singles & ((headers.sys_flag & SysFlag.COMPRESSED) != 0)
    plain = np.flatnonzero(singles & ~compressed & (cut.rows > 0))
    if len(plain):
        columns.put_encoded(cut.row_start[plain], buf, headers.body_start[plain], headers.body_length[plain],
                            headers.props_start[plain], headers.props_length[plain])
    compressed = np.flatnonzero(compressed & (cut.rows > 0))
    if len(compressed):  # a message body its producer compressed (RocketMQ's clients do over 4 KiB)
        bodies, offsets = _decompressed_bodies(buf, headers, compressed)
        columns.put_encoded(cut.row_start[compressed], buf, offsets[:-1], np.diff(offsets),
                            headers.props_start[compressed], headers.props_length[compressed], body_source=bodies)
    kept = np.flatnonzero(cut.rows[inner.record] > 0)
    if len(kept):
        _put_inner(columns, buf, headers, inner, _Kept.of(kept, inner, cut))
    return columns.finish()


def _decompressed_bodies(buf: memoryview, headers: RecordHeaders, records: np.ndarray) -> tuple:
    """The bodies of single records flagged compressed, decompressed into one buffer, and where
    each starts (RecordFormatError naming a record whose body does not decompress)."""
    try:
        kinds = [Compression.from_sys_flag(int(flag)) for flag in headers.sys_flag[records]]
        return decompress_all(buf, headers.body_start[records], headers.body_length[records], kinds)
    except PayloadError as err:
        raise RecordFormatError(f"{_where(int(records[err.index]), headers)}: its compressed body does not "
                                f"decompress: {err}") from None
    except CodecError as err:
        raise RecordFormatError(f"a compressed message body: {err}") from None


def _record_columns(buf: memoryview, headers: RecordHeaders, cut: _Cut, done: Finished) -> list[pa.Array]:
    """The read schema's columns but properties: messages take their record's topic, queue and
    store time, and its born time unless they carry their own."""
    record_rows = np.repeat(np.arange(len(headers)), cut.rows)
    queue_offset = np.arange(cut.nrows, dtype=np.int64) + np.repeat(headers.queue_offset + cut.first - cut.row_start,
                                                                     cut.rows)
    born_ms = headers.born_ms[record_rows]
    if done.born_valid.any():
        born_ms = np.where(done.born_valid, done.born_ms, born_ms)
    return [
        _topics(buf, headers, record_rows, cut.nrows),
        _numbers(headers.queue_id[record_rows], pa.int32()),
        _numbers(queue_offset, pa.int64()),
        done.body, done.tags, done.keys,
        _numbers(born_ms * 1000, _TIMESTAMP),
        _numbers(headers.store_ms[record_rows] * 1000, _TIMESTAMP),
    ]


def _numbers(values: np.ndarray, type: pa.DataType) -> pa.Array:
    """A numpy array of native integers as an Arrow array of ``type`` (no copy)."""
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _inner_batches(buf: memoryview, headers: RecordHeaders) -> _InnerBatches:
    """Count, codec, compression and tags of each inner batch record (Python per batch: a
    record's few properties split in one pass)."""
    records = np.flatnonzero(headers.sys_flag & SysFlag.INNER_BATCH)
    count, arrow, compressions, tags = [], [], [], []
    fields = (headers.queue_offset, headers.sys_flag, headers.props_start, headers.props_length)
    for record, base, sys_flag, props_start, props_length in zip(records.tolist(),
                                                                  *(f[records].tolist() for f in fields)):
        try:
            properties = decode_properties(buf[props_start:props_start + props_length])
        except UnicodeDecodeError as err:
            raise RecordFormatError(f"{_where(record, headers)}: its properties are not UTF-8 ({err.reason})") from None
        inner_base = properties.get(PROPERTY_INNER_BASE)
        if inner_base is not None and inner_base != str(base):
            raise RecordFormatError(f"{_where(record, headers)}: QUEUEOFFSET {base} but INNER_BASE {inner_base}")
        codec = properties.get(PROPERTY_BATCH_CODEC, "rmq")
        if codec not in ("rmq", "arrow"):
            raise RecordFormatError(f"{_where(record, headers)}: unknown BATCH_CODEC {codec!r}; this client reads rmq "
                                    "and arrow")
        try:
            compressions.append(Compression.from_sys_flag(sys_flag))
        except ValueError as err:
            raise RecordFormatError(f"{_where(record, headers)}: {err}") from None
        count.append(_inner_count(properties.get(PROPERTY_INNER_NUM), _where(record, headers)))
        arrow.append(codec == "arrow")
        tags.append(properties.get(PROPERTY_TAGS))
    return _InnerBatches(records, np.array(count, dtype=np.int64), np.array(arrow, dtype=bool), compressions, tags)


@dataclass
class _Kept:
    """The inner batches some of whose messages are kept (numpy arrays, one element a batch)."""

    batch: np.ndarray  # index into _InnerBatches
    first: np.ndarray  # the first message kept
    rows: np.ndarray  # how many are kept
    row_start: np.ndarray  # the row the first one becomes

    @classmethod
    def of(cls, kept: np.ndarray, inner: _InnerBatches, cut: _Cut) -> "_Kept":
        records = inner.record[kept]
        return cls(kept, cut.first[records], cut.rows[records], cut.row_start[records])

    def subset(self, which: np.ndarray) -> "_Kept":
        return _Kept(*(getattr(self, name)[which] for name in ("batch", "first", "rows", "row_start")))

    def out_rows(self):
        """The rows the kept messages become: a slice when they follow one another."""
        if (self.row_start[1:] == self.row_start[:-1] + self.rows[:-1]).all():
            return slice(int(self.row_start[0]), int(self.row_start[-1] + self.rows[-1]))
        return concat_ranges(self.row_start, self.rows)


def _put_inner(columns: MessageColumns, buf: memoryview, headers: RecordHeaders, inner: _InnerBatches,
               kept: _Kept) -> None:
    """Decode the kept inner batches: the rmq ones together, the arrow ones together."""
    arrow_batches = inner.arrow[kept.batch]
    if not arrow_batches.all():
        _put_rmq(columns, buf, headers, inner, kept.subset(~arrow_batches))
    if arrow_batches.any():
        _put_arrow(columns, buf, headers, inner, kept.subset(arrow_batches))
    _put_fallback_tags(columns, inner, kept)


def _payloads(buf: memoryview, headers: RecordHeaders, inner: _InnerBatches, kept: _Kept) -> tuple:
    """Arguments of ``decompress_all`` / ``decompress_each`` for the payloads of ``kept``."""
    records = inner.record[kept.batch]
    return (buf, headers.body_start[records], headers.body_length[records],
            [inner.compression[i] for i in kept.batch.tolist()])


def _put_rmq(columns: MessageColumns, buf: memoryview, headers: RecordHeaders, inner: _InnerBatches,
             kept: _Kept) -> None:
    """Decompress the payloads into one buffer (uncompressed ones are read where they lie)
    and scan all their entries at once."""
    try:
        source, starts, lengths, compressions = _payloads(buf, headers, inner, kept)
        if all(compression is Compression.NONE for compression in compressions):
            joined, begins, ends = source, starts, starts + lengths
        else:
            joined, offsets = decompress_all(source, starts, lengths, compressions)
            begins, ends = offsets[:-1], offsets[1:]
        entries = rmq.scan_payloads(joined, begins, ends)
    except (PayloadError, rmq.BatchFormatError) as err:
        index = err.index if isinstance(err, PayloadError) else err.payload
        raise _payload_error(err, int(kept.batch[index]), inner, headers) from None
    _check_counts(np.diff(entries.first), kept, inner, headers)
    taken = concat_ranges(entries.first[:-1] + kept.first, kept.rows)
    rmq.put_entries(columns, kept.out_rows(), joined, entries, taken)


def _put_arrow(columns: MessageColumns, buf: memoryview, headers: RecordHeaders, inner: _InnerBatches,
               kept: _Kept) -> None:
    """Read each payload's record batch; the columns concatenate them all at once."""
    try:
        batches = arrow.decode_payloads(decompress_each(*_payloads(buf, headers, inner, kept)))
    except (PayloadError, arrow.ArrowPayloadError) as err:
        index = err.index if isinstance(err, PayloadError) else err.payload
        raise _payload_error(err, int(kept.batch[index]), inner, headers) from None
    _check_counts(np.array([batch.num_rows for batch in batches], dtype=np.int64), kept, inner, headers)
    cut = np.flatnonzero((kept.first > 0) | (kept.rows < inner.count[kept.batch]))
    for i in cut.tolist():  # at most the first and the last batch of a range
        batches[i] = batches[i].slice(int(kept.first[i]), int(kept.rows[i]))
    columns.put_columns(kept.out_rows(), pa.Table.from_batches(batches, schema=BATCH_SCHEMA))


def _put_fallback_tags(columns: MessageColumns, inner: _InnerBatches, kept: _Kept) -> None:
    """A record's TAGS, for its inner messages without tags of their own."""
    def fill(column: RangeColumn) -> None:
        for batch, row_start, rows in zip(kept.batch.tolist(), kept.row_start.tolist(), kept.rows.tolist()):
            if inner.tags[batch] is not None:
                column.put_constant(slice(row_start, row_start + rows), inner.tags[batch].encode())
    columns.put_fallback_tags(fill)


def _check_counts(found: np.ndarray, kept: _Kept, inner: _InnerBatches, headers: RecordHeaders) -> None:
    bad = found != inner.count[kept.batch]
    if bad.any():
        i = int(np.argmax(bad))
        batch = int(kept.batch[i])
        raise RecordFormatError(f"{inner.where(batch, headers)}: the inner batch holds {found[i]} messages but its "
                                f"INNER_NUM says {inner.count[batch]}")


def _payload_error(err: ValueError, batch: int, inner: _InnerBatches, headers: RecordHeaders) -> RecordFormatError:
    codec = "arrow" if inner.arrow[batch] else "rmq"
    return RecordFormatError(f"{inner.where(batch, headers)}, an inner batch ({codec}, "
                             f"{inner.compression[batch].name.lower()}): {err}")


def _topics(buf: memoryview, headers: RecordHeaders, record_rows: np.ndarray, nrows: int) -> pa.Array:
    """The topic of each row; usually one topic for all, built without a gather."""
    first = int(headers.topic_start[0])
    name = bytes(buf[first:first + int(headers.topic_length[0])])
    if (headers.topic_length == len(name)).all() and matches(buf, headers.topic_start, name).all():
        return _repeated_string(name, nrows)
    column = RangeColumn()
    column.put(slice(0, nrows), buf, headers.topic_start[record_rows], headers.topic_length[record_rows])
    try:
        return column.finish(nrows, pa.string())
    except pa.ArrowInvalid as err:
        raise RecordFormatError(f"a record's topic is not UTF-8: {err}") from None


def _repeated_string(value: bytes, count: int) -> pa.Array:
    try:
        value.decode()
    except UnicodeDecodeError as err:
        raise RecordFormatError(f"topic {value!r} is not UTF-8: {err}") from None
    offsets = np.arange(count + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(value * count)])
