"""The half log: prepared transaction batches, stored durably apart from the commitlog.

RocketMQ writes a prepared ("half") message into the commitlog under the system topic
RMQ_SYS_TRANS_HALF_TOPIC and, on commit, writes it again under its real topic. Here the
half messages live in a log of their own, so that no reader, index or topic listing can ever
meet one and no queue offset moves before the commit; on commit they are copied into the
commitlog once, as ordinary records. A segment is deleted as soon as every transaction with a
batch in it has ended (RocketMQ's half topic keeps them until commitlog retention).

Segments are fixed-size sparse files named by their 20-digit start position, as commitlog
segments, allocated ahead of the records written, as theirs, under the store's disk guard
(its free-space reserve and failed state, ``broker_sim.store.disk``). An append is written
whole or not at all: a failed or short write leaves the write position where it was. Each
segment starts with an 8-byte magic, so no record sits at position 0 (the commitlog's
PREPARED TX OFFSET uses 0 for "none"). A record never spans segments::

    TOTAL 4 | META_CRC 4 | BODY_CRC 4 | QUEUE_ID 4 | FLAG 4 | SYS_FLAG 4 | COUNT 4 |
    RECONSUME 4 | BORN_TS 8 | BORN_HOST 8 | TOPIC_LEN 2 | TXN_LEN 2 | PROPS_LEN 4 |
    TOPIC | TRANSACTION ID | PROPERTIES | BODY

META_CRC covers everything after it but the body; BODY_CRC (the commitlog's BODYCRC, carried
over on commit) covers the body. Nothing scans the log: positions come from the transaction
state, so bytes after the last referenced record need no recovery, and a new process writes
from a fresh segment. Records written before this process started are checked against both
CRCs before they are committed (an OS crash may have torn them).
"""

from __future__ import annotations

import errno
import mmap
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_sim.common.faults import BrokerFault
from broker_sim.common.files import fsync_dir
from broker_sim.store import NAME_DIGITS, DiskFullError, DiskGuard, MappedFile, PendingRecord, file_name
from rmq_wire import record as fmt

SEGMENT_MAGIC = b"RMQHALF1"
_HEAD = struct.Struct(">IIIiiiiiq8sHHi")
_AFTER_CRC = 8  # TOTAL and META_CRC
_ALLOCATION_STEP = 4 << 20


class HalfLogError(BrokerFault):
    """A half record that cannot be read back as it was written (damaged on disk); a commit
    that meets one refuses as TRANSACTION_INCOMPLETE."""


@dataclass(frozen=True)
class HalfRecord:
    """A prepared record: where it goes, and the commitlog record to append (body: a view)."""

    transaction_id: str
    topic: str
    queue_id: int
    record: PendingRecord


