"""MessageStore: the store's one entry point, over the commitlog, the indexes and recovery.

The data directory's layout is in ``paths.py``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from broker_sim.common.files import fsync_dir
from broker_sim.common.service_thread import ServiceThread
from broker_sim.store.checkpoint import Checkpoint, load_queue_table, save_queue_table
from broker_sim.store.commitlog import CommitLog, PendingRecord, wall_clock_ms
from broker_sim.store.concurrent_dispatcher import ConcurrentDispatcher
from broker_sim.store.config import DispatchMode, FlushMode, StoreConfig
from broker_sim.store.consume_queue import ConsumeQueue, ConsumeQueueTable, IndexUnit
from broker_sim.store.disk import DiskGuard
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import (
    DataDirInUseError,
    DiskFailedError,
    DiskFullError,
    StoreClosedError,
    UnknownQueueError,
    UnknownTopicError,
    echo,
)
from broker_sim.store.integrity import CorruptedRecord, CorruptionReport, VerifiedRecords, record_problem
from broker_sim.store.mapped_file import raise_open_file_limit
from broker_sim.store.paths import StorePaths
from broker_sim.store.producer_state import ProducerState, stamp_problem, stamp_property
from broker_sim.store.recovery import RecoveryReport, recover
from broker_sim.store.status import (
    DEFAULT_PUT,
    CreateStatus,
    GetResult,
    GetStatus,
    InnerBatch,
    LogPositions,
    PutContext,
    PutResult,
    PutStatus,
    QueueRecords,
    StoredBatch,
)
from broker_sim.store.topics import QueueType, TopicConfig, TopicTable, topic_name_problem
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

DEFAULT_MAX_READ_BYTES = 4 << 20
OUTSIDE_THE_LOG = "the index unit points outside the commitlog"  # a read's problem, as record_problem's
# INNER_BASE, added under the append lock: name, separators and up to 19 digits.
_INNER_BASE_RESERVED = len(fmt.PROPERTY_INNER_BASE) + 2 + 19


class MessageStore:
    """RocketMQ's batch storage model on one data directory.

    Opening runs recovery and starts the dispatcher (and, in async flush mode, the flusher);
    ``close()`` (or leaving the ``with`` block) stops cleanly. ``now_ms`` is the clock that
    stamps store times, for tests. ``payload_check(payload, codec, compression, count)``
    raises ValueError for an inner batch payload that does not decode into ``count``
    messages; the broker passes the SDK codec's check (the store knows no codec), and without
    one payloads are stored unchecked.
    """

    def __init__(self, data_dir, config: StoreConfig | None = None, *,
                 now_ms: Callable[[], int] = wall_clock_ms, payload_check: Callable | None = None):
        self.data_dir = Path(data_dir)
        self.paths = StorePaths(self.data_dir)
        self.config = config or StoreConfig()
        self.now_ms = now_ms
        self.payload_check = payload_check
        self.data_dir.mkdir(parents=True, exist_ok=True)
        raise_open_file_limit()
        self._lock_fd = _lock_data_dir(self.paths)
        try:
            self._open()
        except BaseException:
            for part in ("dispatcher", "queues", "commitlog"):
                if hasattr(self, part):
                    getattr(self, part).close()
            os.close(self._lock_fd)
            raise

    def _open(self) -> None:
        self._closed = False
        self._dispatched = threading.Condition()
        self.reads_waited_for_index = 0  # reads that found what they asked for stored but not indexed yet
        self._arrival_listeners = ()
        self._admin_lock = threading.Lock()  # topic creation and deletion, and index flushes
        self.topics = TopicTable(self.paths.topics, self.paths.topics_journal)
        self.disk = DiskGuard(self.data_dir, self.config.disk_reserve_bytes)
        self.commitlog = CommitLog(self.paths.commitlog, self.config, self.now_ms, self.disk)
        self.queues = ConsumeQueueTable(self.data_dir, self.config)
        self.queues.load(self.topics.all())
        limit = (lambda: self.commitlog.flushed_offset) if self._sync else (lambda: self.commitlog.max_offset)
        self.dispatcher = self._make_dispatcher(limit)
        self.producers = ProducerState()
        abort = self.paths.abort
        self.corruption = CorruptionReport(self.paths.corrupted)
        self.recovery: RecoveryReport = recover(
            self.commitlog, self.queues, self.dispatcher, Checkpoint.load(self.paths.checkpoint),
            load_queue_table(self.paths.queue_table), self.topics, clean=not abort.exists(),
            producers=self.producers, corruption=self.corruption,
        )
        self._verified = VerifiedRecords(self.recovery.scanned_from, self.commitlog.damaged)
        self._index_flushed = 0
        self._opened_at = time.monotonic()
        self._flush_indexes(thorough=True)
        abort.touch()
        fsync_dir(self.data_dir)
        self.dispatcher.start()
        self._out_of_space = False  # said once until a flush succeeds again
        self._next_index_flush, self._next_thorough_flush = 0.0, self.config.index_flush_thorough_interval_ms / 1000
        self._flusher = ServiceThread("rmq-flusher", self.config.flush_interval_ms / 1000, self._flush_once,
                                      task="flush")
        self._flusher.start()

    def _make_dispatcher(self, limit: Callable[[], int]) -> Dispatcher:
        config = self.config
        if config.dispatch_mode is DispatchMode.CONCURRENT:
            return ConcurrentDispatcher(self.commitlog, self.queues, self.topics, limit, self._notify_dispatched,
                                        workers=config.dispatch_workers, pool=config.dispatch_pool,
                                        chunk_bytes=config.dispatch_chunk_bytes, ring_slots=config.dispatch_ring_slots)
        return Dispatcher(self.commitlog, self.queues, self.topics, limit, self._notify_dispatched)

    @property
    def _sync(self) -> bool:
        return self.config.flush_mode is FlushMode.SYNC

    # --- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int, queue_type=QueueType.SIMPLE_CQ) -> tuple[CreateStatus, str]:
        """Create a topic; returns (status, a sentence saying what was wrong, if anything).

        The topic records the commitlog's end as its creation offset: records below it belong
        to an earlier topic of the same name and are never indexed into this one."""
        with self._admin_lock:
            if self.topics.get(name) is None and topic_name_problem(name) is None:
                self.queues.remove_files(name)  # left by a deletion that a crash cut short
            return self.topics.create(name, queue_count, queue_type, created_at_offset=self.commitlog.max_offset)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic and its index files; False when there is no such topic.

        Its records stay in the commitlog until their segments are deleted, but are never
        served again: a topic created later with the same name starts empty, at offset 0,
        also after recovery re-dispatches the log."""
        with self._admin_lock:
            if self.topics.get(name) is None:
                return False
            with self.dispatcher.lock:  # no unit of the topic is being written
                with self.commitlog.appends_paused():  # writers that checked the topic are refused
                    self.topics.delete(name)
                    self.commitlog.forget_queues(name)
                self.queues.remove(name)
            saved = load_queue_table(self.paths.queue_table)
            kept = [entry for entry in saved if entry[0] != name]
            if len(kept) != len(saved):
                save_queue_table(self.paths.queue_table, kept)
            return True

    def topic(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            raise UnknownTopicError(_unknown_topic(name, self.topics))
        return config

    def find_topic(self, name: str) -> TopicConfig | None:
        """The topic's config, None when there is no such topic. A topic deleted (and maybe
        created again) is another config object: callers compare with ``is``."""
        return self.topics.get(name)

    def all_topics(self) -> list[TopicConfig]:
        """Every topic, by name."""
        return self.topics.all()

    # --- writing ---------------------------------------------------------------------------

    def put_message(self, topic: str, queue_id: int, body: bytes, *, properties: dict | None = None,
                    flag: int = 0, sys_flag: int = 0, context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store one message.

        A put with a producer stamp in its ``context`` is idempotent: a stamp stored before gets
        its first answer back (``duplicate`` set) and nothing is stored (see ``producer_state``)."""
        return self._put(self.build_message(topic, queue_id, body, properties=properties, flag=flag,
                                            sys_flag=sys_flag, context=context), context)

    def put_early_batch(self, topic: str, queue_id: int, payload: bytes, *,
                        context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store a client batch (RocketMQ's MessageBatch encoding) as one record per message,
        with consecutive offsets."""
        return self._put(self.build_early_batch(topic, queue_id, payload, context=context), context)

    def put_inner_batch(self, topic: str, queue_id: int, batch: InnerBatch, *,
                        context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store a batch of messages as ONE record (INNER_BATCH | NEED_UNWRAP) on a BatchCQ
        topic. The payload is stored as it is: its codec and compression are recorded, and it
        is checked by ``payload_check`` unless the context says it was stored before."""
        return self._put(self.build_inner_batch(topic, queue_id, batch, context=context), context)

    def put_records(self, topic: str, queue_id: int, records: list[PendingRecord], *, flush: bool = True) -> PutResult:
        """Append records built earlier by a ``build_*`` call (kept aside meanwhile, as prepared
        transaction batches are), checked again against the topic as it is now. ``flush`` False:
        not flushed even with --flush sync (the caller calls ``flush_log`` once for many)."""
        config, failed = self._check_queue(topic, queue_id)
        if not failed and config.queue_type is not QueueType.BATCH_CQ and any(
                r.sys_flag & fmt.SysFlag.INNER_BATCH for r in records):
            failed = _wrong_queue_type(topic)
        return failed or self._append(config, queue_id, records, flush=flush)

    # The build_* calls check a message as its put_* call does and return the records that
    # put_records appends, or the failed PutResult.

    def build_message(self, topic: str, queue_id: int, body: bytes, *, properties: dict | None = None,
                      flag: int = 0, sys_flag: int = 0,
                      context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        """``sys_flag``: the client's SYSFLAG bits of a single message (a compressed body, multi
        tags), kept so that RocketMQ's clients read it back as they sent it."""
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(body))
        if failed:
            return failed
        props = fmt.encode_properties(properties)
        record = PendingRecord(body, fmt.body_crc(body), props, self._born(context), context.born_host, flag,
                               sys_flag & fmt.CLIENT_SYS_FLAGS, reconsume_times=context.reconsume_times)
        return self._checked(config, queue_id, [record])

    def build_early_batch(self, topic: str, queue_id: int, payload: bytes, *,
                          context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(payload), what="batch")
        if failed:
            return failed
        if topic.startswith(fmt.RETRY_TOPIC_PREFIX):
            return _illegal(f"topic {topic!r} is a retry topic: batches cannot be sent to retry topics; send "
                            "its messages one by one")
        born = self._born(context)
        records = []
        wait_values = set()
        try:
            for index, (flag, body, props) in enumerate(fmt.iter_message_batch(payload, len(payload))):
                problem = _early_batch_problem(props, wait_values)
                if problem:
                    return _illegal(f"message {index} of the batch {problem}")
                records.append(PendingRecord(body, fmt.body_crc(body), props, born, context.born_host, flag))
        except fmt.BatchFormatError as err:
            return _illegal(f"malformed batch payload: {err}")
        return self._checked(config, queue_id, records)

    def build_inner_batch(self, topic: str, queue_id: int, batch: InnerBatch, *,
                          context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        payload, count, codec = batch.payload, batch.count, batch.codec
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(payload), what="batch")
        if failed:
            return failed
        if config.queue_type is not QueueType.BATCH_CQ:
            return _wrong_queue_type(topic)
        if not isinstance(count, int) or not 1 <= count <= self.config.max_batch_messages:
            return _illegal(f"batch count {count!r}: use 1 to {self.config.max_batch_messages}")
        if codec not in fmt.BATCH_CODECS:
            return _illegal(f"unknown batch codec {echo(codec)}; use one of: {', '.join(fmt.BATCH_CODECS)}")
        try:
            compression = fmt.Compression.parse(batch.compression)
        except ValueError as err:
            return _illegal(str(err))
        if not payload:
            return _illegal("the batch payload is empty")
        if self.payload_check is not None and not context.stored_before:
            try:
                self.payload_check(payload, codec, compression, count)
            except ValueError as err:
                return _illegal(f"the inner batch payload ({codec}, {compression.name.lower()}) does not decode, "
                                f"nothing was stored: {err}. Encode it with the codec and compression the request "
                                "names, and give its message count")
        props = fmt.encode_properties({**(batch.properties or {}), fmt.PROPERTY_INNER_NUM: count,
                                       fmt.PROPERTY_BATCH_CODEC: codec})
        sys_flag = fmt.SysFlag.INNER_BATCH | fmt.SysFlag.NEED_UNWRAP | compression.sys_flag()
        record = PendingRecord(payload, fmt.body_crc(payload), props, self._born(context), context.born_host,
                               batch.flag, sys_flag, count, context.reconsume_times)
        return self._checked(config, queue_id, [record])

    def _checked(self, config: TopicConfig, queue_id: int, records: list[PendingRecord]) -> "QueueRecords | PutResult":
        return self._check_sizes(config, records) or QueueRecords(config, queue_id, records)

    def _put(self, built: "QueueRecords | PutResult", context: PutContext) -> PutResult:
        if isinstance(built, PutResult):
            return built
        return self._append(built.config, built.queue_id, built.records, context.producer)

    def _append(self, config: TopicConfig, queue_id: int, records: list[PendingRecord],
                producer: tuple[str, int] | None = None, flush: bool = True) -> PutResult:
        if producer is not None:
            problem = stamp_problem(*producer)
            if problem:
                return _illegal(problem)
            first = records[0]
            stamped = first.properties + stamp_property(*producer, len(records))
            records[0] = dataclasses.replace(first, properties=stamped)
        failed = self._check_sizes(config, records)
        if failed:
            return failed
        if producer is None:
            return self._store(config, queue_id, records, flush)
        known = self.producers.begin(*producer)
        if known is not None:
            return known
        result = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store failed while storing the message")
        try:
            result = self._store(config, queue_id, records)
            return result
        finally:
            self.producers.end(*producer, result)

    def _check_sizes(self, config: TopicConfig, records: list[PendingRecord]) -> PutResult | None:
        topic = config.name
        topic_len = len(topic.encode())
        for index, record in enumerate(records):
            # The log adds INNER_BASE to inner batches and the CRC property to every record.
            store_own = _INNER_BASE_RESERVED if record.sys_flag & fmt.SysFlag.INNER_BATCH else 0
            props_len = len(record.properties) + fmt.CRC_RESERVED_BYTES + store_own
            if props_len > fmt.MAX_PROPERTIES_BYTES:
                return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                 f"message {index}: properties take {props_len} bytes with the store's own; "
                                 f"the limit is {fmt.MAX_PROPERTIES_BYTES}")
            total = fmt.record_size(len(record.body), topic_len, len(record.properties) + store_own)
            if not self.commitlog.record_fits_segment(total):
                return PutResult(PutStatus.MESSAGE_TOO_LARGE,
                                 f"message {index}: a record of {total} bytes does not fit a commitlog segment of "
                                 f"{self.config.segment_bytes} bytes; raise segment_bytes or send less")
        return None

    def _store(self, config: TopicConfig, queue_id: int, records: list[PendingRecord],
               flush: bool = True) -> PutResult:
        topic = config.name
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed")
        if self.disk.failure:
            return PutResult(PutStatus.DISK_FAILED, self.disk.failure)
        try:
            appended = self.commitlog.append(topic, queue_id, records, lambda: self.topics.get(topic) is config)
        except DiskFullError as err:
            return PutResult(PutStatus.DISK_FULL, err.message)
        except OSError as err:  # the append was undone, but the disk cannot be trusted any more
            return PutResult(PutStatus.DISK_FAILED, str(self.disk.fail("a write", err)))
        if appended is None:
            return PutResult(PutStatus.TOPIC_NOT_FOUND, f"topic {topic!r} was deleted while the message was being "
                             f"stored; nothing was stored. {_unknown_topic(topic, self.topics)}")
        if self._sync and flush:
            try:
                self.commitlog.flush(until=appended.end_offset)
            except DiskFailedError as err:
                return PutResult(PutStatus.DISK_FAILED, f"{err}. The message was written but may not be on disk: "
                                 "after the restart it is there or not; an idempotent send is stored once")
        self.dispatcher.wake()
        count = sum(r.count for r in records)
        return PutResult(PutStatus.PUT_OK, "", queue_id, appended.queue_offset, count, appended.physical_offsets,
                         appended.store_timestamp)

    def _check_queue(self, topic: str, queue_id: int) -> tuple[TopicConfig | None, PutResult | None]:
        """The topic's config, and a failed result when the topic or queue does not exist."""
        config = self.topics.get(topic)
        if config is None:
            return None, PutResult(PutStatus.TOPIC_NOT_FOUND, _unknown_topic(topic, self.topics))
        if not isinstance(queue_id, int) or not 0 <= queue_id < config.queue_count:
            return config, PutResult(PutStatus.QUEUE_NOT_FOUND, f"topic {topic!r} has queues 0 to "
                                     f"{config.queue_count - 1}; there is no queue {queue_id!r}")
        return config, None

    def _check_body(self, size: int, what: str = "message body") -> PutResult | None:
        if size > self.config.max_message_bytes:
            return PutResult(PutStatus.MESSAGE_TOO_LARGE, f"the {what} is {size} bytes; the largest accepted is "
                             f"{self.config.max_message_bytes} bytes (max_message_bytes): split it")
        return None

    def _born(self, context: PutContext) -> int:
        return self.now_ms() if context.born_timestamp_ms is None else context.born_timestamp_ms

    # --- reading ---------------------------------------------------------------------------

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
                or self.topics.get(topic) is not config or self.dispatcher.stalled

        self.dispatcher.wake()
        with self._dispatched:
            self.reads_waited_for_index += 1
            if not self._dispatched.wait_for(indexed, self.config.index_wait_ms / 1000):
                log.warning("a read of topic %r queue %d waited %d ms (index_wait_ms) for offsets below %d, stored "
                            "but not indexed yet, and goes on with what is indexed: the dispatcher is %d bytes "
                            "behind", topic, queue_id, self.config.index_wait_ms, wanted,
                            self.commitlog.max_offset - self.dispatcher.position)
        return self.queues.find(topic, queue_id)

    def _existing_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue's index (None while it is empty); raises for an unknown topic or queue."""
        config = self.topic(topic)
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

    # --- flushing and closing --------------------------------------------------------------

    def flush(self) -> None:
        """Put everything appended and indexed so far on disk, and checkpoint it."""
        self.commitlog.flush()
        self._flush_indexes(thorough=True)

    def flush_log(self) -> None:
        """Put everything appended so far on disk (the indexes can be rebuilt from it)."""
        self.commitlog.flush()

    def _flush_indexes(self, thorough: bool) -> None:
        """Flush index files and save the checkpoint. Only a thorough flush (every index file)
        moves the checkpoint's index position, from which recovery re-dispatches."""
        with self._admin_lock:  # a topic's indexes are not deleted under the flush
            self.disk.check_healthy()  # a checkpoint after a failed flush could claim lost data
            indexed = self.dispatcher.position  # read before flushing: units up to it are written
            try:
                self.queues.flush(least_bytes=0 if thorough else self.config.index_flush_least_bytes)
            except OSError as err:
                raise self.disk.fail("to flush an index file", err) from err
            if thorough:
                save_queue_table(self.paths.queue_table, [(topic, queue_id, queue.max_offset, queue.indexed_end)
                                                          for (topic, queue_id), queue in self.queues.all()])
                self._index_flushed = min(indexed, self.commitlog.flushed_offset)
            Checkpoint(self.commitlog.flushed_offset, self._index_flushed, self.now_ms()).save(self.paths.checkpoint)

    def _flush_once(self) -> None:
        config = self.config
        try:
            if not self._sync:
                self.commitlog.flush()
            self.commitlog.release_mapped_pages()
            now = time.monotonic() - self._opened_at
            if now >= self._next_index_flush:
                thorough = now >= self._next_thorough_flush
                self._flush_indexes(thorough)
                self._next_index_flush = now + config.index_flush_interval_ms / 1000
                if thorough:
                    self._next_thorough_flush = now + config.index_flush_thorough_interval_ms / 1000
        except DiskFailedError:
            self._flusher.stop()  # said once, by the guard: nothing is flushed again until a restart
            return
        except (DiskFullError, OSError) as err:
            if not self._out_of_space:
                log.warning("cannot write the checkpoint or the indexes (%s); retrying every %d ms", err,
                            config.flush_interval_ms)
            self._out_of_space = True
            return
        self._out_of_space = False

    def close(self) -> None:
        """Stop cleanly: flush, index everything, checkpoint, and remove the abort marker."""
        if self._closed:
            return
        self._closed = True
        self._flusher.stop()
        self.dispatcher.stop()
        try:
            self._last_flush()
        finally:
            self.dispatcher.close()
            self.queues.close()
            self.commitlog.close()
            self.topics.close()
            os.close(self._lock_fd)

    def _last_flush(self) -> None:
        """Flush, index and checkpoint everything, and mark the stop clean; after a disk
        failure or with no room for the indexes, the abort marker stays: the next start recovers."""
        try:
            self.commitlog.flush()
            self.dispatcher.dispatch()
            self._flush_indexes(thorough=True)
        except (DiskFailedError, DiskFullError, OSError) as err:  # OSError: no room for the queue table
            log.error("the store stops without a clean flush, and recovers at its next start: %s", err)
            return
        self.paths.abort.unlink(missing_ok=True)
        fsync_dir(self.data_dir)

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _lock_data_dir(paths: StorePaths) -> int:
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUseError(f"data directory {paths.root} is in use by another broker; stop it or use "
                                "another --data-dir") from None
    return fd


