"""Arrow columns gathered from byte ranges of several buffers, with one copy.

A decoded message's body (or key, tag, topic, property) is a byte range of some buffer: a
decompressed batch payload, the records buffer, an Arrow array's data. Rather than copying
each range on its own, a column collects the ranges as the rows of an Arrow ``binary_view``
array (16 bytes a row: the length, then either the bytes inline when there are 12 or fewer,
or a 4-byte prefix, a buffer index and an offset) over all those buffers; one cast to
``binary`` or ``string`` at the end then copies every range, in C++, into the result.
Rows may be put in any order. A column made only of whole Arrow arrays in row order is
concatenated instead, which costs the same one copy and no numpy work per part. Either way
the column is a copy: it never refers to the buffers it was gathered from.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rmq_wire.codec._bytes import concat_ranges, read_at
from rmq_wire.errors import CodecError

_INLINE = 12  # binary_view keeps ranges of up to 12 bytes in the view itself
_WORDS = 4  # a view as four int32: length, then prefix / buffer index / offset, or inline bytes
_PREFIX = "<i4" if np.little_endian else ">i4"  # the first 4 bytes as they lie in memory
_OFFSET_TYPES = (pa.binary(), pa.string())


class Sources:
    """The buffers views point into, numbered; columns sharing one can share views."""

    def __init__(self):
        self.buffers: list = []
        self._index: dict[int, int] = {}

    def index(self, source) -> int:
        found = self._index.get(id(source))
        if found is None:
            found = self._index[id(source)] = len(self.buffers)
            self.buffers.append(source)  # kept alive, so its id stays its own
        return found

    def views(self, source, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The views (an (n, 4) int32 array) of ranges ``starts[i]``, ``lengths[i]`` of ``source``."""
        lengths = lengths.astype(np.int32, copy=False)
        views = np.zeros((len(starts), _WORDS), dtype=np.int32)
        views[:, 0] = lengths
        long = lengths > _INLINE
        if long.all():
            views[:, 1] = read_at(source, starts, _PREFIX)
            views[:, 2] = self.index(source)
            views[:, 3] = starts
            return views
        if long.any():
            views[long, 1] = read_at(source, starts[long], _PREFIX)
            views[long, 2] = self.index(source)
            views[long, 3] = starts[long]
        short = ~long
        _inline(views, short, source, starts[short], lengths[short])
        return views

    def constant_view(self, value: bytes) -> np.ndarray:
        """One row's view of ``value`` (numpy broadcasts it over the rows it is put at)."""
        view = np.zeros(_WORDS, dtype=np.int32)
        view[0] = len(value)
        raw = view.view(np.uint8)
        if len(value) <= _INLINE:
            raw[4:4 + len(value)] = np.frombuffer(value, dtype=np.uint8)
        else:
            raw[4:8] = np.frombuffer(value[:4], dtype=np.uint8)
            view[2] = self.index(value)
        return view


# Masks keeping the first n bytes of a little-endian integer (the format zero-pads inline bytes).
_KEEP8 = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
_KEEP4 = np.array([(1 << (8 * n)) - 1 for n in range(5)], dtype=np.uint32)


