"""Sending Arrow columns: rows are routed to queues and cut into batches by column operations,
and each batch is encoded once; no Python object is made per row.

The Spark sink's path: a task's rows arrive as Arrow record batches, and leave as inner
batches (BatchCQ) or early batches (SimpleCQ) of at most about ``batch_max_bytes`` of bodies,
grouped by (topic, queue, tag) as AutoBatch groups messages.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.errors import ConfigError, ResultTimeoutError
from rmq_spark.producer.batch import BatchForm, BatchKey, ProducerBatch
from rmq_spark.producer.routing import Route, Router
from rmq_wire.codec import encode_pieces
from rmq_wire.codec.columns import to_batch_columns

MAX_BATCH_MESSAGES = 32767  # BatchCQ's batchSize is a Java short


class ArrowSend:
    """The batches of one ``Producer.send_arrow`` call, answered as the broker answers them."""

    def __init__(self, batches: list[ProducerBatch], rows: int):
        self.batches = batches
        self.rows = rows

    def done(self) -> bool:
        """Every batch is answered (stored or failed)."""
        return all(batch.finished for batch in self.batches)

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for every batch's answer; returns the rows stored, or raises the first error
        (``ResultTimeoutError``, a ``TimeoutError``, when answers are missing after ``timeout_s``)."""
        for batch in self.batches:
            if not batch.wait(timeout_s):
                raise ResultTimeoutError(f"a batch of {batch.encoded[1]} rows was not answered within {timeout_s} s")
            if batch.error is not None:
                raise batch.error
        return self.rows

    @property
    def responses(self) -> list:
        """The broker's answers (queue id, base offset, count) of the batches answered so far."""
        return [batch.response for batch in self.batches if batch.response is not None]


def plan_batches(rows: pa.RecordBatch, route: Route, router: Router, *, form: BatchForm,
                 batch_max_bytes: int, unique_keys=None) -> list[ProducerBatch]:
    """The batches that carry ``rows`` (of one topic) to ``route``'s queues, in ``form``.

    The router chooses each row's queue (its ``queue_id`` column, its keys' hash, or the queues
    in turn, a run of about ``batch_max_bytes`` per turn); rows are grouped by queue, and by tag
    for inner batches (whose index unit carries one tag), and cut into batches of about
    ``batch_max_bytes``. With ``unique_keys`` (a ``UniqueKeys``: RocketMQ's own sends) each row
    carries a UNIQ_KEY: its ``message_id`` column's, or a new one.
    """
    columns = batch_columns(rows)
    count = columns.num_rows
    if count == 0:
        return []
    ids = _message_ids(rows, unique_keys) if unique_keys is not None else None
    lengths = np.asarray(pc.binary_length(columns.column("body")), dtype=np.int64)
    slots = router.row_queues(route, rows, columns.column("keys"), lengths, batch_max_bytes)
    tags = columns.column("tags").dictionary_encode() if form.inner else None
    tag_ids = np.zeros(count, dtype=np.int64) if tags is None else \
        np.asarray(tags.indices.fill_null(-1), dtype=np.int64) + 1
    group = slots * (1 + (0 if tags is None else len(tags.dictionary))) + tag_ids
    if _worth_collating(group, lengths, batch_max_bytes):
        order = np.argsort(group, kind="stable")
        columns, group, lengths, slots, tag_ids = (columns.take(pa.array(order)), group[order], lengths[order],
                                                   slots[order], tag_ids[order])
        ids = ids.take(pa.array(order)) if ids is not None else None
    bounds = _cut(group, lengths, batch_max_bytes)
    payloads = encode_pieces(columns, bounds, form.codec, form.compression, ids)
    batches = []
    for (start, stop), payload in zip(bounds, payloads):
        tag = None if tags is None or tag_ids[start] == 0 else tags.dictionary[tag_ids[start] - 1].as_py()
        broker, queue_id = route.queues[slots[start]]
        batch = ProducerBatch(BatchKey(route.name, queue_id, tag, broker))
        message_ids = ids.slice(start, stop - start) if ids is not None else ()  # no Python string per row
        batch.encoded = (payload, stop - start, form.codec, form.compression, message_ids)
        batch.body_bytes = len(payload)
        batches.append(batch)
    return batches


