"""The CommitLog: one append-only log of records for every topic, cut into segments.

Writers append under one lock, which also assigns queue offsets (RocketMQ's topic-queue
table): a record's QUEUEOFFSET is the next offset of its queue, and it advances by the number
of messages the record holds. Indexes are built from the log afterwards by the dispatcher.

An append is all or nothing: its space is allocated before its bytes are written, every
write is checked whole, and ``max_offset`` (what the dispatcher, flushes and readers see) and
the queue offsets move only once every record is written. A failed append is undone: its
bytes are zeroed and the segments it opened removed, so the log is as it was before it.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker_sim.store.config import StoreConfig
from broker_sim.store.disk import DiskGuard
from broker_sim.store.mapped_file import MappedFile, MappedFileQueue
from rmq_wire import record as fmt

_PROPS_LEN = struct.Struct(">h")
_PHYSICAL = struct.Struct(">q")  # PHYSICALOFFSET, at byte 28 of a record
_MAGIC_BYTES = struct.pack(">I", fmt.MAGIC_V1)
_BLANK_MAGIC_BYTES = struct.pack(">I", fmt.BLANK_MAGIC)
_INNER_BASE_KEY = fmt.PROPERTY_INNER_BASE.encode() + fmt.NAME_VALUE_SEPARATOR
# Segments are allocated this much at a time (one fallocate per step, not per append).
_ALLOCATION_STEP = 4 << 20


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class PendingRecord:
    """A record to append, built outside the lock; the log stamps offsets and store time."""

    body: bytes | memoryview
    body_crc: int
    properties: bytes  # encoded; INNER_BASE and the CRC property are added by the log
    born_timestamp: int
    born_host: bytes
    flag: int = 0
    sys_flag: int = 0
    count: int = 1  # queue offsets this record takes: INNER_NUM for an inner batch
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass(frozen=True)
class DamagedRecord:
    """A damaged record that recovery kept in place: ``size`` bytes from ``position``, up to
    the next valid record. ``header_intact``: only its body is damaged, so its header says
    which topic, queue and offsets it holds."""

    position: int
    size: int
    reason: str
    header_intact: bool

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True)
class Appended:
    queue_offset: int  # of the first record's first message
    physical_offsets: tuple
    store_timestamp: int
    end_offset: int  # where the log ends after this append


class CommitLog:
    def __init__(self, directory: Path, config: StoreConfig, now_ms: Callable[[], int] = wall_clock_ms,
                 disk: DiskGuard | None = None):
        self.config = config
        self.now_ms = now_ms
        self.disk = disk or DiskGuard(directory.parent, config.disk_reserve_bytes)
        self.segments = MappedFileQueue(directory, config.segment_bytes)
        self._store_host = config.store_host_bytes
        self._write_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._topic_parts: dict[str, bytes] = {}
        self.queue_offsets: dict[tuple[str, int], int] = {}  # next offset of each queue
        self.max_offset = self.segments.min_offset  # end of the last complete record
        self._written_end = self.max_offset  # how far the append under way may have written
        self.flushed_offset = self.max_offset
        self.damaged: dict[int, int] = {}  # damaged records kept by recovery: position -> end

    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    def record_fits_segment(self, total: int) -> bool:
        return total + fmt.END_FILE_MIN_BLANK_BYTES <= self.config.segment_bytes

    # --- writing ---------------------------------------------------------------------------

    def append(self, topic: str, queue_id: int, records: list[PendingRecord],
               guard: Callable[[], bool] | None = None) -> Appended | None:
        """Append records of one queue with consecutive queue offsets; callers checked sizes.

        ``guard`` is called under the append lock; when it returns False nothing is appended
        and the result is None (the topic was deleted after the caller checked it). Raises
        ``DiskFullError`` (no room) or ``OSError`` (the disk failed); nothing is appended then.
        """
        topic_part = self._topic_part(topic)
        with self._write_lock:
            if guard is not None and not guard():
                return None
            key = (topic, queue_id)
            first_offset = queue_offset = self.queue_offsets.get(key, 0)
            store_ts = self.now_ms()
            physical = []
            position = self.max_offset
            try:
                for record in records:
                    properties = record.properties
                    if record.sys_flag & fmt.SysFlag.INNER_BATCH:
                        properties += _INNER_BASE_KEY + str(queue_offset).encode() + fmt.PROPERTY_SEPARATOR
                    at, position = self._write(topic_part, queue_id, queue_offset, store_ts, record, properties,
                                               position)
                    physical.append(at)
                    queue_offset += record.count
            except BaseException:
                self._undo()
                raise
            self.max_offset = position
            self.queue_offsets[key] = queue_offset
            return Appended(first_offset, tuple(physical), store_ts, self.max_offset)

    def _write(self, topic_part: bytes, queue_id: int, queue_offset: int, store_ts: int,
               record: PendingRecord, properties: bytes, position: int) -> tuple[int, int]:
        """Write a record at ``position`` (or at the next segment's start); returns where it
        went and where it ends."""
        body = record.body
        total = fmt.record_size(len(body), len(topic_part) - 1, len(properties))
        segment, physical = self._place(position, total)
        header = fmt.HEADER.pack(
            total, fmt.MAGIC_V1, record.body_crc, queue_id, record.flag, queue_offset, physical,
            record.sys_flag, record.born_timestamp, record.born_host, store_ts, self._store_host,
            record.reconsume_times, record.prepared_transaction_offset, len(body),
        )
        after_body = topic_part + _PROPS_LEN.pack(len(properties) + fmt.CRC_RESERVED_BYTES) + properties
        crc = fmt.crc_property(fmt.record_crc(header, after_body))
        # pwritev, not a copy into the map: it releases the GIL, and a write of whole pages
        # skips the zero-fill that a first write through the map costs.
        self._write_whole(segment, [header, body, after_body, crc], physical, total)
        return physical, physical + total

    def _place(self, position: int, total: int) -> tuple[MappedFile, int]:
        """The segment and position of a record of ``total`` bytes appended at ``position``,
        its space allocated. When it does not fit, the next segment is opened and allocated
        first, then RocketMQ's end of file (a BLANK marker over the rest) is written."""
        segment = self.segments.find(position)
        if segment is not None and total + fmt.END_FILE_MIN_BLANK_BYTES <= segment.end - position:
            self._allocate(segment, position - segment.start + total)
            return segment, position
        following = self.segments.create_file(position if segment is None else segment.end)
        self._allocate(following, total)
        if segment is not None:
            left = segment.end - position
            self._allocate(segment, position - segment.start + fmt.BLANK.size)
            self._write_whole(segment, [fmt.BLANK.pack(left, fmt.BLANK_MAGIC)], position, fmt.BLANK.size)
        return following, following.start

    def _allocate(self, segment: MappedFile, end: int) -> None:
        """Allocate ``segment`` up to ``end`` (relative) and the next header's bytes after it:
        a BLANK marker written there, or recovery's read of the header past the tail through
        the map, never meets a hole. Growing takes the reserve's check."""
        self.disk.grow(segment, min(segment.size, end + fmt.FIXED_BYTES), min(_ALLOCATION_STEP, segment.size))

    def _write_whole(self, segment: MappedFile, parts: list, position: int, total: int) -> None:
        """pwritev ``parts`` (``total`` bytes) at log ``position``; a short write is a failure."""
        self._written_end = max(self._written_end, position + total)
        segment.write(parts, position - segment.start, total)

    def _undo(self) -> None:
        """Take back a failed append: remove the segments it opened and zero what it wrote
        after ``max_offset`` (a crash must not bring back records that were refused)."""
        start, end = self.max_offset, self._written_end
        self._written_end = start
        self.segments.drop_files_from(start)
        segment = self.segments.find(start)
        if segment is not None and end > start:
            end = min(end, segment.end)
            os.pwrite(segment.fd, bytes(end - start), start - segment.start)

    def appends_paused(self) -> threading.Lock:
        """The append lock, as a context manager: no record is appended while it is held."""
        return self._write_lock

    def forget_queues(self, topic: str) -> None:
        """Forget the next offsets of a topic's queues (it was deleted); call with appends paused."""
        for key in [key for key in self.queue_offsets if key[0] == topic]:
            del self.queue_offsets[key]
        self._topic_parts.pop(topic, None)

    def _topic_part(self, topic: str) -> bytes:
        part = self._topic_parts.get(topic)
        if part is None:
            raw = topic.encode()
            part = self._topic_parts[topic] = bytes([len(raw)]) + raw
        return part

    # --- flushing --------------------------------------------------------------------------

    def flush(self, until: int | None = None) -> int:
        """Put every byte up to ``until`` (default: all appended) on disk; returns the flushed end.
        Raises ``DiskFailedError`` when a flush fails, and on every call after that.

        Threads that wait for one flush share it (group commit): whoever holds the lock
        flushes everything appended so far.
        """
        if until is not None and self.flushed_offset >= until:
            return self.flushed_offset
        with self._flush_lock:
            self.disk.check_healthy()  # after a failed flush, a later one could succeed falsely
            target = self.max_offset
            if self.flushed_offset >= target:
                return self.flushed_offset
            for segment in self.segments.files:
                if segment.end > self.flushed_offset and segment.start < target:
                    try:
                        segment.flush()
                    except OSError as err:
                        raise self.disk.fail(f"to flush commitlog segment {segment.path.name}", err) from err
            self.flushed_offset = target
            return target

    # --- reading ---------------------------------------------------------------------------

    def view(self, physical_offset: int, size: int) -> memoryview:
        segment = self.segments.find(physical_offset)
        if segment is None:
            raise LookupError(f"commitlog offset {physical_offset} is not stored")
        pos = physical_offset - segment.start
        return segment.view[pos : pos + size]

    def stored_view(self, physical_offset: int, size: int) -> memoryview | None:
        """``view``, or None when those bytes are not in the log (past its end: an index unit
        that outlived a truncated log, or a damaged one)."""
        if physical_offset + size > self.max_offset:
            return None
        segment = self.segments.find(physical_offset)
        if segment is None:  # below the first segment kept
            return None
        pos = physical_offset - segment.start
        return segment.view[pos : pos + size]

    def release_mapped_pages(self) -> None:
        """Unmap the pages of the log that this process touched (reads, dispatching), so that
        its resident memory follows what is in use, not what was ever read. The pages stay in
        the page cache, and views held by readers stay valid: they fault back in on use."""
        for segment in self.segments.files:
            if segment.start < self.max_offset:
                segment.release_pages()

    def headers(self, start: int):
        """The records appended from ``start`` (a record boundary) on, as (physical offset,
        header fields in ``fmt.HEADER`` order); BLANK markers and damaged records are skipped."""
        position = max(start, self.min_offset)
        while position < self.max_offset:
            segment = self.segments.find(position)
            if segment is None:
                return
            pos = position - segment.start
            if position in self.damaged:  # its length cannot be trusted
                position = self.damaged[position]
                continue
            if segment.size - pos < fmt.HEADER.size or fmt.BLANK.unpack_from(segment.map, pos)[1] == fmt.BLANK_MAGIC:
                position = segment.end
                continue
            header = fmt.HEADER.unpack_from(segment.map, pos)
            yield position, header
            position += header[0]

    def segment_at(self, physical_offset: int) -> MappedFile | None:
        return self.segments.find(physical_offset)

    # --- recovery --------------------------------------------------------------------------

    def scan(self, start: int, flushed: int, visit: Callable | None = None) -> tuple[int, str, list]:
        """Check records forward from ``start`` (a record boundary) to the log's end; return
        (the valid tail, why the scan stopped there, the damaged records kept).

        A record that fails its checks is a torn tail, cut, only when no valid record
        follows it and it lies at or past ``flushed`` (the bytes before it are known to be on
        disk). Otherwise it is kept in place, as a ``DamagedRecord`` reaching to the next
        valid record (or to ``flushed``): acknowledged offsets are never given again.
        ``visit(buffer, position, physical offset)`` sees every valid record."""
        damaged = []
        offset = start
        while True:
            segment = self.segments.find(offset)
            if segment is None:
                return offset, "end of the last segment", damaged
            check, size, reason = fmt.check_record(segment.map, offset - segment.start, segment.size)
            if check is fmt.Check.OK:
                if visit is not None:
                    visit(segment.map, offset - segment.start, offset)
                offset += size
                continue
            if check is fmt.Check.BLANK:
                offset = segment.end
                continue
            if offset >= flushed and reason == fmt.NO_MORE_RECORDS:
                return offset, reason, damaged  # the usual end of a log
            next_valid = self._next_valid_record(offset, size)
            if next_valid is None:
                if offset >= flushed:
                    return offset, reason, damaged  # a torn tail
                next_valid = min(flushed, self.segments.files[-1].end)
            damaged.append(DamagedRecord(offset, next_valid - offset, reason, check is fmt.Check.BAD_BODY))
            offset = next_valid

    def _next_valid_record(self, position: int, size: int) -> int | None:
        """Where the first valid record (or BLANK marker) after the damaged one at
        ``position`` starts: at ``position + size`` when its length is known good, else
        wherever a record that validates and names its own position starts; None if none."""
        if size and self._valid_at(position + size):
            return position + size
        segment = self.segments.find(position)
        at = position - segment.start + 1
        while segment is not None:
            found = self._first_valid_in(segment, at)
            if found is not None:
                return segment.start + found
            segment, at = self.segments.find(segment.end), 0
        return None

    def _valid_at(self, position: int) -> bool:
        segment = self.segments.find(position)
        return segment is not None and self._valid_in(segment, position - segment.start)

    def _first_valid_in(self, segment: MappedFile, at: int) -> int | None:
        buf = segment.map
        while True:
            hits = [hit - 4 for hit in (buf.find(_MAGIC_BYTES, at + 4), buf.find(_BLANK_MAGIC_BYTES, at + 4))
                    if hit >= 0]
            if not hits:
                return None
            at = min(hits)
            if self._valid_in(segment, at):
                return at
            at += 1

    @staticmethod
    def _valid_in(segment: MappedFile, pos: int) -> bool:
        """A valid record naming its own position (not one quoted in a body), or a BLANK marker."""
        check, _size, _reason = fmt.check_record(segment.map, pos, segment.size)
        if check is fmt.Check.BLANK:
            return True
        return check is fmt.Check.OK and _PHYSICAL.unpack_from(segment.map, pos + 28)[0] == segment.start + pos

    def truncate(self, tail: int) -> None:
        """Make ``tail`` the end of the log: nothing at or after it is kept."""
        self.segments.truncate(tail)
        self.max_offset = self._written_end = tail
        self.flushed_offset = min(self.flushed_offset, tail)

    def close(self) -> None:
        self.segments.close()

