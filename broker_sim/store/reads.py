"""Reads: the store's reading role (a part of MessageStore): messages by queue offset (waiting
for the dispatcher when they are stored but not indexed yet: read-your-writes), offsets,
records by commitlog position, how far indexing is behind, and the waits and arrival
listeners of readers that wait for new messages."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Callable

from broker_sim.common.logs import ThrottledLog
from broker_sim.store.commitlog import CommitLog
from broker_sim.store.config import StoreConfig
from broker_sim.store.consume_queue import ConsumeQueue, ConsumeQueueTable, IndexUnit
from broker_sim.store.disk import DiskGuard
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import StoreClosedError, UnknownQueueError, UnknownTopicError
from broker_sim.store.integrity import CorruptedRecord, CorruptionReport, VerifiedRecords, record_problem
from broker_sim.store.status import GetResult, GetStatus, LogPositions, StoredBatch
from broker_sim.store.topics import QueueType, TopicTable, same_topic, unknown_topic
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

DEFAULT_MAX_READ_BYTES = 4 << 20
OUTSIDE_THE_LOG = "the index unit points outside the commitlog"  # a read's problem, as record_problem's


class Reads:
    """MessageStore's reads, over the parts its opening made (named here)."""

    config: StoreConfig
    topics: TopicTable
    commitlog: CommitLog
    queues: ConsumeQueueTable
    dispatcher: Dispatcher
    disk: DiskGuard
    corruption: CorruptionReport
    reads_waited_for_index: int
    _verified: VerifiedRecords
    _dispatched: threading.Condition
    _arrival_listeners: tuple
    _closed: bool
    now_ms: Callable[[], int]

    @functools.cached_property
    def _index_wait_log(self) -> ThrottledLog:
        """Reads behind a slow dispatcher, each of which waits: at most 5 lines per 10 s per topic."""
        return ThrottledLog(log)

    def get_messages(self, topic: str, queue_id: int, start: int, end: int | None = None,
                     max_bytes: int = DEFAULT_MAX_READ_BYTES) -> GetResult:
        """The stored records holding offsets ``start`` .. ``end - 1`` (``end`` None: all),
        as views of the commitlog, until ``max_bytes`` are collected (at least one record).
        Offsets stored before the call are read even when the dispatcher has not indexed them
        yet: the read waits for them (``_readable_queue``).

        A record is returned whole: an inner batch may hold offsets before ``start`` or from
        ``end`` on, and its reader cuts them. A damaged record is never returned: the read
        stops before it, or, when it holds ``start``, the status is RECORD_CORRUPTED with the
        offsets it holds and why (``next_begin_offset`` is past it).
        """
        if self._closed:
            raise StoreClosedError("the store is closed")
        if start < 0 or (end is not None and end <= start) or max_bytes <= 0:
            raise ValueError(f"bad read range start={start} end={end} max_bytes={max_bytes}: need "
                             "0 <= start < end and max_bytes > 0")
        config = self.topics.get(topic)
        if config is None or not 0 <= queue_id < config.queue_count:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        queue = self._readable_queue(self.queues.find(topic, queue_id), topic, queue_id, start, end)
        if queue is None or queue.max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if start < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if start == high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, start, low, high)
        if start > high:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
        end = high if end is None else min(end, high)
        batches, taken, next_offset = [], 0, start
        index = queue.unit_index(start)
        topic_raw = topic.encode()
        while next_offset < end and taken < max_bytes:
            units = queue.units(index, 64)
            if not units:
                break
            from_disk = queue.units_from_disk - index  # the first this many units of the call
            for i, unit in enumerate(units):
                if unit.base_offset >= end or taken >= max_bytes:
                    break
                view = self.commitlog.stored_view(unit.physical_offset, unit.size)
                problem = self._record_problem(view, unit, topic_raw, queue_id, i < from_disk) if view is not None \
                    else OUTSIDE_THE_LOG
                if problem:
                    if batches:  # serve what came before it; the next read starts at it
                        return GetResult(GetStatus.FOUND, unit.base_offset, low, high, batches)
                    return self._corrupted(topic, queue_id, units[i:], problem, low, high)
                batches.append(StoredBatch(unit.base_offset, unit.count, unit.physical_offset, unit.tags_code, view))
                taken += unit.size
                next_offset = unit.base_offset + unit.count
            index += len(units)
        return GetResult(GetStatus.FOUND, min(next_offset, end), low, high, batches)

    def _record_problem(self, view, unit: IndexUnit, topic: bytes, queue_id: int,
                        unit_from_disk: bool) -> str | None:
        """Why a record may not be served as ``unit``; its CRCs are checked once since open, and
        whether it is the unit's record when the unit was read from disk."""
        check_crc = self._verified.needs_check(unit.physical_offset)
        if not (unit_from_disk or check_crc):
            return None
        problem = record_problem(view, unit, topic, queue_id, check_crc)
        if check_crc and problem is None:
            self._verified.checked(unit.physical_offset)
        return problem

    def _corrupted(self, topic: str, queue_id: int, units: list, problem: str, low: int, high: int) -> GetResult:
        """The answer for a damaged record: the offsets of its unit, and of the units after it
        that point at it too (offsets recovery indexed to one damaged record)."""
        first = units[0]
        end = first.base_offset + first.count
        for unit in units[1:]:
            if unit.physical_offset != first.physical_offset:
                break
            end = unit.base_offset + unit.count
        record = CorruptedRecord(first.physical_offset, first.size, problem, "read", topic, queue_id,
                                 first.base_offset, end)
        self.corruption.add(record)
        if problem == OUTSIDE_THE_LOG:
            what = (f"the index points there, but the commitlog holds offsets {self.commitlog.min_offset} to "
                    f"{self.commitlog.max_offset} only: the log was truncated (or the index is damaged), and these "
                    "messages cannot be read")
        else:
            what = f"the stored record is damaged ({problem}) and cannot be read"
        return GetResult(GetStatus.RECORD_CORRUPTED, end, low, high, detail=f"{record.where()}: {what}")

    def corrupted_records(self) -> list[CorruptedRecord]:
        """The damaged records found by recovery and reads, kept until their segments are gone."""
        return self.corruption.all()

    def lookup(self, topic: str, queue_id: int, offset: int) -> IndexUnit | None:
        """The index unit holding ``offset``, or None when the offset is not indexed."""
        queue = self._existing_queue(topic, queue_id)
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return None
        return queue.unit(queue.unit_index(offset))

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms``; the max offset if none is."""
        queue = self._readable_queue(self._existing_queue(topic, queue_id), topic, queue_id)
        if queue is None:
            return 0
        index = queue.index_by_time(timestamp_ms, self._store_time_of(queue))
        if index >= queue.unit_count:
            return queue.max_offset
        return queue.unit(index).base_offset

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._existing_queue(topic, queue_id)
        return queue.min_offset if queue else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next offset of the queue: everything below it is indexed and readable, and
        every message stored before the call is below it (the call waits for the dispatcher
        when it has not indexed them yet: ``_readable_queue``)."""
        queue = self._readable_queue(self._existing_queue(topic, queue_id), topic, queue_id)
        return queue.max_offset if queue else 0

    def indexed_offset(self, topic: str, queue_id: int) -> int:
        """The queue's indexed end, never waiting for the dispatcher: what an arrival made
        readable (the pull hold looks at it on an event loop, which must not wait)."""
        queue = self._existing_queue(topic, queue_id)
        return queue.max_offset if queue else 0

    def next_offset(self, topic: str, queue_id: int) -> int:
        """The offset the queue's next message gets: every offset below it is stored, the
        latest ones maybe not indexed yet (``max_offset`` is the indexed end)."""
        self._existing_queue(topic, queue_id)
        return self.commitlog.queue_offsets.get((topic, queue_id), 0)

    def wait_for_messages(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Wait until ``offset`` of the queue is readable; False on timeout."""
        self._existing_queue(topic, queue_id)
        with self._dispatched:
            return self._dispatched.wait_for(lambda: self.max_offset(topic, queue_id) > offset, timeout_s)

    def dispatch_lag(self) -> tuple[int, int]:
        """How far the indexes are behind the commitlog's end, as (bytes, ms): the bytes
        appended but not indexed yet, and how long ago the oldest of them was stored (0, 0
        when everything is indexed). Consumers see a message only once it is indexed."""
        indexed, end = self.dispatcher.position, self.commitlog.max_offset
        if indexed >= end:
            return 0, 0
        segment = self.commitlog.segment_at(indexed)
        at = indexed - segment.start
        if fmt.BLANK.unpack_from(segment.map, at)[1] == fmt.BLANK_MAGIC:  # the next record opens the next segment
            segment, at = self.commitlog.segment_at(segment.end), 0
        store_ts = fmt.HEADER.unpack_from(segment.map, at)[10]  # STORETIMESTAMP
        return end - indexed, max(0, self.now_ms() - store_ts)

    def log_positions(self) -> LogPositions:
        return LogPositions(self.commitlog.min_offset, self.commitlog.max_offset, self.commitlog.flushed_offset,
                            self.dispatcher.position)

    def record_at(self, physical_offset: int) -> bytes | None:
        """A copy of the stored record starting at commitlog position ``physical_offset``,
        checked whole (its CRCs); None when no intact record starts there (not a record's
        start, not stored, deleted with its segment, or damaged). Message ids name positions."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        segment = self.commitlog.segment_at(physical_offset)
        end = self.commitlog.max_offset  # below it every record is whole
        if segment is None or physical_offset >= end:
            return None
        pos = physical_offset - segment.start
        limit = min(segment.size, end - segment.start)
        check, size, _why = fmt.check_record(segment.view, pos, limit)
        if check is not fmt.Check.OK:
            return None
        return bytes(segment.view[pos:pos + size])

    def record_headers(self, start: int):
        """(position, header fields) of every record from commitlog position ``start`` on."""
        return self.commitlog.headers(start)

    @property
    def index_behind(self) -> bool:
        """Whether records appended are not all indexed yet (and indexing goes on): a read of
        them waits for the dispatcher now (``_readable_queue``)."""
        return self.dispatcher.position < self.commitlog.max_offset and not self.dispatcher.stalled

    @property
    def indexed_position(self) -> int:
        """The commitlog position up to which every record is indexed."""
        return self.dispatcher.position

    def wait_indexed_past(self, position: int, timeout_s: float) -> bool:
        """Wait until records past commitlog ``position`` are indexed (new messages of any
        queue are readable); False on timeout. Long polling over many queues waits here."""
        with self._dispatched:
            return self._dispatched.wait_for(lambda: self.dispatcher.position > position, timeout_s)

    def wait_dispatched(self, timeout_s: float) -> bool:
        """Wait until every record appended so far is indexed; False on timeout."""
        target = self.commitlog.max_offset
        self.dispatcher.wake()
        with self._dispatched:
            return self._dispatched.wait_for(lambda: self.dispatcher.position >= target, timeout_s)

    def _readable_queue(self, queue: ConsumeQueue | None, topic: str, queue_id: int, start: int = 0,
                        end: int | None = None) -> ConsumeQueue | None:
        """The queue's index ``queue`` (as ``queues.find`` gave it: None while it is empty), once
        it holds every offset from ``start`` up to ``end`` (None: every offset) that was stored
        before the call: read-your-writes. A send is answered
        once its records are in the commitlog; the dispatcher indexes them a little later (much
        later on a loaded machine), so a read that asks for offsets stored but not indexed yet
        waits for them, up to ``index_wait_ms``; not at all while indexing is stalled (no room
        for index files, a failed disk: the read sees what is indexed). A read of what is
        indexed, or of nothing stored, costs a lookup of the queue's stored end."""
        stored = self.commitlog.queue_offsets.get((topic, queue_id), 0)
        if queue is not None and queue.max_offset >= stored:  # the common case first: all indexed
            return queue
        wanted = stored if end is None else min(end, stored)
        if (queue.max_offset if queue is not None else 0) >= wanted or start >= wanted:
            return queue
        if self.dispatcher.stalled or self.disk.failure:
            return queue
        config = self.topics.get(topic)

        def indexed() -> bool:
            found = self.queues.find(topic, queue_id)
            return (found is not None and found.max_offset >= wanted) or self._closed \
                or not same_topic(self.topics.get(topic), config) or self.dispatcher.stalled

        self.dispatcher.wake()
        with self._dispatched:
            self.reads_waited_for_index += 1
            if not self._dispatched.wait_for(indexed, self.config.index_wait_ms / 1000):
                self._index_wait_log.warning(
                    "a read of topic %r queue %d waited %d ms (index_wait_ms) for offsets below %d, stored but not "
                    "indexed yet, and goes on with what is indexed: the dispatcher is %d bytes behind", topic,
                    queue_id, self.config.index_wait_ms, wanted, self.commitlog.max_offset - self.dispatcher.position,
                    key=topic, extra={"topic": topic, "queue": queue_id})
        return self.queues.find(topic, queue_id)

    def _existing_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue's index (None while it is empty); raises for an unknown topic or queue."""
        config = self.topics.get(topic)
        if config is None:
            raise UnknownTopicError(unknown_topic(topic, self.topics))
        if not 0 <= queue_id < config.queue_count:
            raise UnknownQueueError(f"topic {topic!r} has queues 0 to {config.queue_count - 1}; "
                                    f"there is no queue {queue_id}")
        return self.queues.find(topic, queue_id)

    def _store_time_of(self, queue: ConsumeQueue):
        if queue.queue_type is QueueType.BATCH_CQ:
            return lambda unit: unit.store_timestamp
        def store_timestamp(unit):  # a unit pointing past the log's end: as early as can be (reads refuse it)
            header = self.commitlog.stored_view(unit.physical_offset, fmt.HEADER.size)
            return 0 if header is None else fmt.HEADER.unpack_from(header)[10]

        return store_timestamp

    def add_arrival_listener(self, listener) -> None:
        """Call ``listener()`` (on the dispatcher's thread: it must return at once) whenever
        newly indexed messages become readable, as RocketMQ's MessageArrivingListener: how a door
        wakes the pulls it holds without a thread per pull."""
        self._arrival_listeners = (*self._arrival_listeners, listener)

    def _notify_dispatched(self) -> None:
        with self._dispatched:
            self._dispatched.notify_all()
        for listener in self._arrival_listeners:
            listener()