def _message_ids(rows: pa.RecordBatch, unique_keys) -> pa.Array:
    """Each row's UNIQ_KEY: the ``message_id`` column's (strings, none null), or new ones."""
    if "message_id" not in rows.schema.names:
        return unique_keys.arrow(rows.num_rows)
    column = rows.column("message_id")
    if not pa.types.is_string(column.type) or column.null_count:
        raise ConfigError(f"column 'message_id' is {column.type} with {column.null_count} nulls; give every row "
                          "a string id (RocketMQ's UNIQ_KEY), or drop the column")
    return column


def _worth_collating(group: np.ndarray, lengths: np.ndarray, batch_max_bytes: int) -> bool:
    """Whether to gather each group's rows together (a copy of the rows) before cutting: yes
    when its rows are scattered in short runs (keys hashed, tags mixed); no when the runs are
    already about a batch long (the queues in turn), which cut alone into the same batches."""
    runs = 1 + np.count_nonzero(group[1:] != group[:-1])
    return runs > 1 and int(lengths.sum()) < runs * (batch_max_bytes // 2)


def as_record_batch(columns) -> pa.RecordBatch:
    if isinstance(columns, pa.Table):
        return columns.combine_chunks().to_batches()[0] if columns.num_rows else \
            pa.RecordBatch.from_pylist([], schema=columns.schema)
    if isinstance(columns, pa.RecordBatch):
        return columns
    raise ConfigError(f"send_arrow takes a pyarrow RecordBatch or Table, not {type(columns).__name__}")


def split_by_topic(columns: pa.RecordBatch, topic: str | None) -> list[tuple[str, pa.RecordBatch]]:
    """The rows of each topic: the ``topic`` column's, or all rows to ``topic``."""
    names = columns.schema.names
    if "topic" not in names:
        if not topic:
            raise ConfigError("name the topic: pass topic=..., or give the rows a 'topic' column")
        return [(topic, columns)]
    column = columns.column("topic")
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise ConfigError(f"column 'topic' is {column.type}; use string")
    if column.null_count:
        if not topic:
            row = pc.index(pc.is_null(column), True).as_py()
            raise ConfigError(f"column 'topic' is null at row {row} and no default topic was given")
        column = column.fill_null(topic)
    values = pc.unique(column).to_pylist()
    if len(values) == 1:
        return [(values[0], columns)]
    return [(value, columns.filter(pc.equal(column, value))) for value in values]


def batch_columns(columns: pa.RecordBatch) -> pa.RecordBatch:
    try:
        return to_batch_columns(columns)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _cut(group: np.ndarray, lengths: np.ndarray, batch_max_bytes: int) -> list[tuple[int, int]]:
    """Runs of rows of one group each, cut where the bodies before a row (in its group) pass
    a multiple of ``batch_max_bytes``, and at most MAX_BATCH_MESSAGES rows long."""
    rows = len(group)
    starts = np.flatnonzero(np.diff(group)) + 1
    group_start = np.zeros(rows, dtype=np.int64)
    group_start[starts] = starts
    group_start = np.maximum.accumulate(group_start)
    cumulative = np.cumsum(lengths)
    before_in_group = cumulative - lengths - (cumulative - lengths)[group_start]
    piece = before_in_group // batch_max_bytes
    run = (np.arange(rows) - group_start) // MAX_BATCH_MESSAGES
    cuts = np.flatnonzero((group[1:] != group[:-1]) | (piece[1:] != piece[:-1]) | (run[1:] != run[:-1])) + 1
    edges = [0, *cuts.tolist(), rows]
    return list(zip(edges[:-1], edges[1:]))