def _unknown_topic(name: str, topics: TopicTable) -> str:
    names = [t.name for t in topics.all()]
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"topic {echo(name)} does not exist; existing topics: {shown or 'none'}. Create it first"


def _illegal(detail: str) -> PutResult:
    return PutResult(PutStatus.MESSAGE_ILLEGAL, detail)


def _wrong_queue_type(topic: str) -> PutResult:
    return PutResult(PutStatus.WRONG_QUEUE_TYPE, f"topic {topic!r} is a SimpleCQ topic: inner batches need a BatchCQ "
                     "topic; send an early batch instead, or create the topic with type BatchCQ")


_DELAY_KEYS = tuple(k.encode() for k in (fmt.PROPERTY_DELAY_TIME_LEVEL, *fmt.PROPERTY_TIMER_PROPERTIES))
_TRANSACTION_KEY = fmt.PROPERTY_TRANSACTION_PREPARED.encode()
_WAIT_KEY = fmt.PROPERTY_WAIT_STORE_MSG_OK.encode()
_PRODUCER_KEY = fmt.PROPERTY_PRODUCER.encode()


def _early_batch_problem(properties: bytes, wait_values: set) -> str | None:
    """Why a message cannot travel in an early batch (RocketMQ's rules), or None."""
    # Substring tests first: they are cheap, and most messages have none of these names.
    if any(key in properties and fmt.find_property(properties, key) is not None for key in _DELAY_KEYS):
        return "is delayed: delayed messages cannot be batched; send it alone"
    if _TRANSACTION_KEY in properties and fmt.find_property(properties, _TRANSACTION_KEY) == b"true":
        return "is transactional: transactional messages cannot be batched; send it alone"
    if _PRODUCER_KEY in properties and fmt.find_property(properties, _PRODUCER_KEY) is not None:
        return f"sets {fmt.PROPERTY_PRODUCER}, which is reserved for the store: stamp the send instead"
    wait_values.add(_WAIT_KEY in properties and fmt.find_property(properties, _WAIT_KEY) or b"true")
    if len(wait_values) > 1:
        return "has another waitStoreMsgOK (WAIT) than the messages before it: a batch needs one value"
    if len(properties) + fmt.CRC_RESERVED_BYTES > fmt.MAX_PROPERTIES_BYTES:
        return f"has {len(properties)} bytes of properties; the limit is {fmt.MAX_PROPERTIES_BYTES}"
    return None
