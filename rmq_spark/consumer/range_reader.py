"""RangeReader: reads offset ranges of many queues with batched ReadRanges calls, into Arrow."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.client.connect import connect
from rmq_spark.client.transport import RangeChunk, ReadStatus, TransportConfig
from rmq_spark.consumer.tag_filter import normalize_tag_filter
from rmq_spark.errors import (
    ConfigError,
    CorruptedRecordError,
    DataLossError,
    OffsetOutOfRangeError,
    UndecodableBatchError,
)
from rmq_spark.structs import OffsetRange
from rmq_wire.codec import records as stored_records
from rmq_wire.codec.columns import string_array
from rmq_wire.codec.records import RecordFormatError, decode_records, iter_record_headers

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_PER_FETCH = 64 << 20
DECODE_BYTES = 4 << 20  # small chunks of many ranges are decoded together, up to this many stored bytes
# Ranges per ReadRanges call: the broker answers every range of a call, those its byte budget did
# not reach too, so a call names about as many as the last one finished (twice as many, to grow).
_FIRST_WINDOW, _MIN_WINDOW, _MAX_WINDOW = 1024, 16, 16384
_OPEN_END = np.iinfo(np.int64).max
ON_DATA_LOSS = ("fail", "skip")


def read_schema(include_properties: bool = False) -> pa.Schema:
    """What readers yield: the stored records' columns (``codec.records``), with ``broker``
    after ``topic``: the broker a row came from (through name servers), null through our door."""
    records = stored_records.read_schema(include_properties)
    return records.insert(1, pa.field("broker", pa.string()))


@dataclass
class _Pending:
    """A range being read: an OffsetRange to the transport, moving as it is read."""

    topic: str
    queue_id: int
    start: int | None  # None once the range is read (or failed)
    end: int | None
    broker: str = ""
    failed: DataLossError | None = None  # CorruptedRecordError or UndecodableBatchError

    def where(self) -> str:
        return f"{self.topic} queue {self.queue_id}" + (f" of broker {self.broker}" if self.broker else "")


class RangeReader:
    """Reads exactly the offsets of the ranges asked for, as ``pyarrow.RecordBatch`` in the
    read schema (``codec.records.READ_SCHEMA``).

    All ranges go to the broker in one ReadRanges call (one batched index lookup), which
    streams the stored records; a range may start or end inside a stored batch, and the
    reader cuts it. A call reads at most ``max_bytes_per_fetch`` stored bytes; what is left
    is read by the next call, so the reader holds about one response's worth of batches.
    The chunks of small ranges (many queues with a few batches each) are decoded together,
    up to 4 MiB at a time, so that the cost of a decode is not paid per range.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of broker_sim's own door.
    name_server : str
        Or RocketMQ's name servers, ``HOST:PORT;HOST:PORT``: the ranges are read by pulls
        (many in flight) from any RocketMQ cluster. A range names its queue's broker
        (``OffsetRange.broker``) where the topic is served by several.
    max_bytes_per_fetch : int
        Stored bytes one ReadRanges call may return (default 64 MiB).
    tag_filter : str, optional
        ``"TagA || TagB"``: only messages with one of these tags; read as RocketMQ reads it
        (``normalize_tag_filter``). Filtered by the broker, and through name servers checked
        again here, as RocketMQ's clients do (a broker filters by the tags' hash codes).
    include_properties : bool
        Add the ``properties`` map column.
    on_data_loss : {"fail", "skip"}
        When a range starts below the queue's first stored offset (its data was deleted):
        raise ``DataLossError`` (an ``OffsetOutOfRangeError``), or log a warning and read from the first stored one.
        When the broker refuses a damaged record of a range: raise ``CorruptedRecordError`` (a
        ``DataLossError``) naming its offsets, or log a warning and read on after exactly those.
        When a stored batch does not decode: end its range there and, once the other ranges are
        read, raise ``UndecodableBatchError`` (a ``DataLossError``) naming its topic, queue and
        offsets; or log a warning and skip the batch's offsets.
    """

    def __init__(self, endpoint: str | None = None, *, name_server: str | None = None,
                 max_bytes_per_fetch: int = DEFAULT_MAX_BYTES_PER_FETCH, tag_filter: str | None = None,
                 include_properties: bool = False, on_data_loss: str = "fail", transport: TransportConfig | None = None,
                 pull_group: str | None = None):
        if not isinstance(max_bytes_per_fetch, int) or max_bytes_per_fetch <= 0:
            raise ConfigError(f"max_bytes_per_fetch={max_bytes_per_fetch!r}: must be a positive number of bytes")
        if on_data_loss not in ON_DATA_LOSS:
            raise ConfigError(f"on_data_loss={on_data_loss!r}: use one of {', '.join(ON_DATA_LOSS)}")
        self.max_bytes_per_fetch = max_bytes_per_fetch
        self.tag_filter = normalize_tag_filter(tag_filter)
        self.include_properties = include_properties
        self.on_data_loss = on_data_loss
        self.schema = read_schema(include_properties)
        self._transport = connect(endpoint, transport, name_server=name_server)
        if pull_group is not None:
            self._transport.pull_group = pull_group  # the consumer group RocketMQ's pulls name
        tags = [t.strip() for t in self.tag_filter.split("||")] if self.tag_filter else []
        self._recheck_tags = string_array(tags) if self._transport.native_rocketmq and tags else None

    def read(self, ranges: list[OffsetRange]) -> Iterator[pa.RecordBatch]:
        """Yield the messages of ``ranges`` as record batches (no empty ones)."""
        pending = [_Pending(r.topic, r.queue_id, r.start, r.end, getattr(r, "broker", "") or "")
                   for r in ranges if _check_range(r)]
        ranges_read = list(pending)
        decode_bytes = min(DECODE_BYTES, self.max_bytes_per_fetch)
        window = _FIRST_WINDOW
        while pending:
            call = pending[:window]
            progressed = False
            by_broker: dict[str, _Chunks] = {}  # rows are decoded a broker at a time: its name is a column
            for chunk in self._transport.read_ranges(call, self.max_bytes_per_fetch, self.tag_filter):
                item = call[chunk.range_index]
                if chunk.records and item.failed is None:
                    chunks = by_broker.get(item.broker)
                    if chunks is None:
                        chunks = by_broker[item.broker] = _Chunks(decode_bytes, self.include_properties,
                                                                  self._bad_batch)
                    if chunks.add(chunk, item):
                        yield from self._rows(chunks, item.broker)
                if chunk.done:
                    progressed |= self._finish(item, chunk)
            for broker, chunks in by_broker.items():
                yield from self._rows(chunks, broker)
            pending = [p for p in pending if p.start is not None]
            window = _next_window(window, call)
            if pending and not progressed:
                raise OffsetOutOfRangeError(f"no progress reading {pending[0]}: the broker returned nothing")
        failed = [r.failed for r in ranges_read if r.failed is not None]
        if failed:
            first = failed[0]
            if len(failed) > 1:
                first.args = (f"{first} ({len(failed) - 1} more ranges failed so)",)
            raise first

    def read_table(self, ranges: list[OffsetRange]) -> pa.Table:
        return pa.Table.from_batches(list(self.read(ranges)), schema=self.schema)

    def _rows(self, chunks: "_Chunks", broker: str) -> Iterator[pa.RecordBatch]:
        """The decoded rows of ``chunks`` in the read schema: the broker column added, and
        through name servers the tag filter checked again."""
        name = (string_array([broker]) if broker else pa.nulls(1, pa.string()))[0]
        for batch in chunks.decode():
            if self._recheck_tags is not None:
                batch = batch.filter(pc.is_in(batch.column("tags"), value_set=self._recheck_tags))
                if not batch.num_rows:
                    continue
            yield batch.add_column(1, self.schema.field(1), pa.repeat(name, batch.num_rows))

    def _finish(self, item: _Pending, response: RangeChunk) -> bool:
        """Apply a range's end of call; returns whether the range moved. A finished range gets
        ``start = None``."""
        if item.failed is not None:
            item.start = None
            return True
        status = response.status
        if status is ReadStatus.FOUND:
            moved = response.next_offset > item.start
            if item.end is None:  # "up to what is stored": pinned at the first answer
                item.end = response.max_offset
            item.start = response.next_offset
            if item.start >= item.end:
                item.start = None
            return moved
        if status is ReadStatus.NO_MESSAGE:
            item.start = None  # nothing stored from there on
            return True
        if status is ReadStatus.OFFSET_TOO_SMALL:
            where = item.where()
            if self.on_data_loss == "fail":
                raise DataLossError(
                    f"{where}: offset {item.start} is no longer stored (the first stored is {response.min_offset}); "
                    "messages were lost. Read from the first stored offset, or pass on_data_loss='skip'")
            log.warning("%s: offsets %d to %d are no longer stored; skipped", where, item.start,
                        response.min_offset - 1)
            item.start = response.min_offset
            return True
        if status is ReadStatus.RECORD_CORRUPTED:
            return self._skip_corrupted(item, response)
        if status is ReadStatus.OFFSET_OVERFLOW:
            raise OffsetOutOfRangeError(f"{item.where()}: offset {item.start} is past the queue's end "
                                        f"({response.max_offset})")
        return False  # BUDGET_EXHAUSTED: read on in the next call

    def _skip_corrupted(self, item: _Pending, response: RangeChunk) -> bool:
        first, end = response.corrupted_from, response.next_offset
        if self.on_data_loss == "fail":  # as an undecodable batch: the other ranges are read first
            item.failed = CorruptedRecordError(
                f"{response.detail}. Pass on_data_loss='skip' to skip offsets {first} to {end - 1} and read on",
                topic=item.topic, queue_id=item.queue_id, first_offset=first, end_offset=end)
            item.start = None
            return True
        log.warning("%s: offsets %d to %d skipped: %s", item.where(), first, end - 1, response.detail)
        item.start = end
        if item.end is not None and item.start >= item.end:
            item.start = None
        return True

    def _bad_batch(self, item: _Pending, first: int, last: int | None, err: RecordFormatError) -> None:
        """A stored batch of ``item`` (offsets ``first`` to ``last``; None: not known) does not decode."""
        offsets = f"offsets {first} to {last}" if last is not None else f"offsets from {first} on"
        where = f"{item.where()}: the stored batch at {offsets} does not decode ({err})"
        if self.on_data_loss == "skip":
            log.warning("%s; its messages are skipped", where)
            return
        item.failed = UndecodableBatchError(f"{where}; the range was read up to it, the other ranges in full. Skip "
                                            "the batch with on_data_loss='skip', or read from after it")

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _next_window(window: int, call: list) -> int:
    """The ranges to name in the next call: twice what this one finished (all of them: grow)."""
    finished = sum(1 for item in call if item.start is None)
    if finished == len(call):
        return min(window * 2, _MAX_WINDOW)
    return min(max(2 * finished, _MIN_WINDOW), _MAX_WINDOW)


class _Chunks:
    """Responses' records waiting to be decoded together, with each record's bounds."""

    def __init__(self, decode_bytes: int, include_properties: bool, bad_batch):
        self.decode_bytes = decode_bytes
        self.include_properties = include_properties
        self.bad_batch = bad_batch  # RangeReader._bad_batch
        self.parts: list = []
        self.bounds: list = []  # (start, end, records) of each part
        self.items: list = []  # the _Pending range of each part
        self.size = 0

    def add(self, response: RangeChunk, item: _Pending) -> bool:
        """Keep a response's records; True when it is time to decode: enough is kept, or the
        response is large on its own (decoded alone, it is not copied into a joined buffer)."""
        self.parts.append(response.records)
        start = item.start if response.cut_start is None else response.cut_start
        end = item.end if response.cut_end is None else response.cut_end
        self.bounds.append((start, _OPEN_END if end is None else end, response.record_count))
        self.items.append(item)
        self.size += len(response.records)
        return self.size >= self.decode_bytes or len(response.records) >= self.decode_bytes // 2

    def decode(self) -> Iterator[pa.RecordBatch]:
        if not self.parts:
            return
        try:
            if len(self.parts) == 1:
                start, end, _ = self.bounds[0]
                batch = decode_records(self.parts[0], start, None if end == _OPEN_END else end,
                                       self.include_properties)
            else:
                starts, ends, counts = (np.array(column, dtype=np.int64) for column in zip(*self.bounds))
                batch = decode_records(b"".join(self.parts), np.repeat(starts, counts), np.repeat(ends, counts),
                                       self.include_properties)
        except RecordFormatError:
            batches = list(self._decode_apart())
        else:
            batches = [batch] if batch.num_rows else []
        self.parts, self.bounds, self.items, self.size = [], [], [], 0
        yield from batches

    def _decode_apart(self) -> Iterator[pa.RecordBatch]:
        """After the parts failed to decode together: each part alone, and the records of a
        part that fails one by one, so that a batch that does not decode costs only itself
        (reported by ``bad_batch``) and, when its range fails, what follows it in its range."""
        for part, (start, end, _), item in zip(self.parts, self.bounds, self.items):
            end = None if end == _OPEN_END else end
            try:
                batch = decode_records(part, start, end, self.include_properties)
            except RecordFormatError:
                yield from self._decode_records_apart(part, start, end, item)
                continue
            if item.failed is None and batch.num_rows:
                yield batch

    def _decode_records_apart(self, part, start: int, end: int | None, item: _Pending) -> Iterator[pa.RecordBatch]:
        try:
            records = list(iter_record_headers(part))
        except RecordFormatError as err:  # the records themselves do not parse: the part goes whole
            self.bad_batch(item, start, None, err)
            return
        view = memoryview(part)
        for record in records:
            if item.failed is not None:
                return
            try:
                batch = decode_records(view[record.position:record.position + record.total_size], start, end,
                                       self.include_properties)
            except RecordFormatError as err:
                self.bad_batch(item, record.queue_offset, _last_offset(record), err)
                continue
            if batch.num_rows:
                yield batch


def _last_offset(record) -> int | None:
    """The last offset a stored record holds; None when its INNER_NUM does not say."""
    try:
        return record.queue_offset + record.count - 1
    except RecordFormatError:
        return None


def _check_range(r: OffsetRange) -> bool:
    """Validate a range; False for an empty one (nothing to read)."""
    if r.start < 0 or (r.end is not None and r.end < r.start):
        raise ConfigError(f"bad range {r}: need 0 <= start <= end")
    return r.end is None or r.end > r.start
