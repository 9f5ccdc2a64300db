"""Columns of decoded messages, filled batch by batch and built once at the end.

Each inner batch (or run of single records) puts its rows' byte ranges and values at their
row positions; ``finish`` then gathers every string column with one copy and cuts all
encoded properties (RocketMQ's TAGS / KEYS / user properties) with one vectorized pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._gather import MapColumn, RangeColumn, Sources, gather_ranges
from .properties import PROPERTY_KEYS, PROPERTY_TAGS, PropertyEntries


@dataclass
class Finished:
    """Built columns: Arrow arrays, and born timestamps as numpy ms with a validity mask."""

    body: pa.Array
    keys: pa.Array
    tags: pa.Array
    properties: pa.Array | None
    born_ms: np.ndarray
    born_valid: np.ndarray


class MessageColumns:
    """The columns of ``nrows`` messages under construction.

    Parameters
    ----------
    nrows : int
        Rows of the result; every row gets a body.
    include_properties : bool
        Build the properties map (it costs a pass over every property entry).
    """

    def __init__(self, nrows: int, include_properties: bool = True):
        self.nrows = nrows
        self.include_properties = include_properties
        self._sources = Sources()  # shared, so that one views array serves two columns
        self.body = RangeColumn(self._sources)
        self.encoded_properties = RangeColumn(self._sources)  # rows whose properties are RocketMQ-encoded
        self.keys = RangeColumn()
        self.tags = RangeColumn()
        self.fallback_tags = RangeColumn()  # a stored record's TAGS, for inner messages without own tags
        self.properties = MapColumn()
        self.born_ms = np.zeros(nrows, dtype=np.int64)
        self.born_valid = np.zeros(nrows, dtype=bool)
        self._encoded_rows = np.zeros(nrows, dtype=bool)

    def put_encoded(self, rows: slice, source, body_starts, body_lengths, props_starts, props_lengths) -> None:
        """Rows whose body and encoded properties are byte ranges of ``source``."""
        count = len(body_starts)
        views = self._sources.views(source, np.concatenate((body_starts, props_starts)),
                                    np.concatenate((body_lengths, props_lengths)))
        self.body.put_views(rows, views[:count])
        self.encoded_properties.put_views(rows, views[count:])
        self._encoded_rows[rows] = True

    def put_columns(self, rows: slice, batch: pa.RecordBatch) -> None:
        """Rows given as a record batch in ``BATCH_SCHEMA`` (an arrow-encoded batch)."""
        for column, index in ((self.body, 0), (self.keys, 1), (self.tags, 2)):
            column.put_array(rows, batch.column(index))
        if self.include_properties:
            self.properties.put_array(rows, batch.column(3))
        born = batch.column(4)
        if born.null_count != len(born):
            values = np.frombuffer(born.buffers()[1], dtype=np.int64, count=len(born), offset=8 * born.offset)
            valid = np.asarray(born.is_valid(), dtype=bool) if born.null_count else True
            self.born_ms[rows] = values
            self.born_valid[rows] = valid

    def finish(self) -> Finished:
        nrows = self.nrows
        keys = tags = None
        if not self.encoded_properties.empty:
            entries = PropertyEntries(self.encoded_properties.finish(nrows, pa.binary()))
            keys = self._property_column(entries, PROPERTY_KEYS, self.keys)
            tags = self._property_column(entries, PROPERTY_TAGS, self.tags)
            if self.include_properties:
                entries.put_user_map(self.properties, np.flatnonzero(self._encoded_rows), nrows)
        if keys is None:
            keys = self.keys.finish(nrows, pa.string())
        if tags is None:
            tags = self.tags.finish(nrows, pa.string())
        if tags.null_count and not self.fallback_tags.empty:
            tags = pc.coalesce(tags, self.fallback_tags.finish(nrows, pa.string()))
        return Finished(
            body=self.body.finish(nrows, pa.binary()),
            keys=keys,
            tags=tags,
            properties=self.properties.finish(nrows) if self.include_properties else None,
            born_ms=self.born_ms,
            born_valid=self.born_valid,
        )

    def _property_column(self, entries: PropertyEntries, name: str, column: RangeColumn) -> pa.Array | None:
        """The column of property ``name``; None when ``column`` also holds other rows' values
        (then they are put into it, to be finished with them)."""
        rows, starts, lengths = entries.values(name)
        if column.empty:
            return gather_ranges(entries.data, rows, starts, lengths, self.nrows, pa.string())
        column.put(rows, entries.data, starts, lengths)
        return None