class HalfLog:
    """Append-only segments in ``directory``; thread-safe.

    ``next_segment``: the lowest index of a segment this process may create (it also creates
    none below an existing one); before it creates a segment, ``on_new_segment(next)`` is
    called with the lowest index allowed after it, to be persisted and passed as
    ``next_segment`` next time: positions are never reused, even once segments are deleted.
    """

    def __init__(self, directory: Path, segment_bytes: int, next_segment: int = 0, on_new_segment=None,
                 disk: DiskGuard | None = None):
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.disk = disk or DiskGuard(self.directory, 0)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flushing: list[int] = []  # segments being flushed: not deleted meanwhile
        self._segments: dict[int, MappedFile] = {}
        for path in self.directory.iterdir():
            if path.name.isdigit() and len(path.name) == NAME_DIGITS:
                start = int(path.name)
                self._segments[start // segment_bytes] = _open_segment(path, start, segment_bytes)
        self._live: dict[int, int] = {index: 0 for index in self._segments}
        self._write_index = max([next_segment - 1, *self._segments])  # a new segment is opened on first write
        self._write_pos = (self._write_index + 1) * segment_bytes  # past the end: the next append opens one
        self.written_before = self._write_pos  # records below were written by an earlier process
        self._flushed = 0  # segments left by an earlier process (killed, maybe) are flushed again once
        self._on_new_segment = on_new_segment

    # --- writing ---------------------------------------------------------------------------

    def append(self, transaction_id: str, topic: str, queue_id: int, record: PendingRecord) -> tuple[int, int]:
        """Store a record; returns its (position, size). The record counts as live until
        ``release``d. Raises ``DiskFullError``, ``DiskFailedError`` or ``OSError``; nothing
        is stored then."""
        topic_raw, txn_raw = topic.encode(), transaction_id.encode()
        body = record.body
        meta = _HEAD.pack(0, 0, record.body_crc, queue_id, record.flag, record.sys_flag, record.count,
                          record.reconsume_times, record.born_timestamp, record.born_host, len(topic_raw),
                          len(txn_raw), len(record.properties))[_AFTER_CRC:] + topic_raw + txn_raw + record.properties
        total = _AFTER_CRC + len(meta) + len(body)
        if total + len(SEGMENT_MAGIC) > self.segment_bytes:
            raise ValueError(f"a half record of {total} bytes does not fit a half log segment of "
                             f"{self.segment_bytes} bytes")
        head = struct.pack(">II", total, zlib.crc32(meta))
        with self._lock:
            self.disk.check_healthy()
            segment = self._segment_with_room(total)
            position = self._write_pos
            self._grow(segment, position - segment.start + total)
            segment.write([head, meta, body], position - segment.start, total)
            self._write_pos = position + total
            self._live[self._write_index] += 1
        return position, total

    def _segment_with_room(self, total: int) -> MappedFile:
        segment = self._segments.get(self._write_index)
        if segment is not None and self._write_pos + total <= segment.end:
            return segment
        if self._on_new_segment is not None:
            self._on_new_segment(self._write_index + 2)
        index = self._write_index + 1
        start = index * self.segment_bytes
        try:
            segment = _open_segment(self.directory / file_name(start), start, self.segment_bytes)
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"half log segment {file_name(start)} could not be created: "
                                    f"{err.strerror}") from err
            raise
        try:  # the segment is used once its magic and the record's room are there
            self._grow(segment, len(SEGMENT_MAGIC) + total)
            segment.write([SEGMENT_MAGIC], 0, len(SEGMENT_MAGIC))
            fsync_dir(self.directory)
        except BaseException:
            segment.destroy()
            raise
        self._write_index = index
        self._segments[index] = segment
        self._live[index] = 0
        self._write_pos = start + len(SEGMENT_MAGIC)
        return segment

    def _grow(self, segment: MappedFile, end: int) -> None:
        self.disk.grow(segment, end, min(_ALLOCATION_STEP, self.segment_bytes))

    # --- reading ---------------------------------------------------------------------------

    def read(self, position: int, size: int) -> HalfRecord:
        """The record at ``position``; its body is a view of the log, valid until the record
        is released. Records written before this process are checked against their CRCs."""
        segment = self._segments.get(position // self.segment_bytes)
        if segment is None or position + size > segment.end or size < _HEAD.size:
            raise HalfLogError(f"half log position {position} (size {size}) is not stored")
        view = segment.view[position - segment.start : position - segment.start + size]
        (total, meta_crc, body_crc, queue_id, flag, sys_flag, count, reconsume, born_ts, born_host, topic_len, txn_len,
         props_len) = _HEAD.unpack_from(view)
        body_at = _HEAD.size + topic_len + txn_len + props_len
        if total != size or body_at > size:
            raise HalfLogError(f"half record at {position} is damaged: its size is {total}, {size} was recorded")
        verify = position < self.written_before
        if verify and zlib.crc32(view[_AFTER_CRC:body_at]) != meta_crc:
            raise HalfLogError(f"half record at {position} is damaged: its header CRC does not match")
        body = view[body_at:]
        if verify and not fmt.body_crc_matches(body, body_crc):
            raise HalfLogError(f"half record at {position} is damaged: its body CRC does not match")
        at = _HEAD.size
        topic = bytes(view[at : at + topic_len]).decode()
        transaction_id = bytes(view[at + topic_len : at + topic_len + txn_len]).decode()
        properties = bytes(view[at + topic_len + txn_len : body_at])
        record = PendingRecord(body, body_crc, properties, born_ts, born_host, flag, sys_flag, count, reconsume)
        return HalfRecord(transaction_id, topic, queue_id, record)

    # --- space -----------------------------------------------------------------------------

    def retain(self, position: int) -> None:
        """Count a record written by an earlier process as live (at open)."""
        with self._lock:
            index = position // self.segment_bytes
            self._live[index] = self._live.get(index, 0) + 1

    def release(self, positions) -> None:
        """The records' transactions ended (their segments go with the next ``drop_unused``)."""
        with self._lock:
            for position in positions:
                self._live[position // self.segment_bytes] -= 1

    def drop_unused(self) -> None:
        """Delete every segment without live records but the one being written. Deleting a
        large file takes a while (its cached pages are freed): the sweep does it, not a commit."""
        with self._lock:
            for index in list(self._segments):
                self._drop_if_unused(index)

    def _drop_if_unused(self, index: int) -> None:
        if (self._live.get(index) == 0 and index != self._write_index and index in self._segments
                and index not in self._flushing):
            self._segments.pop(index).destroy()
            del self._live[index]

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # --- durability ------------------------------------------------------------------------

    def flush(self) -> None:
        """Put every record appended so far on disk (appends go on meanwhile)."""
        with self._flush_lock:
            with self._lock:
                target = self._write_pos
                self._flushing = [i for i, s in self._segments.items() if s.end > self._flushed and s.start < target]
            try:
                self.disk.check_healthy()  # after a failed flush, a later one could succeed falsely
                for index in self._flushing:
                    try:
                        self._segments[index].flush()
                    except OSError as err:
                        raise self.disk.fail("to flush the transaction half log", err) from err
            finally:
                with self._lock:
                    self._flushing = []
            self._flushed = max(self._flushed, target)

    def close(self) -> None:
        with self._lock:
            for segment in self._segments.values():
                segment.close()
            self._segments.clear()


def _open_segment(path: Path, start: int, size: int) -> MappedFile:
    segment = MappedFile(path, start, size)
    segment.map.madvise(mmap.MADV_SEQUENTIAL)  # read once, front to back, by commits
    return segment