def _inline(views: np.ndarray, rows: np.ndarray, source, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Write ranges of 12 bytes or fewer into their views, as two integers: bytes 0-7, 8-11."""
    low = read_at(source, starts, "<u8", padded=True) & _KEEP8[np.minimum(lengths, 8)]
    high = read_at(source, starts + 8, "<u4", padded=True) & _KEEP4[np.clip(lengths - 8, 0, 4)]
    if not np.little_endian:
        low, high = low.byteswap(), high.byteswap()
    words = np.empty((len(starts), 3), dtype=np.uint32)
    words[:, :2] = low.view(np.uint32).reshape(-1, 2)
    words[:, 2] = high
    views[rows, 1:] = words.view(np.int32)


class RangeColumn:
    """One binary or string column under construction; rows never put are null.

    Rows are a slice or an array of row indices. Columns created with the same ``sources``
    may be given the same views.
    """

    def __init__(self, sources: Sources | None = None):
        self.sources = sources if sources is not None else Sources()
        self._parts: list[tuple] = []  # (rows, views (n, 4) int32 | pa.Array | bytes, valid or None)

    def put(self, rows, source, starts: np.ndarray, lengths: np.ndarray) -> None:
        """Set ``rows`` to ``source[starts[i]:starts[i] + lengths[i]]`` (``source`` is kept, not copied)."""
        if len(starts):
            self._parts.append((rows, self.sources.views(source, starts, lengths), None))

    def put_views(self, rows, views: np.ndarray) -> None:
        """Set ``rows`` to views made by this column's ``sources``."""
        if len(views):
            self._parts.append((rows, views, None))

    def put_constant(self, rows: slice, value: bytes) -> None:
        """Set the rows of ``rows`` to ``value``."""
        if rows.stop > rows.start:
            self._parts.append((rows, value, None))

    def put_array(self, rows, array: "pa.Array | pa.ChunkedArray") -> None:
        """Set ``rows`` to the values of a binary or string Arrow array (or chunked array),
        nulls included."""
        if len(array):
            self._parts.append((rows, array, None))

    @property
    def empty(self) -> bool:
        """Whether nothing was put yet."""
        return not self._parts

    def finish(self, nrows: int, type: pa.DataType) -> pa.Array:
        """The column of ``nrows`` rows as ``type`` (binary or string; strings are checked to be
        UTF-8)."""
        result = self._concatenated(nrows, type)
        return result if result is not None else self._gathered(nrows, type)

    def _concatenated(self, nrows: int, type: pa.DataType) -> pa.Array | None:
        """Whole arrays covering every row in order, concatenated; None for other columns."""
        at = 0
        for rows, part, _ in self._parts:
            if not isinstance(part, _ARRAYS) or not isinstance(rows, slice) or rows.start != at:
                return None
            at = rows.stop
        if at != nrows or not self._parts:
            return None
        # Concatenating copies even one array: the column never refers to the parts' buffers.
        return pa.concat_arrays([chunk for _, part, _ in self._parts
                                 for chunk in _chunks(part if part.type == type else part.cast(type))])

    def _gathered(self, nrows: int, type: pa.DataType) -> pa.Array:
        if nrows == 0:
            return pa.array([], type=type)
        views = np.zeros((nrows, _WORDS), dtype=np.int32)
        valid = np.zeros(nrows, dtype=bool)
        for rows, part, _ in self._parts:
            ok = None
            if isinstance(part, _ARRAYS):
                part, ok = self._array_views(_combined(part))
            elif isinstance(part, bytes):
                part = self.sources.constant_view(part)
            if ok is not None:
                rows = _row_index(rows, len(part))[ok]
                part = part[ok]
            views[rows] = part
            valid[rows] = True
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        buffers = [bitmap, pa.py_buffer(views)] + [pa.py_buffer(s) for s in self.sources.buffers]
        return pa.Array.from_buffers(pa.binary_view(), nrows, buffers).cast(type)

    def _array_views(self, array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
        if array.type not in _OFFSET_TYPES:
            array = array.cast(pa.binary())
        _, offsets_buf, data = array.buffers()[:3]
        offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(array) + 1, offset=4 * array.offset)
        valid = np.asarray(array.is_valid(), dtype=bool) if array.null_count else None
        source = data if data is not None else b""
        return self.sources.views(source, offsets[:-1].astype(np.int64), np.diff(offsets)), valid


def gather_ranges(source: np.ndarray, rows: np.ndarray, starts: np.ndarray, lengths: np.ndarray, nrows: int,
                  type: pa.DataType) -> pa.Array:
    """A column of ``nrows`` rows where ``rows`` hold ranges of ``source`` (a uint8 array),
    the others null: one numpy gather of the bytes, for short values (keys, tags).

    Strings are checked to be UTF-8.
    """
    sizes = np.zeros(nrows, dtype=np.int64)
    sizes[rows] = lengths
    offsets = np.zeros(nrows + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    begin = np.zeros(nrows, dtype=np.int64)
    begin[rows] = starts
    data = source[concat_ranges(begin, sizes)]
    bitmap = None
    if len(rows) < nrows:
        valid = np.zeros(nrows, dtype=bool)
        valid[rows] = True
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(type, nrows, [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
    if type == pa.string():
        try:
            array.validate(full=True)
        except pa.ArrowInvalid as err:
            raise CodecError(f"a property value is not UTF-8: {err}") from None
    return array


_ARRAYS = (pa.Array, pa.ChunkedArray)


def _chunks(array: "pa.Array | pa.ChunkedArray") -> list[pa.Array]:
    return array.chunks if isinstance(array, pa.ChunkedArray) else [array]


def _combined(array: "pa.Array | pa.ChunkedArray") -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _row_index(rows, count: int) -> np.ndarray:
    if isinstance(rows, slice):
        return np.arange(rows.start, rows.start + count, dtype=np.int64)
    return np.asarray(rows, dtype=np.int64)


class MapColumn:
    """A map<string, string> column under construction; rows never put are empty maps."""

    def __init__(self):
        # (rows, entries per row, fill(keys, values, entry indices), None) or (rows, None, None, array)
        self._parts: list[tuple] = []

    def put(self, rows, counts: np.ndarray, keys: pa.Array, values: pa.Array) -> None:
        """Set ``rows`` to maps of ``counts[i]`` entries each: ``keys`` and ``values`` (string
        arrays) hold every entry, in row order."""
        def fill(key_column: RangeColumn, value_column: RangeColumn, entries: np.ndarray) -> None:
            key_column.put_array(entries, keys)
            value_column.put_array(entries, values)
        self._parts.append((rows, np.asarray(counts, dtype=np.int64), fill, None))

    def put_array(self, rows, array: "pa.MapArray | pa.ChunkedArray") -> None:
        """Set ``rows`` to the maps of a map<string, string> array or chunked array (null: empty)."""
        if len(array):
            self._parts.append((rows, None, None, array))

    def finish(self, nrows: int) -> pa.MapArray:
        whole = self._concatenated(nrows)
        if whole is not None:
            return whole
        parts = [(rows, counts, fill) if array is None else (rows, *_map_entries(_combined(array)))
                 for rows, counts, fill, array in self._parts]
        counts = np.zeros(nrows, dtype=np.int64)
        for rows, part_counts, _ in parts:
            counts[rows] = part_counts
        offsets = np.zeros(nrows + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        if offsets[-1] == 0:  # no entries at all: no keys or values to gather
            empty = pa.array([], pa.string())
            return pa.MapArray.from_arrays(pa.array(offsets.astype(np.int32)), empty, empty)
        keys, values = RangeColumn(), RangeColumn()
        for rows, part_counts, fill in parts:
            fill(keys, values, _entries_of(offsets[:-1][rows], part_counts))
        total = int(offsets[-1])
        return pa.MapArray.from_arrays(pa.array(offsets.astype(np.int32)), keys.finish(total, pa.string()),
                                       values.finish(total, pa.string()))

    def _concatenated(self, nrows: int) -> pa.MapArray | None:
        at = 0
        for rows, _, _, array in self._parts:
            if array is None or array.null_count or not isinstance(rows, slice) or rows.start != at:
                return None
            at = rows.stop
        if at != nrows or not self._parts:
            return None
        return pa.concat_arrays([chunk for _, _, _, array in self._parts for chunk in _chunks(array)])  # a copy


def _map_entries(array: pa.MapArray):
    """Entries per row of a map array (a null map has none), and a fill putting its keys and
    values at given entry indices."""
    # A map array's offsets index its whole (unsliced) keys and items children.
    offsets = np.asarray(array.offsets, dtype=np.int64)
    counts = np.diff(offsets)
    if array.null_count:
        counts[~np.asarray(array.is_valid(), dtype=bool)] = 0
        taken = pa.array(_entries_of(offsets[:-1], counts))
        map_keys, map_items = array.keys.take(taken), array.items.take(taken)
    else:
        first, last = int(offsets[0]), int(offsets[-1])
        map_keys, map_items = array.keys.slice(first, last - first), array.items.slice(first, last - first)

    def fill(keys: RangeColumn, values: RangeColumn, entries: np.ndarray) -> None:
        keys.put_array(entries, map_keys)
        values.put_array(entries, map_items)
    return counts, fill


def _entries_of(first_entry: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The entry indices of rows whose entries start at ``first_entry`` and number ``counts``."""
    total = int(counts.sum())
    starts = np.repeat(first_entry - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return starts + np.arange(total, dtype=np.int64)
