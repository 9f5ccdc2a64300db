"""The index files of a queue: SimpleCQ (a unit per message) and BatchCQ (a unit per batch).

Both are series of fixed-size unit files, as RocketMQ's ConsumeQueue and BatchConsumeQueue.
Only the dispatcher writes them, in commitlog order, so each queue's units are in offset order.

Units are written through the map, so a unit file is allocated ahead of the units written
(a page at first, then as much again as the file holds, up to 1 MiB at a time): a full disk
then fails the allocation with ``DiskFullError`` before any unit of the put is written, where
a write into a hole would kill the broker with SIGBUS. The dispatcher retries later.
"""

from __future__ import annotations

import bisect
import shutil
import struct
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

from broker_sim.common.files import fsync_dir
from broker_sim.store.config import StoreConfig
from broker_sim.store.errors import IndexGapError
from broker_sim.store.mapped_file import PAGE_BYTES, MappedFile, MappedFileQueue
from broker_sim.store.paths import StorePaths
from broker_sim.store.topics import QueueType

SIZE_AT = 8  # both unit kinds keep the record size at byte 8; 0 marks an unwritten unit
_LARGEST_ALLOCATION_STEP = 1 << 20


class IndexUnit(NamedTuple):
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int  # 0 in SimpleCQ units: the commitlog record has it
    base_offset: int
    count: int


