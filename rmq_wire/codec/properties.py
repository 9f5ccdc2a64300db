"""RocketMQ message properties: ``name\\x01value\\x02`` repeated, UTF-8.

TAGS and KEYS are properties of their own names. The names, the separators and one message's
properties decoded in Python are the record format's (``rmq_wire.record``); here are a column
of messages' properties. Decoding is vectorized: the encoded properties of all messages,
gathered into one buffer, are cut at their separators with numpy (``PropertyEntries``), so no
Python runs per message. Like RocketMQ's decoder, an entry
without a ``\\x01`` or with an empty name is skipped, and the last separator may be missing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_wire.codec._bytes import as_uint8, matches, read_at
from rmq_wire.codec._gather import MapColumn, gather_ranges
from rmq_wire.codec.columns import string_array
from rmq_wire.errors import CodecError
from rmq_wire.record import (
    MAX_PROPERTIES_BYTES,
    NAME_VALUE_SEPARATOR,
    PROPERTY_BATCH_CODEC,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_INNER_BASE,
    PROPERTY_INNER_NUM,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER,
    PROPERTY_RECORD_CRC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_PROPERTIES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
)

# Properties that are not the user's: TAGS and KEYS have columns of their own; the others are
# written by brokers (RocketMQ's and broker_sim's) or by RocketMQ's producer for itself.
SYSTEM_PROPERTIES = frozenset({
    PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_INNER_NUM, PROPERTY_INNER_BASE, PROPERTY_BATCH_CODEC,
    PROPERTY_RECORD_CRC, "__CRC32#", PROPERTY_PRODUCER, PROPERTY_WAIT_STORE_MSG_OK, PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TRANSACTION_PREPARED, "PGROUP", PROPERTY_UNIQ_KEY, "MIN_OFFSET", "MAX_OFFSET", "REAL_TOPIC", "REAL_QID",
    "RETRY_TOPIC", "POP_CK", "CLUSTER", "MSG_REGION", "TRACE_ON", *PROPERTY_TIMER_PROPERTIES,
})

_SEPARATORS = "[\x01\x02]"
_SYSTEM_NAMES = string_array(sorted(SYSTEM_PROPERTIES))


# --- a column of messages, vectorized --------------------------------------------------------

def encode_property_column(tags: pa.Array, keys: pa.Array, properties: pa.Array,
                           unique_keys: pa.Array | None = None) -> pa.Array:
    """Each row's encoded properties (binary): TAGS, KEYS (when not null), user properties,
    and with ``unique_keys`` (a string array) UNIQ_KEY.

    ``tags`` and ``keys`` are string arrays, ``properties`` a map<string, string> array.
    Raises CodecError naming the first offending row for separators in names or values,
    empty, system or null names, null values, or properties over the size limit.
    """
    pieces = [_named_piece(name, values) for name, values in ((PROPERTY_TAGS, tags), (PROPERTY_KEYS, keys))
              if values.null_count < len(values)]
    entries = sum(len(values) - values.null_count for values in (tags, keys))
    if len(properties.keys):
        pieces.append(_user_piece(properties))
        entries += int(properties.offsets[-1].as_py() - properties.offsets[0].as_py())
    if unique_keys is not None:
        pieces.append(_named_piece(PROPERTY_UNIQ_KEY, unique_keys))
        entries += len(unique_keys) - unique_keys.null_count
    if not pieces:
        return pa.array([b""] * len(tags), pa.binary())
    joined = (pieces[0] if len(pieces) == 1 else pc.binary_join_element_wise(*pieces, "")).cast(pa.binary())
    _, offsets_buf, data_buf = joined.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(joined) + 1, offset=4 * joined.offset)
    data = as_uint8(data_buf)[offsets[0]:offsets[-1]] if data_buf is not None else np.zeros(0, dtype=np.uint8)
    # Each entry brings one \x01 and one \x02: any more came inside a name or a value.
    if np.count_nonzero(data == 1) != entries or np.count_nonzero(data == 2) != entries:
        _check_no_separators(tags, "tags", lambda index: index)
        _check_no_separators(keys, "keys", lambda index: index)
        first, last = properties.offsets[0].as_py(), properties.offsets[-1].as_py()
        for what, values in (("property names", properties.keys), ("property values", properties.items)):
            _check_no_separators(values.slice(first, last - first), what,
                                 lambda index: _row_of(index + first, properties))
    lengths = np.diff(offsets)
    if len(lengths) and lengths.max() > MAX_PROPERTIES_BYTES:
        row = int(np.argmax(lengths > MAX_PROPERTIES_BYTES))
        raise CodecError(f"message {row}: properties take {lengths[row]} bytes encoded; the limit is "
                         f"{MAX_PROPERTIES_BYTES}")
    return joined


def _named_piece(name: str, values: pa.Array) -> pa.Array:
    piece = pc.binary_join_element_wise(f"{name}\x01", values, "\x02", "")
    return pc.fill_null(piece, "")


def _user_piece(properties: pa.Array) -> pa.Array:
    offsets = np.asarray(properties.offsets, dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    names = properties.keys.slice(first, last - first)
    values = properties.items.slice(first, last - first)
    _check_user_names(names, properties)
    if values.null_count:
        entry = pc.index(pc.is_null(values), True).as_py()
        raise CodecError(f"message {_row_of(entry + first, properties)}: property {names[entry].as_py()!r} is null; "
                         "rocketmq properties carry strings only")
    entries = pc.binary_join_element_wise(names, "\x01", values, "\x02", "")
    lists = pa.ListArray.from_arrays(pa.array(offsets - first, type=pa.int32()), entries)
    return pc.fill_null(pc.binary_join(lists, ""), "")


def _row_of(entry: int, properties: pa.Array) -> int:
    """The row of a map array that holds entry ``entry`` of its children."""
    return int(np.searchsorted(np.asarray(properties.offsets), entry, side="right")) - 1


def _check_user_names(names: pa.Array, properties: pa.Array) -> None:
    bad = pc.or_(pc.is_in(names, value_set=_SYSTEM_NAMES), pc.equal(pc.binary_length(names), 0))
    if pc.any(bad).as_py():
        entry = pc.index(bad, True).as_py()
        first = properties.offsets[0].as_py()
        raise CodecError(f"message {_row_of(entry + first, properties)}: property name {names[entry].as_py()!r}: use "
                         f"a non-empty name other than the system names ({', '.join(sorted(SYSTEM_PROPERTIES))})")


def _check_no_separators(values: pa.Array, what: str, row_of) -> None:
    """Raise for the first value holding a separator; ``row_of`` maps its index to its message."""
    if not len(values) or values.null_count == len(values):
        return
    bad = pc.match_substring_regex(values, _SEPARATORS)
    if pc.any(bad).as_py():
        index = pc.index(bad, True).as_py()
        row = row_of(index)
        raise CodecError(f"message {row}: {what} {values[index].as_py()!r} contains \\x01 or \\x02, the "
                         "property separators")


class PropertyEntries:
    """The properties of many messages, cut into entries (numpy arrays, one element an entry).

    Positions are byte offsets into ``data``, the buffer holding every message's encoded
    properties one after another. Entry ``j`` spans ``start[j]`` .. ``end[j]`` (exclusive:
    its separator, or its message's end); the entries of row ``r`` are ``first[r]`` ..
    ``first[r + 1] - 1``.
    """

    def __init__(self, encoded: pa.Array):
        """Cut a binary array of encoded properties (one row per message; null = none)."""
        _, offsets_buf, data_buf = encoded.buffers()[:3]
        offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(encoded) + 1,
                                offset=4 * encoded.offset).astype(np.int64)
        self.data = as_uint8(data_buf)[: offsets[-1]] if data_buf is not None else np.zeros(0, dtype=np.uint8)
        # Entry boundaries in doubled coordinates: a separator at p is 2p; a missing last
        # separator at a row's end e is 2e - 1, which sorts before a separator at e (that one
        # belongs to the next row). The entry after a boundary k starts at (k + 2) // 2.
        bounds = 2 * np.flatnonzero(self.data == PROPERTY_SEPARATOR[0])
        open_rows = _rows_without_last_separator(self.data, offsets)
        if len(open_rows):
            bounds = np.sort(np.concatenate((bounds, 2 * offsets[open_rows + 1] - 1)))
        self.end = (bounds + 1) // 2
        self.first = np.searchsorted(bounds, 2 * offsets)
        self.start = np.empty_like(self.end)
        self.start[1:] = (bounds[:-1] + 2) // 2
        has_entries = self.first[1:] > self.first[:-1]
        self.start[self.first[:-1][has_entries]] = offsets[:-1][has_entries]
        self._head = None

    def values(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows holding property ``name``, and its value's starts and lengths in ``data``.

        A row holding the name twice (no encoder of ours writes that) gives its first value.
        """
        entries = self._named(name)
        rows = np.searchsorted(self.first, entries, side="right") - 1
        first = np.ones(len(entries), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        entries, rows = entries[first], rows[first]
        value_start = self.start[entries] + len(name) + 1
        return rows, value_start, self.end[entries] - value_start

    def _named(self, name: str) -> np.ndarray:
        """Every entry of property ``name``: those starting with ``name\x01``, in order."""
        prefix = name.encode() + NAME_VALUE_SEPARATOR
        if len(prefix) > 8:
            candidates = np.flatnonzero(self.end - self.start >= len(prefix))
            return candidates[matches(self.data, self.start[candidates], prefix)]
        if self._head is None:
            # Each entry's first 8 bytes, read once for every name looked up.
            self._head = read_at(self.data, self.start, "<u8", padded=True)
        mask = np.uint64((1 << (8 * len(prefix))) - 1)
        expected = np.uint64(int.from_bytes(prefix, "little"))
        return np.flatnonzero(((self._head & mask) == expected) & (self.end - self.start >= len(prefix)))

    def put_user_map(self, column: MapColumn, rows: np.ndarray, nrows: int) -> None:
        """Put the user properties (not the system ones) of ``rows`` into ``column``."""
        # An entry's name ends at its first \x01; entries without one, or nameless, are dropped.
        name_ends = np.flatnonzero(self.data == NAME_VALUE_SEPARATOR[0])
        at = np.searchsorted(name_ends, self.start)
        sep = name_ends[np.minimum(at, len(name_ends) - 1)] if len(name_ends) else self.start
        named = np.flatnonzero((at < len(name_ends)) & (sep < self.end) & (sep > self.start))
        if not len(named):
            return  # rows never put are empty maps
        start, sep, end = self.start[named], sep[named], self.end[named]
        everything = np.arange(len(named))
        names = gather_ranges(self.data, everything, start, sep - start, len(named), pa.string())
        user = np.flatnonzero(~np.asarray(pc.is_in(names, value_set=_SYSTEM_NAMES), dtype=bool))
        values = gather_ranges(self.data, np.arange(len(user)), sep[user] + 1, end[user] - sep[user] - 1, len(user),
                               pa.string())
        entry_rows = np.searchsorted(self.first, named[user], side="right") - 1
        counts = np.bincount(entry_rows, minlength=nrows)[rows]
        column.put(rows, counts, names.take(pa.array(user)), values)


def _rows_without_last_separator(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows whose properties do not end with \x02 (RocketMQ's decoder accepts that)."""
    rows = np.flatnonzero(offsets[1:] > offsets[:-1])
    return rows[data[offsets[rows + 1] - 1] != PROPERTY_SEPARATOR[0]]
