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

from rmq_wire.codec._gather import MapColumn, RangeColumn, Sources, gather_ranges
from rmq_wire.codec.properties import PropertyEntries
from rmq_wire.record import PROPERTY_KEYS, PROPERTY_TAGS


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
        self._fallback_tags: list = []  # fills of a RangeColumn with records' TAGS (see put_fallback_tags)
        self.properties = MapColumn()
        self.born_ms = np.zeros(nrows, dtype=np.int64)
        self.born_valid = np.zeros(nrows, dtype=bool)
        self._encoded_rows = np.zeros(nrows, dtype=bool)

    def put_encoded(self, rows: slice, source, body_starts, body_lengths, props_starts, props_lengths,
                    body_source=None) -> None:
        """Rows whose body and encoded properties are byte ranges of ``source`` (the bodies of
        ``body_source`` when given: bodies decompressed apart)."""
        if body_source is not None:
            self.body.put_views(rows, self._sources.views(body_source, body_starts, body_lengths))
            self.encoded_properties.put_views(rows, self._sources.views(source, props_starts, props_lengths))
            self._encoded_rows[rows] = True
            return
        count = len(body_starts)
        views = self._sources.views(source, np.concatenate((body_starts, props_starts)),
                                    np.concatenate((body_lengths, props_lengths)))
        self.body.put_views(rows, views[:count])
        self.encoded_properties.put_views(rows, views[count:])
        self._encoded_rows[rows] = True

    def put_columns(self, rows, batch: "pa.Table | pa.RecordBatch") -> None:
        """Rows given as a table or record batch in ``BATCH_SCHEMA`` (arrow-encoded batches);
        ``rows`` a slice or row indices."""
        for column, index in ((self.body, 0), (self.keys, 1), (self.tags, 2)):
            column.put_array(rows, batch.column(index))
        if self.include_properties:
            self.properties.put_array(rows, batch.column(3))
        born = batch.column(4)
        if born.null_count != len(born):
            self.born_ms[rows] = pc.fill_null(born, 0).to_numpy()
            self.born_valid[rows] = born.is_valid().to_numpy()

    def put_fallback_tags(self, fill) -> None:
        """``fill(column)`` puts a stored record's TAGS at the rows of its inner messages, for
        those without tags of their own; it runs only if some message has none (it costs a view
        per row)."""
        self._fallback_tags.append(fill)

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
        if tags.null_count and self._fallback_tags:
            fallback = RangeColumn()
            for fill in self._fallback_tags:
                fill(fallback)
            tags = pc.coalesce(tags, fallback.finish(nrows, pa.string()))
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

