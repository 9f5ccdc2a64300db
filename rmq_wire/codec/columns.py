"""The columns of a batch of messages, as the codecs encode and decode them.

``BATCH_SCHEMA``: body binary (not null), keys string, tags string, properties
map<string, string> (user properties only), born_timestamp int64 (milliseconds since the
Unix epoch, UTC; null when unknown).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_wire.errors import CodecError

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
BATCH_SCHEMA = pa.schema([
    pa.field("body", pa.binary(), nullable=False),
    pa.field("keys", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("properties", PROPERTIES_TYPE),
    pa.field("born_timestamp", pa.int64()),
])


def string_array(values: list[str]) -> pa.Array:
    """A string array made from its buffers. ``pa.array`` (and ``pa.scalar``) of Python values
    imports pandas to look at them, a quarter of a second of a process's start (a Spark
    worker's too): what runs in every process makes its constant strings here."""
    data = [value.encode() for value in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def to_batch_columns(columns: "pa.Table | pa.RecordBatch") -> pa.RecordBatch:
    """``columns`` as one record batch in ``BATCH_SCHEMA``; other columns are ignored.

    ``body`` (binary or string) is required and may not hold nulls; ``keys``, ``tags``
    (strings), ``properties`` (a map of strings; a null map means none) and ``born_timestamp``
    (int64 milliseconds, or a timestamp) are optional. Raises CodecError on anything else.
    """
    if isinstance(columns, pa.Table):
        columns = columns.combine_chunks()
    elif not isinstance(columns, pa.RecordBatch):
        raise CodecError(f"columns must be a pyarrow Table or RecordBatch, not {type(columns).__name__}")
    names = columns.schema.names
    if "body" not in names:
        raise CodecError(f"columns need a 'body' column (binary or string); found: {', '.join(names) or 'none'}")
    rows = columns.num_rows
    arrays = [
        _body(_column(columns, "body")),
        _strings(columns, "keys", rows),
        _strings(columns, "tags", rows),
        _properties(columns, rows),
        _born(columns, rows),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=BATCH_SCHEMA)


def _column(columns, name: str) -> pa.Array:
    column = columns.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _body(body: pa.Array) -> pa.Array:
    if not (pa.types.is_binary(body.type) or pa.types.is_string(body.type) or pa.types.is_large_binary(body.type)
            or pa.types.is_large_string(body.type) or pa.types.is_binary_view(body.type)
            or pa.types.is_string_view(body.type)):
        raise CodecError(f"column 'body' is {body.type}; use binary or string")
    if body.null_count:
        row = pc.index(pc.is_null(body), True).as_py()
        raise CodecError(f"column 'body' is null at row {row}; every message needs a body (b'' for an empty one)")
    return body.cast(pa.binary())


def _strings(columns, name: str, rows: int) -> pa.Array:
    if name not in columns.schema.names:
        return pa.nulls(rows, pa.string())
    column = _column(columns, name)
    if pa.types.is_null(column.type):
        return pa.nulls(rows, pa.string())
    try:
        return column.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise CodecError(f"column {name!r} is {column.type}; use string: {err}") from None


def _properties(columns, rows: int) -> pa.Array:
    if "properties" not in columns.schema.names:
        return _empty_maps(rows)
    column = _column(columns, "properties")
    if pa.types.is_null(column.type):
        return _empty_maps(rows)
    try:
        column = column.cast(PROPERTIES_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise CodecError(f"column 'properties' is {column.type}; use map<string, string>: {err}") from None
    if column.null_count:
        column = _nulls_as_empty(column)
    return column


def _empty_maps(rows: int) -> pa.Array:
    return pa.MapArray.from_arrays(pa.array(np.zeros(rows + 1, dtype=np.int32)), pa.array([], pa.string()),
                                   pa.array([], pa.string()))


def _nulls_as_empty(maps: pa.MapArray) -> pa.MapArray:
    offsets = np.asarray(maps.offsets, dtype=np.int64)
    counts = np.diff(offsets)
    counts[~np.asarray(maps.is_valid(), dtype=bool)] = 0
    kept = np.repeat(offsets[:-1] - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    kept = pa.array(kept + np.arange(int(counts.sum())))
    new_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    return pa.MapArray.from_arrays(pa.array(new_offsets), maps.keys.take(kept), maps.items.take(kept))


def _born(columns, rows: int) -> pa.Array:
    if "born_timestamp" not in columns.schema.names:
        return pa.nulls(rows, pa.int64())
    column = _column(columns, "born_timestamp")
    if pa.types.is_timestamp(column.type):
        # Whole milliseconds: a finer timestamp is truncated, as RocketMQ keeps ms.
        return pc.cast(column, pa.timestamp("ms", tz=column.type.tz), safe=False).cast(pa.int64())
    if pa.types.is_integer(column.type) or pa.types.is_null(column.type):
        return column.cast(pa.int64())
    raise CodecError(f"column 'born_timestamp' is {column.type}; use int64 milliseconds or a timestamp")
