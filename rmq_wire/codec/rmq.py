"""RocketMQ's MessageBatch encoding, as RocketMQ's client writes it for a batch send.

Per message, concatenated, big-endian::

    TOTALSIZE 4 | MAGIC 4 (0) | BODYCRC 4 (0) | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES

TOTALSIZE counts the whole entry. TAGS and KEYS travel as properties. The encoding carries no
born timestamp: the stored record's applies to every message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_wire.codec._bytes import ChainError, as_uint8, chains_entry_starts, concat_ranges, entry_starts, read_at
from rmq_wire.codec._messages import MessageColumns
from rmq_wire.codec.columns import BATCH_SCHEMA
from rmq_wire.codec.properties import SYSTEM_PROPERTIES, encode_property_column
from rmq_wire.errors import BatchFormatError, CodecError
from rmq_wire.record import (
    BATCH_ENTRY,
    BATCH_ENTRY_FIXED_BYTES,
    MAX_PROPERTIES_BYTES,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)

_BODYLEN_AT = 16
_HEADER = np.dtype([("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("flag", ">i4"), ("body_length", ">i4")])


_PROPLEN = struct.Struct(">h")


def encode_rows(rows, unique_keys=None) -> bytes:
    """The MessageBatch payload of ``(body, properties, keys, tags)`` Python values (properties
    as (name, value) pairs), uncompressed; with ``unique_keys``, each message's UNIQ_KEY (its
    id, as RocketMQ's clients set it).

    The producer's path: its messages are Python objects already, and for a batch of tens of
    them joining bytes is several times cheaper than building Arrow columns first. Properties
    are written and checked as ``encode_property_column`` writes and checks them.
    """
    parts = []
    for index, (body, properties, keys, tags) in enumerate(rows):
        props = _encode_row_properties(index, properties, keys, tags)
        if unique_keys is not None:
            props += f"{PROPERTY_UNIQ_KEY}\x01{unique_keys[index]}\x02".encode()
        parts += [BATCH_ENTRY.pack(BATCH_ENTRY_FIXED_BYTES + len(body) + len(props), 0, 0, 0, len(body)), body,
                  _PROPLEN.pack(len(props)), props]
    return b"".join(parts)


def encode_plain(bodies, tags: str | None = None) -> bytes:
    """The MessageBatch payload of messages that carry a body and at most ``tags``, shared by
    all (a producer's batch is keyed by its tag), uncompressed: ``encode_rows`` of such rows.

    The properties are encoded once, and an entry's header once per run of equal body sizes,
    so a message costs a length and three list items: the producer's commonest batch."""
    props = _encode_row_properties(0, None, None, tags)
    tail = _PROPLEN.pack(len(props)) + props
    fixed = BATCH_ENTRY_FIXED_BYTES + len(props)
    parts: list = []
    header, size = b"", -1
    for body in bodies:
        if len(body) != size:
            size = len(body)
            header = BATCH_ENTRY.pack(fixed + size, 0, 0, 0, size)
        parts += (header, body, tail)
    return b"".join(parts)


def _encode_row_properties(index: int, properties, keys, tags) -> bytes:
    if not properties and _plain(keys) and _plain(tags):  # most messages: tags and keys only
        text = ("" if tags is None else f"{PROPERTY_TAGS}\x01{tags}\x02") + \
            ("" if keys is None else f"{PROPERTY_KEYS}\x01{keys}\x02")
        if len(text) <= MAX_PROPERTIES_BYTES // 4:  # fits whatever its UTF-8 length
            return text.encode()
    entries = [(PROPERTY_TAGS, tags, "tags"), (PROPERTY_KEYS, keys, "keys")]
    for name, value in properties or ():
        if not name or name in SYSTEM_PROPERTIES:
            raise CodecError(f"message {index}: property name {name!r}: use a non-empty name other than the "
                             f"system names ({', '.join(sorted(SYSTEM_PROPERTIES))})")
        if value is None:
            raise CodecError(f"message {index}: property {name!r} is null; rocketmq properties carry strings only")
        entries += [(name, value, "property values")]
    out = []
    for name, value, what in entries:
        if value is None:
            continue
        for text, kind in ((name, "property names"), (value, what)):
            if "\x01" in text or "\x02" in text:
                raise CodecError(f"message {index}: {kind} {text!r} contains \\x01 or \\x02, the property "
                                 "separators")
        out.append(f"{name}\x01{value}\x02")
    encoded = "".join(out).encode()
    if len(encoded) > MAX_PROPERTIES_BYTES:
        raise CodecError(f"message {index}: properties take {len(encoded)} bytes encoded; the limit is "
                         f"{MAX_PROPERTIES_BYTES}")
    return encoded


def _plain(text) -> bool:
    """None, or a string without the property separators."""
    return text is None or (isinstance(text, str) and "\x01" not in text and "\x02" not in text)


def encode(batch: pa.RecordBatch, unique_keys: pa.Array | None = None) -> pa.Buffer:
    """The MessageBatch payload of ``batch`` (in ``BATCH_SCHEMA``), uncompressed.

    Each row is built as header, body and properties joined by Arrow (one C++ pass), so the
    rows' bytes, one after another, are the payload.
    """
    data, offsets = encode_with_offsets(batch, unique_keys)
    return data[int(offsets[0]):int(offsets[-1])] if batch.num_rows else pa.py_buffer(b"")


def encode_with_offsets(batch: pa.RecordBatch, unique_keys: pa.Array | None = None) -> tuple[pa.Buffer, np.ndarray]:
    """``encode``'s rows, with where each starts: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``,
    so the payload of any run of rows is a slice (``rows + 1`` offsets). ``unique_keys``: each
    row's UNIQ_KEY (a string array)."""
    rows = batch.num_rows
    body = batch.column(0)
    properties = encode_property_column(batch.column(2), batch.column(1), batch.column(3), unique_keys)
    body_lengths = np.asarray(pc.binary_length(body), dtype=np.int64)
    props_lengths = np.asarray(pc.binary_length(properties), dtype=np.int64)
    totals = BATCH_ENTRY_FIXED_BYTES + body_lengths + props_lengths
    if rows and int(totals.max()) > 0x7FFFFFFF:
        raise CodecError("a message of 2 GiB or more cannot be encoded: TOTALSIZE is a 32-bit integer")
    header = np.zeros(rows, dtype=_HEADER)
    header["total"] = totals
    header["body_length"] = body_lengths
    props_length = props_lengths.astype(">i2")
    joined = pc.binary_join_element_wise(
        _fixed_width(header.tobytes(), BATCH_ENTRY.size, rows), body,
        _fixed_width(props_length.tobytes(), 2, rows), properties, b"")
    _, offsets, data = joined.buffers()
    return (data if data is not None else pa.py_buffer(b"")), \
        np.frombuffer(offsets, dtype=np.int32)[joined.offset:joined.offset + rows + 1]


def _fixed_width(raw: bytes, width: int, rows: int) -> pa.Array:
    """A binary array of ``rows`` values of ``width`` bytes each, over ``raw`` (no copy)."""
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


@dataclass
class Entries:
    """Where each message of one or more MessageBatch payloads lies (numpy int64 arrays, byte
    offsets into the buffer scanned); payload ``i`` holds entries ``first[i]`` .. ``first[i + 1] - 1``."""

    body_start: np.ndarray
    body_length: np.ndarray
    props_start: np.ndarray
    props_length: np.ndarray
    first: np.ndarray

    def __len__(self) -> int:
        return len(self.body_start)


def scan(payload) -> Entries:
    """Find every message of a MessageBatch payload and check its lengths (``scan_payloads``
    of one, without its machinery for many: a payload checked alone costs a few numpy calls)."""
    begins, ends = np.zeros(1, dtype=np.int64), np.full(1, len(payload), dtype=np.int64)
    if not len(payload):
        raise BatchFormatError("rmq batch payload is empty: a batch holds at least one message")
    try:
        starts = entry_starts(payload, BATCH_ENTRY_FIXED_BYTES, "rmq batch: message")
    except ChainError as err:
        raise BatchFormatError(str(err)) from None
    return _checked_entries(payload, starts, begins, ends)


_WALKED_ENTRIES = 64  # up to this many entries a Python walk checks a payload faster than numpy's calls (~30 us)
_LENGTHS = struct.Struct(f">i{_BODYLEN_AT - 4}xi")  # TOTALSIZE, then BODYLEN


def count(payload) -> int:
    """How many messages a MessageBatch payload holds, its lengths checked as ``scan`` checks
    them, and its properties as readers decode them (UTF-8): the broker's check of every batch
    it stores. Tens of entries are walked in Python, ~3x quicker than ``scan``'s numpy calls; a
    longer or a bad payload goes to ``scan``, which counts the long one and names what is wrong
    with the bad one."""
    raw = payload if isinstance(payload, bytes) else bytes(payload)  # bytes slice fast; a copy of KiBs is cheap
    found = _walked(raw)
    if found:
        return found
    entries = scan(raw)
    _check_properties_text(raw, entries)
    return len(entries)


def _walked(raw: bytes) -> int | None:
    """``count`` of a payload of few entries, each of whose properties is ASCII, by a Python
    walk; None for any other (more entries than the walk takes, judged by the first entry's
    length, as AutoBatch's 256 KiB of 1 KB messages; a property past ASCII; a bad length)."""
    end = len(raw)
    lengths, proplen = _LENGTHS.unpack_from, _PROPLEN.unpack_from
    if end < BATCH_ENTRY_FIXED_BYTES or lengths(raw, 0)[0] * _WALKED_ENTRIES < end:
        return None
    all_text = raw.isascii()  # bodies of text too: no property needs a look (else each is looked at as it is met)
    pos = found = 0
    while pos < end and found < _WALKED_ENTRIES:
        if end - pos < BATCH_ENTRY_FIXED_BYTES:
            return None
        total, body = lengths(raw, pos)
        if not BATCH_ENTRY_FIXED_BYTES <= total <= end - pos or not 0 <= body <= total - BATCH_ENTRY_FIXED_BYTES or \
                proplen(raw, pos + BATCH_ENTRY.size + body)[0] != total - BATCH_ENTRY_FIXED_BYTES - body:
            return None
        if not all_text and not raw[pos + BATCH_ENTRY_FIXED_BYTES + body:pos + total].isascii():
            return None  # UTF-8 beyond ASCII, or not UTF-8: decoded by the caller, naming the message if it is not
        pos += total
        found += 1
    return found if pos == end and found else None


def _check_properties_text(raw: bytes, entries: Entries) -> None:
    """Readers decode property names and values as UTF-8 strings: a payload whose properties
    are not would be stored for no reader to read. The properties' bytes alone are gathered
    (tens a message, where bodies are KiBs), those holding a byte past ASCII found for all
    entries at once, and only those decoded."""
    has = entries.props_length > 0
    if not has.any():
        return
    starts, lengths, messages = entries.props_start[has], entries.props_length[has], np.flatnonzero(has)
    firsts = np.cumsum(lengths) - lengths  # where each message's properties begin among those gathered
    found = np.add.reduceat(as_uint8(raw)[concat_ranges(starts, lengths)] >= 0x80, firsts)
    for message, start, length in zip(*(a[found > 0].tolist() for a in (messages, starts, lengths))):
        try:
            raw[start:start + length].decode()
        except UnicodeDecodeError as err:
            raise BatchFormatError(f"rmq batch: message {message}: its properties are not UTF-8 text ({err.reason}); "
                                   "property names and values are strings: encode them as UTF-8") from None


def scan_payloads(buf, begins: np.ndarray, ends: np.ndarray) -> Entries:
    """Find every message of the payloads at ``buf[begins[i]:ends[i]]`` (in buffer order) and
    check their lengths, all payloads at once.

    Raises BatchFormatError (``payload``: which one) naming the message and byte offset in its
    payload of the first bad entry: TOTALSIZE too small or past the end, BODYLEN past
    TOTALSIZE, PROPLEN disagreeing.
    """
    if (ends <= begins).any():
        raise BatchFormatError("rmq batch payload is empty: a batch holds at least one message",
                               int(np.argmax(ends <= begins)))
    try:
        starts = chains_entry_starts(buf, begins, ends, BATCH_ENTRY_FIXED_BYTES)
    except ChainError as err:
        _explain_chain(buf, int(begins[err.index]), int(ends[err.index]), err.index)
        raise  # not reached: the chain alone fails too
    return _checked_entries(buf, starts, begins, ends)


def _checked_entries(buf, starts: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> Entries:
    """The entries at ``starts`` (each payload's TOTALSIZE chain, walked), their BODYLEN and
    PROPLEN checked against TOTALSIZE."""
    first = np.append(np.searchsorted(starts, begins), len(starts))
    following = np.append(starts[1:], 0)
    following[first[1:] - 1] = ends  # a payload's last entry runs to its end
    totals = following - starts
    body_length = read_at(buf, starts + _BODYLEN_AT, ">i4").astype(np.int64)
    bad = (body_length < 0) | (body_length > totals - BATCH_ENTRY_FIXED_BYTES)
    if bad.any():
        i, where = _where(bad, starts, first, begins)
        raise BatchFormatError(f"rmq batch: {where}: BODYLEN {body_length[i]} does not fit its TOTALSIZE "
                               f"{totals[i]}", int(np.searchsorted(first, i, side="right") - 1))
    props_length_at = starts + BATCH_ENTRY.size + body_length
    props_length = read_at(buf, props_length_at, ">i2").astype(np.int64)
    bad = props_length != totals - BATCH_ENTRY_FIXED_BYTES - body_length
    if bad.any():
        i, where = _where(bad, starts, first, begins)
        raise BatchFormatError(f"rmq batch: {where}: PROPLEN {props_length[i]} disagrees with TOTALSIZE "
                               f"{totals[i]} and BODYLEN {body_length[i]}",
                               int(np.searchsorted(first, i, side="right") - 1))
    return Entries(starts + BATCH_ENTRY.size, body_length, props_length_at + 2, props_length, first)


def _where(bad: np.ndarray, starts: np.ndarray, first: np.ndarray, begins: np.ndarray) -> tuple[int, str]:
    """The first bad entry, and "message i at byte b" of it in its own payload."""
    i = int(np.argmax(bad))
    payload = int(np.searchsorted(first, i, side="right") - 1)
    return i, f"message {i - first[payload]} at byte {starts[i] - begins[payload]}"


def _explain_chain(buf, begin: int, end: int, payload: int) -> None:
    """Raise BatchFormatError for a payload whose TOTALSIZE chain does not parse."""
    try:
        entry_starts(memoryview(buf).cast("B")[begin:end], BATCH_ENTRY_FIXED_BYTES, "rmq batch: message")
    except ChainError as err:
        raise BatchFormatError(str(err), payload) from None


def put_entries(columns: MessageColumns, rows, buf, entries: Entries, taken) -> None:
    """Put the entries ``taken`` (a slice or indices) of scanned payloads at ``rows``."""
    columns.put_encoded(rows, buf, entries.body_start[taken], entries.body_length[taken],
                        entries.props_start[taken], entries.props_length[taken])


def decode(payload) -> pa.RecordBatch:
    """A MessageBatch payload (uncompressed) as a record batch in ``BATCH_SCHEMA``.

    Bodies are copied once, out of ``payload``; born_timestamp is null (not carried).
    """
    entries = scan(payload)
    rows = len(entries)
    columns = MessageColumns(rows)
    put_entries(columns, slice(0, rows), payload, entries, slice(0, rows))
    done = columns.finish()
    return pa.RecordBatch.from_arrays(
        [done.body, done.keys, done.tags, done.properties, pa.nulls(rows, pa.int64())], schema=BATCH_SCHEMA)
