"""RangeReader: reads offset ranges of many queues with batched ReadRanges calls, into Arrow."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from ..client.transport import Transport, TransportConfig
from ..codec.records import decode_records, read_schema
from ..errors import ConfigError, CorruptedRecordError, DataLossError, OffsetOutOfRangeError
from ..protocol.v1 import broker_pb2 as pb
from ..structs import OffsetRange

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_PER_FETCH = 64 << 20
DECODE_BYTES = 4 << 20  # small chunks of many ranges are decoded together, up to this many stored bytes
_OPEN_END = np.iinfo(np.int64).max
ON_DATA_LOSS = ("fail", "skip")


@dataclass
class _Pending:
    topic: str
    queue_id: int
    start: int
    end: int | None


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
        ``HOST:PORT`` of the broker.
    max_bytes_per_fetch : int
        Stored bytes one ReadRanges call may return (default 64 MiB).
    tag_filter : str, optional
        ``"TagA || TagB"``: only messages with one of these tags.
    include_properties : bool
        Add the ``properties`` map column.
    on_data_loss : {"fail", "skip"}
        When a range starts below the queue's first stored offset (its data was deleted):
        raise ``DataLossError`` (an ``OffsetOutOfRangeError``), or log a warning and read from the first stored one.
        When the broker refuses a damaged record of a range: raise ``CorruptedRecordError`` (a
        ``DataLossError``) naming its offsets, or log a warning and read on after exactly those.
    """

    def __init__(self, endpoint: str, *, max_bytes_per_fetch: int = DEFAULT_MAX_BYTES_PER_FETCH,
                 tag_filter: str | None = None, include_properties: bool = False, on_data_loss: str = "fail",
                 transport: TransportConfig | None = None):
        if not isinstance(max_bytes_per_fetch, int) or max_bytes_per_fetch <= 0:
            raise ConfigError(f"max_bytes_per_fetch={max_bytes_per_fetch!r}: must be a positive number of bytes")
        if on_data_loss not in ON_DATA_LOSS:
            raise ConfigError(f"on_data_loss={on_data_loss!r}: use one of {', '.join(ON_DATA_LOSS)}")
        self.max_bytes_per_fetch = max_bytes_per_fetch
        self.tag_filter = (tag_filter or "").strip()
        self.include_properties = include_properties
        self.on_data_loss = on_data_loss
        self.schema = read_schema(include_properties)
        self._transport = Transport(endpoint, transport)

    def read(self, ranges: list[OffsetRange]) -> Iterator[pa.RecordBatch]:
        """Yield the messages of ``ranges`` as record batches (no empty ones)."""
        pending = [_Pending(r.topic, r.queue_id, r.start, r.end) for r in ranges if _check_range(r)]
        while pending:
            call = [p for p in pending]
            request = pb.ReadRangesRequest(
                ranges=[pb.ReadRange(topic=p.topic, queue_id=p.queue_id, start_offset=p.start,
                                     end_offset=p.end or 0) for p in call],
                max_bytes=self.max_bytes_per_fetch, tag_filter=self.tag_filter)
            progressed = False
            chunks = _Chunks(min(DECODE_BYTES, self.max_bytes_per_fetch), self.include_properties)
            for response in self._transport.stream(self._transport.messaging.ReadRanges, request):
                item = call[response.range_index]
                if response.records and chunks.add(response, item.start, item.end):
                    yield from chunks.decode()
                if response.done:
                    progressed |= self._finish(item, response)
            yield from chunks.decode()
            pending = [p for p in pending if p.start is not None]
            if pending and not progressed:
                raise OffsetOutOfRangeError(f"no progress reading {pending[0]}: the broker returned nothing")

    def read_table(self, ranges: list[OffsetRange]) -> pa.Table:
        return pa.Table.from_batches(list(self.read(ranges)), schema=self.schema)

    def _finish(self, item: _Pending, response: pb.ReadRangesResponse) -> bool:
        """Apply a range's end of call; returns whether the range moved. A finished range gets
        ``start = None``."""
        status = response.status
        if status == pb.FOUND:
            moved = response.next_offset > item.start
            if item.end is None:  # "up to what is stored": pinned at the first answer
                item.end = response.max_offset
            item.start = response.next_offset
            if item.start >= item.end:
                item.start = None
            return moved
        if status == pb.NO_MESSAGE:
            item.start = None  # nothing stored from there on
            return True
        if status == pb.OFFSET_TOO_SMALL:
            where = f"{item.topic} queue {item.queue_id}"
            if self.on_data_loss == "fail":
                raise DataLossError(
                    f"{where}: offset {item.start} is no longer stored (the first stored is {response.min_offset}); "
                    "messages were lost. Read from the first stored offset, or pass on_data_loss='skip'")
            log.warning("%s: offsets %d to %d are no longer stored; skipped", where, item.start,
                        response.min_offset - 1)
            item.start = response.min_offset
            return True
        if status == pb.RECORD_CORRUPTED:
            return self._skip_corrupted(item, response)
        if status == pb.OFFSET_OVERFLOW:
            raise OffsetOutOfRangeError(f"{item.topic} queue {item.queue_id}: offset {item.start} is past the "
                                        f"queue's end ({response.max_offset})")
        return False  # BUDGET_EXHAUSTED: read on in the next call

    def _skip_corrupted(self, item: _Pending, response: pb.ReadRangesResponse) -> bool:
        first, end = response.corrupted_from, response.next_offset
        if self.on_data_loss == "fail":
            raise CorruptedRecordError(f"{response.detail}. Pass on_data_loss='skip' to skip offsets {first} to "
                                       f"{end - 1} and read on", topic=item.topic, queue_id=item.queue_id,
                                       first_offset=first, end_offset=end)
        log.warning("%s queue %d: offsets %d to %d skipped: %s", item.topic, item.queue_id, first, end - 1,
                    response.detail)
        item.start = end
        if item.end is not None and item.start >= item.end:
            item.start = None
        return True

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Chunks:
    """Responses' records waiting to be decoded together, with each record's bounds."""

    def __init__(self, decode_bytes: int, include_properties: bool):
        self.decode_bytes = decode_bytes
        self.include_properties = include_properties
        self.parts: list = []
        self.bounds: list = []  # (start, end, records) of each part
        self.size = 0

    def add(self, response: pb.ReadRangesResponse, start: int, end: int | None) -> bool:
        """Keep a response's records; True when it is time to decode."""
        self.parts.append(response.records)
        self.bounds.append((start, _OPEN_END if end is None else end, response.record_count))
        self.size += len(response.records)
        return self.size >= self.decode_bytes

    def decode(self) -> Iterator[pa.RecordBatch]:
        if not self.parts:
            return
        if len(self.parts) == 1:
            start, end, _ = self.bounds[0]
            batch = decode_records(self.parts[0], start, None if end == _OPEN_END else end, self.include_properties)
        else:
            starts, ends, counts = (np.array(column, dtype=np.int64) for column in zip(*self.bounds))
            batch = decode_records(b"".join(self.parts), np.repeat(starts, counts), np.repeat(ends, counts),
                                   self.include_properties)
        self.parts, self.bounds, self.size = [], [], 0
        if batch.num_rows:
            yield batch


def _check_range(r: OffsetRange) -> bool:
    """Validate a range; False for an empty one (nothing to read)."""
    if r.start < 0 or (r.end is not None and r.end < r.start):
        raise ConfigError(f"bad range {r}: need 0 <= start <= end")
    return r.end is None or r.end > r.start