class ConsumeQueue:
    """What both index kinds share: unit files, the write position, loading and truncation."""

    UNIT: struct.Struct
    queue_type: QueueType

    def __init__(self, directory: Path, units_per_file: int, topic: str = "", queue_id: int = 0):
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(directory, units_per_file * self.UNIT.size, for_index=True)
        self.units_per_file = units_per_file
        self.unit_count = 0  # units written, counted from the series' start
        self.max_offset = 0  # the next message offset of the queue
        self.indexed_end = 0  # set here too: a flush may read it before the first unit is put
        self._load()
        self.flushed_units = self.unit_count  # units known to be on disk
        # Units read from the files (index bytes may have rotted since they were written):
        # reads check them against their records. Units put since were made here from records
        # just appended or scanned.
        self.units_from_disk = self.unit_count

    @property
    def first_unit(self) -> int:
        return self.files.min_offset // self.UNIT.size

    def _load(self) -> None:
        last = self.files.last()
        if last is None:
            return
        # Units are written in order: find the first unwritten one, among the allocated pages
        # (reading a hole through the map allocates a page on tmpfs: SIGBUS when it is full).
        lo, hi = 0, min(self.units_per_file, last.allocated // self.UNIT.size)
        while lo < hi:
            mid = (lo + hi) // 2
            if struct.unpack_from(">i", last.map, mid * self.UNIT.size + SIZE_AT)[0] > 0:
                lo = mid + 1
            else:
                hi = mid
        self.unit_count = last.start // self.UNIT.size + lo
        self._after_truncate()

    def unit(self, index: int) -> IndexUnit:
        """The unit at ``index`` (counted from the series' start)."""
        mapped = self.files.find(index * self.UNIT.size)
        return self._decode(index, self.UNIT.unpack_from(mapped.map, index * self.UNIT.size - mapped.start))

    def units(self, first: int, limit: int) -> list[IndexUnit]:
        """Up to ``limit`` written units from index ``first`` on, read file by file."""
        out = []
        end = min(self.unit_count, first + limit)
        size = self.UNIT.size
        while first < end:
            mapped = self.files.find(first * size)
            stop = min(end, mapped.end // size)
            chunk = mapped.view[first * size - mapped.start : stop * size - mapped.start]
            out += [self._decode(i, values) for i, values in enumerate(self.UNIT.iter_unpack(chunk), first)]
            first = stop
        return out

    def index_by_time(self, timestamp_ms: int, store_time_of) -> int:
        """The index of the first unit stored at or after ``timestamp_ms`` (unit_count if none);
        ``store_time_of(unit)`` gives a unit's store time."""
        lo, hi = self.first_unit, self.unit_count
        while lo < hi:
            mid = (lo + hi) // 2
            if store_time_of(self.unit(mid)) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def last_unit(self) -> IndexUnit | None:
        return self.unit(self.unit_count - 1) if self.unit_count > self.first_unit else None

    def put(self, physical_offset: int, size: int, tags_code: int, store_ts: int, queue_offset: int,
            count: int) -> bool:
        """Index one record; False when it is already indexed (a re-dispatch after recovery)."""
        if queue_offset < self.max_offset:
            return False
        if queue_offset > self.max_offset:
            raise IndexGapError(f"{self.files.directory}: a unit for offset {queue_offset} would leave a gap "
                                f"after {self.max_offset}", self.topic, self.queue_id, queue_offset, physical_offset)
        self._append(physical_offset, size, tags_code, store_ts, queue_offset, count)
        self.max_offset = queue_offset + count
        self.indexed_end = physical_offset + size
        return True

    def put_many(self, physical_offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray,
                 store_timestamps: np.ndarray, queue_offsets: np.ndarray, counts: np.ndarray) -> int:
        """Index a run of this queue's records, in log order, as ``put`` does one by one (the
        concurrent dispatcher's write); returns how many units were written."""
        ends = queue_offsets + counts
        if len(ends) > 1 and not np.array_equal(queue_offsets[1:], ends[:-1]):
            # Not one contiguous run of offsets: put them one by one, with put's checks.
            rows = zip(physical_offsets.tolist(), sizes.tolist(), tags_codes.tolist(), store_timestamps.tolist(),
                       queue_offsets.tolist(), counts.tolist())
            return sum(self.put(*row) for row in rows)
        first = int(np.searchsorted(queue_offsets, self.max_offset))  # those before are indexed already
        if first == len(ends):
            return 0
        if queue_offsets[first] > self.max_offset:
            raise IndexGapError(f"{self.files.directory}: a unit for offset {int(queue_offsets[first])} would leave "
                                f"a gap after {self.max_offset}", self.topic, self.queue_id,
                                int(queue_offsets[first]), int(physical_offsets[first]))
        units = self._units(physical_offsets[first:], sizes[first:], tags_codes[first:], store_timestamps[first:],
                            queue_offsets[first:], counts[first:])
        self._append_units(units, queue_offsets[first:])
        self.max_offset = int(ends[-1])
        self.indexed_end = int(physical_offsets[-1] + sizes[-1])
        return len(units)

    def _append_units(self, units: np.ndarray, queue_offsets: np.ndarray) -> None:
        """Write packed units after the last one, file by file, once all their space is allocated."""
        self._allocate_units(len(units))
        raw = memoryview(units.tobytes())
        size = self.UNIT.size
        done = 0
        while done < len(units):
            position = self.unit_count * size
            mapped = self.files.find(position)
            if position == mapped.start:
                self._file_started(int(queue_offsets[done]))
            take = min(len(units) - done, (mapped.end - position) // size)
            at = position - mapped.start
            mapped.map[at : at + take * size] = raw[done * size : (done + take) * size]
            self.unit_count += take
            done += take

    def _file_started(self, base_offset: int) -> None:
        """A unit file's first unit, for ``base_offset``, is being written."""

    def append_unit(self, values: tuple) -> None:
        position = self.unit_count * self.UNIT.size
        mapped = self.files.find(position) or self.files.create_file(position)
        end = position - mapped.start + self.UNIT.size
        if end > mapped.allocated:
            _allocate(mapped, end)
        self.UNIT.pack_into(mapped.map, position - mapped.start, *values)
        self.unit_count += 1

    def _allocate_units(self, count: int) -> None:
        """Allocate the space of the next ``count`` units, creating files as needed."""
        size = self.UNIT.size
        position, end = self.unit_count * size, (self.unit_count + count) * size
        while position < end:
            mapped = self.files.find(position) or self.files.create_file(position)
            stop = min(end, mapped.end)
            _allocate(mapped, stop - mapped.start)
            position = stop

    def truncate_units(self, keep: int) -> None:
        """Keep the first ``keep`` units (counted from the series' start), drop the rest."""
        if keep >= self.unit_count:
            return
        self.files.truncate(keep * self.UNIT.size)
        self.unit_count = keep
        self.flushed_units = min(self.flushed_units, keep)
        self.units_from_disk = min(self.units_from_disk, keep)
        self._after_truncate()

    @property
    def unflushed_bytes(self) -> int:
        return (self.unit_count - self.flushed_units) * self.UNIT.size

    def flush(self) -> None:
        """Put the units written so far on disk, and the names of files created since."""
        target = self.unit_count
        if self.files.unsynced_names:
            directory = self.files.directory
            for path in (directory, directory.parent, directory.parent.parent):
                fsync_dir(path)
            self.files.unsynced_names = False
        size = self.UNIT.size
        for mapped in self.files.files:
            if mapped.end > self.flushed_units * size and mapped.start < target * size:
                mapped.flush()
        self.flushed_units = target

    def close(self) -> None:
        self.files.close()

    def _after_truncate(self) -> None:
        last = self.last_unit()
        self.max_offset = last.base_offset + last.count if last else self.first_unit
        self.indexed_end = last.physical_offset + last.size if last else 0  # where its last record ends

    def _append(self, physical_offset, size, tags_code, store_ts, queue_offset, count) -> None:
        raise NotImplementedError

    @staticmethod
    def _units(physical_offsets, sizes, tags_codes, store_timestamps, queue_offsets, counts) -> np.ndarray:
        """Units of records as a packed array of ``UNIT``'s layout."""
        raise NotImplementedError

    @staticmethod
    def _decode(index: int, values: tuple) -> IndexUnit:
        raise NotImplementedError


def _allocate(mapped: MappedFile, end: int) -> None:
    """Allocate a unit file up to ``end`` and ahead: as much again as it holds, a page to 1 MiB
    (10,000 queues with a few units each take a page each; a busy one grows in few calls)."""
    mapped.allocate(end, min(_LARGEST_ALLOCATION_STEP, max(PAGE_BYTES, mapped.allocated)))


class SimpleConsumeQueue(ConsumeQueue):
    """20-byte units, one per message: commitLogOffset 8, size 4, tagsCode 8. O(1) lookup."""

    UNIT = struct.Struct(">qiq")
    DTYPE = np.dtype([("physical_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
    queue_type = QueueType.SIMPLE_CQ

    @property
    def min_offset(self) -> int:
        return self.first_unit

    def _append(self, physical_offset, size, tags_code, store_ts, queue_offset, count) -> None:
        if count != 1:
            raise ValueError("a SimpleCQ unit indexes one message")
        self.append_unit((physical_offset, size, tags_code))

    @classmethod
    def _units(cls, physical_offsets, sizes, tags_codes, store_timestamps, queue_offsets, counts) -> np.ndarray:
        if (counts != 1).any():
            raise ValueError("a SimpleCQ unit indexes one message")
        units = np.empty(len(sizes), dtype=cls.DTYPE)
        units["physical_offset"], units["size"], units["tags_code"] = physical_offsets, sizes, tags_codes
        return units

    def unit_index(self, offset: int) -> int:
        return offset

    @staticmethod
    def _decode(index: int, values: tuple) -> IndexUnit:
        physical, size, tags = values
        return IndexUnit(physical, size, tags, 0, index, 1)


class BatchConsumeQueue(ConsumeQueue):
    """46-byte units, one per batch; lookups binary-search msgBaseOffset or storeTime.

    commitLogOffset 8 | size 4 | tagsCode 8 | storeTime 8 | msgBaseOffset 8 | batchSize 2 |
    compactedOffset 4 (-1) | reserved 4
    """

    UNIT = struct.Struct(">qiqqqhii")
    DTYPE = np.dtype([("physical_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_timestamp", ">i8"),
                      ("base_offset", ">i8"), ("count", ">i2"), ("compacted_offset", ">i4"), ("reserved", ">i4")])
    queue_type = QueueType.BATCH_CQ

    def __init__(self, directory: Path, units_per_file: int, topic: str = "", queue_id: int = 0):
        self._file_bases: list[int] = []  # msgBaseOffset of each file's first unit
        super().__init__(directory, units_per_file, topic, queue_id)

    @property
    def min_offset(self) -> int:
        return self._file_bases[0] if self._file_bases else self.max_offset

    def _append(self, physical_offset, size, tags_code, store_ts, queue_offset, count) -> None:
        starts_file = self.unit_count % self.units_per_file == 0
        self.append_unit((physical_offset, size, tags_code, store_ts, queue_offset, count, -1, 0))
        if starts_file:  # once written: a put that failed for room is retried
            self._file_bases.append(queue_offset)

    @classmethod
    def _units(cls, physical_offsets, sizes, tags_codes, store_timestamps, queue_offsets, counts) -> np.ndarray:
        if (counts > 32767).any() or (counts < -32768).any():
            raise ValueError("a BatchCQ unit's batchSize is a short: at most 32767 messages")
        units = np.empty(len(sizes), dtype=cls.DTYPE)
        units["physical_offset"], units["size"], units["tags_code"] = physical_offsets, sizes, tags_codes
        units["store_timestamp"], units["base_offset"], units["count"] = store_timestamps, queue_offsets, counts
        units["compacted_offset"], units["reserved"] = -1, 0
        return units

    def _file_started(self, base_offset: int) -> None:
        self._file_bases.append(base_offset)

    def unit_index(self, offset: int) -> int:
        """The index of the unit holding ``offset``: the greatest msgBaseOffset <= offset."""
        file_no = bisect.bisect_right(self._file_bases, offset) - 1
        first = self.first_unit + file_no * self.units_per_file
        lo, hi = first, min(self.unit_count, first + self.units_per_file) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._base_at(mid) <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _base_at(self, index: int) -> int:
        mapped = self.files.find(index * 46)
        return struct.unpack_from(">q", mapped.map, index * 46 - mapped.start + 28)[0]

    @staticmethod
    def _decode(index: int, values: tuple) -> IndexUnit:
        physical, size, tags, store_ts, base, count, _compacted, _reserved = values
        return IndexUnit(physical, size, tags, store_ts, base, count)

    def _after_truncate(self) -> None:
        self._file_bases = [self._base_at(f.start // 46) for f in self.files.files
                            if f.start // 46 < self.unit_count]
        super()._after_truncate()


class ConsumeQueueTable:
    """Every queue's index of a data directory, created on first use."""

    def __init__(self, data_dir: Path, config: StoreConfig):
        self.paths = StorePaths(data_dir)
        self.config = config
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def load(self, topics) -> None:
        """Open the index files on disk of every known topic."""
        for topic in topics:
            root = self.paths.topic_index(topic.queue_type, topic.name)
            if root.is_dir():
                for child in root.iterdir():
                    if child.name.isdigit() and int(child.name) < topic.stored_queues:
                        self.get(topic.name, int(child.name), topic.queue_type)

    def get(self, topic: str, queue_id: int, queue_type: QueueType) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            with self._lock:
                queue = self._queues.get((topic, queue_id))
                if queue is None:
                    directory = self.paths.queue_index(queue_type, topic, queue_id)
                    if queue_type is QueueType.BATCH_CQ:
                        queue = BatchConsumeQueue(directory, self.config.batch_cq_units_per_file, topic, queue_id)
                    else:
                        queue = SimpleConsumeQueue(directory, self.config.simple_cq_units_per_file, topic, queue_id)
                    self._queues[(topic, queue_id)] = queue
        return queue

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def remove(self, topic: str) -> None:
        """Close a topic's queues and delete their index files (the topic was deleted)."""
        with self._lock:
            removed = [self._queues.pop(key) for key in [key for key in self._queues if key[0] == topic]]
        for queue in removed:
            queue.close()
        self.remove_files(topic)

    def remove_files(self, topic: str) -> bool:
        """Delete a topic's index directories, of both kinds; True when there were any."""
        found = False
        for queue_type in QueueType:
            root = self.paths.topic_index(queue_type, topic)
            if root.exists():
                shutil.rmtree(root)
                fsync_dir(root.parent)
                found = True
        return found

    def all(self) -> list[tuple[tuple[str, int], ConsumeQueue]]:
        with self._lock:  # the dispatcher may be adding a queue
            return list(self._queues.items())

    def flush(self, least_bytes: int = 0) -> None:
        """Flush every queue with more than ``least_bytes`` of units not yet on disk
        (RocketMQ flushes only queues with two dirty pages, and all of them less often)."""
        for _key, queue in self.all():
            if queue.unflushed_bytes > least_bytes:
                queue.flush()

    def close(self) -> None:
        for _key, queue in self.all():
            queue.close()
        self._queues.clear()
