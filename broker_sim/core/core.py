"""BrokerCore: the broker's one domain object, the only door of every front end.

Each door (our gRPC contract in doors/contract/, RocketMQ's remoting protocol, RocketMQ 5's gRPC)
translates its requests into these calls and their answers and ``BrokerFault``s back; what
RocketMQ means by a topic, a send, a message id, a tag filter, an offset, a pop or a
transaction is decided here and below (store/, pop/, txn/), never in a door.

Every call passes the core's ``CallGate``: once the broker is stopping, new calls are refused
(SERVICE_NOT_AVAILABLE), and the store is closed only after the calls inside have left it.
Calls that hand out stored records as they are (range reads, pops) take a ``consume``
function, run inside the gate: the records are views of the store's files, valid only there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker_sim.core import sends
from broker_sim.core.errors import STOPPING, BrokerFault, Reason, bad_range, from_create, from_put, invalid, refused
from broker_sim.core.groups import GroupTable, LiveConsumers
from broker_sim.core.limits import ClientLimits, GroupQuota, MemoryBudget, TopicQuota
from broker_sim.core.metrics import NO_METRICS, NoMetrics, gauge
from broker_sim.core.reads import OffsetRange, RangeCursor, ReadBudget
from broker_sim.pop import PopConfig, PopService, ReviveService, retry_topic
from broker_sim.pop.state import decode_key
from broker_sim.schedule import ScheduleService
from broker_sim.store import (
    DEFAULT_FLUSH_INTERVAL_MS,
    ConsumerOffsetTable,
    CreateStatus,
    FlushMode,
    MessageStore,
    PutStatus,
    QueueType,
    StateMarks,
    StoreConfig,
    TagFilter,
    TopicConfig,
    echo,
    perm_problem,
    system_topic_problem,
    wall_clock_ms,
)
from broker_sim.txn import EndResult, TransactionConfig, TransactionService
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

QUERY_SCAN_BYTES = 256 << 20  # what a query by key reads at most (no key index: it scans)
MAX_OFFSETS_QUEUES = 16384  # queues per page of offsets, at most (a larger topic travels alone)
_GROUP_NAME = re.compile(r"^[%|+a-zA-Z0-9_-]{1,255}$")  # RocketMQ's group characters
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class CallGate:
    """Counts the calls inside the core; ``close`` refuses new ones and waits for those inside."""

    def __init__(self):
        self._cond = threading.Condition()
        self._inside = 0
        self._closed = False

    def __enter__(self) -> None:
        with self._cond:
            if self._closed:
                raise refused(Reason.SERVICE_NOT_AVAILABLE, STOPPING)
            self._inside += 1

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._inside -= 1
            if not self._inside:
                self._cond.notify_all()

    def close(self, timeout_s: float) -> bool:
        """Refuse new calls; True once none is inside, False if some still are after the timeout."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._inside == 0, timeout_s)


class Counters:
    """Messages put and read since start, and the stream responses waiting for their client now."""

    def __init__(self):
        self._lock = threading.Lock()
        self.messages_put = 0
        self.messages_read = 0
        self.responses_waiting = 0

    def add(self, put: int = 0, read: int = 0, waiting: int = 0) -> None:
        with self._lock:
            self.messages_put += put
            self.messages_read += read
            self.responses_waiting += waiting


@dataclass(frozen=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class BrokerSnapshot:
    """The broker's positions, counters and health as the core sees them, every corrupted
    record included (the store's ``CorruptedRecord``). Doors answer from it: our contract's
    BrokerStats call (the count and the first ``CORRUPTED_LISTED``), which the SDK reads into
    its own answer type, ``rmq_spark.BrokerStats``."""

    topics: int
    queues: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    dispatched_offset: int
    dispatch_lag_bytes: int
    dispatch_lag_ms: int
    messages_put: int
    messages_read: int
    resident_memory_bytes: int
    data_dir: str
    flush_mode: str
    corrupted: list  # CorruptedRecord, all of them
    disk_failure: str


@dataclass(frozen=True)
class AutoCreateTopics:
    """RocketMQ's autoCreateTopicEnable: a send to a topic that does not exist creates it, with
    ``queue_count`` queues (RocketMQ's defaultTopicQueueNums; fewer when the producer asks, as
    RocketMQ's producers ask for 4) of ``queue_type``. The broker keeps the topic TBW102 with
    these settings, whose route stands for a new topic's until it exists, as RocketMQ's does;
    ACLs decide who may send, and so create (PUB on the topic); the per-client limits count what
    a send creates."""

    queue_count: int = 8
    queue_type: QueueType = QueueType.BATCH_CQ


AUTO_CREATE_TOPICS = AutoCreateTopics()  # the broker's default, as RocketMQ 5's: sends create topics


@dataclass(frozen=True)
class CoreOptions:
    """How the core's parts are set up; clocks are injected by tests."""

    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    offsets_flush_interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS
    transactions: TransactionConfig | None = None
    transaction_clock_ms: Callable[[], int] = wall_clock_ms
    pop: PopConfig | None = None
    pop_now_ms: Callable[[], int] = wall_clock_ms
    payload_check: Callable | None = None  # MessageStore's payload_check
    schedule_now_ms: Callable[[], int] = wall_clock_ms
    limits: ClientLimits = dataclasses.field(default_factory=ClientLimits)  # topics and queues created
    accept_state_loss: bool = False  # start on lost or damaged state, logging the loss (store/state_marks.py)
    metrics: NoMetrics = NO_METRICS  # BrokerMetrics where a metrics port serves them
    auto_create_topics: AutoCreateTopics | None = AUTO_CREATE_TOPICS  # None: sends create no topic


class BrokerCore:
    """The store, the consumer offsets, transactions and pop of one data directory, opened
    together by ``open`` (recovery runs there) and closed together by ``close``."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable, transactions: TransactionService,
                 pop: PopService, revive: ReviveService, schedule: ScheduleService, groups: GroupTable,
                 limits: ClientLimits | None = None, metrics: NoMetrics = NO_METRICS,
                 auto_create: AutoCreateTopics | None = None):
        self.store = store
        self.auto_create = auto_create
        self.metrics = metrics
        self.limits = limits or ClientLimits()
        self.quota = TopicQuota(self.limits, store)
        self.group_quota = GroupQuota(self.limits)
        self.memory = MemoryBudget.of(self.limits)  # what every door buffers for clients
        self.groups = groups
        self.consumers = LiveConsumers()  # told by the doors (heartbeats) and by pops
        self.schedule = schedule
        self.offsets = offsets
        self.transactions = transactions
        self.pop_service = pop
        self._revive = revive
        self.gate = CallGate()
        self._marks: StateMarks | None = None  # state.json, saved once the parts are closed (set by open)
        self.counters = Counters()
        # With --flush sync an append waits for its flush: doors run it where waiting is cheap.
        self.appends_wait_for_flush = store.config.flush_mode is FlushMode.SYNC
        self.pop_waits_for_disk = pop.config.sync_writes  # each pop state write is synced
        metrics.watch(self.gauges)

    @classmethod
    def open(cls, data_dir, options: CoreOptions) -> "BrokerCore":
        """Open every part on ``data_dir``; what was opened is closed again when a later part fails."""
        data_dir = Path(data_dir)
        with contextlib.ExitStack() as opened:
            store = MessageStore(data_dir, options.store, payload_check=options.payload_check)
            opened.callback(store.close)
            marks = StateMarks(store.paths, options.accept_state_loss)  # lost state is refused, not started on
            offsets = ConsumerOffsetTable(store.paths.consumer_offsets,
                                          options.offsets_flush_interval_ms, marks)
            opened.callback(offsets.close)
            forgotten = offsets.keep_topics({topic.name for topic in store.all_topics()})
            if forgotten:
                log.warning("forgot %d group offsets of topics deleted before the last stop", forgotten)
            # completes commits a crash interrupted
            transactions = TransactionService(store, store.paths, options.transactions,
                                              now_ms=options.transaction_clock_ms, marks=marks)
            transactions.max_sinks_per_owner = options.limits.max_sinks_per_account
            opened.callback(transactions.close)
            pop_config = options.pop or PopConfig(sync_writes=options.store.flush_mode is FlushMode.SYNC)
            pop = PopService.open(data_dir, store, offsets, pop_config, marks, now_ms=options.pop_now_ms)
            opened.callback(pop.close)
            revive = ReviveService(pop)
            revive.start()
            opened.callback(revive.stop)
            schedule = ScheduleService(store, store.paths, now_ms=options.schedule_now_ms)
            schedule.start()
            groups = GroupTable(store.paths.subscription_groups)
            _keep_auto_create_topic(store, options.auto_create_topics)
            marks.save()  # the generations the databases' opens bumped
            opened.pop_all()
        core = cls(store, offsets, transactions, pop, revive, schedule, groups, options.limits, options.metrics,
                   options.auto_create_topics)
        core._marks = marks
        return core

    def stop_waiting(self) -> None:
        """Long-polling pops answer now (the broker is stopping)."""
        self.pop_service.stop_waiting()

    def close(self, drain_timeout_s: float) -> None:
        """Refuse new calls, wait up to ``drain_timeout_s`` for those inside, and close every
        part, each even when one before it fails (a failed disk): what could not be written is
        recovered at the next start."""
        if not self.gate.close(drain_timeout_s):
            log.warning("calls still inside the store after %.0f s; closing it anyway", drain_timeout_s)
        try:
            for name, close in (("delayed messages", self.schedule.close), ("pop revive", self._revive.stop),
                                ("pop", self.pop_service.close),
                                ("transactions", self.transactions.close), ("offsets", self.offsets.close),
                                ("state marks", self._marks.save if self._marks is not None else _nothing)):
                try:
                    close()
                except Exception:
                    log.exception("closing %s failed; it recovers at the next start", name)
        finally:
            self.store.close()

    # --- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType,
                     client: str = "", perm: int = 0) -> tuple[TopicConfig, bool]:
        """The topic, and whether this call created it (False: it existed, the same). ``client``
        (limits.client_key) is who asks: its topics and queues created are limited. ``perm``
        (RocketMQ's PermName bits: 4 read, 2 write, 6 both): the new topic's, 0 for both; a
        topic that exists is the same whatever its perm when ``perm`` is 0."""
        if not name:
            raise invalid("the topic name is empty; name the topic")
        _check_not_system(name, "create")
        with self.gate:
            status, detail = self.quota.create(client, name, queue_count, queue_type,
                                               lambda: self.store.create_topic(name, queue_count, queue_type, perm))
            if status not in (CreateStatus.CREATED, CreateStatus.ALREADY_EXISTS):
                raise from_create(status, detail)
            return self.topic(name), status is CreateStatus.CREATED

    def update_topic(self, name: str, queue_count: int = 0, perm: int = 0, client: str = "") -> TopicConfig:
        """Change a topic's queue count and perm (0: as it is), as RocketMQ's updateTopic: more
        queues add queues (counted as created by ``client``, as ``create_topic`` counts them);
        fewer leave the queues past the count unserved, out of routes, sends and reads, their
        messages and offsets kept and served again if the count grows back; perm 4 refuses
        sends, 2 reads. The topic as it is now."""
        if not name:
            raise invalid("the topic name is empty; name the topic to update")
        _check_not_system(name, "update")
        if queue_count < 0:
            raise invalid(f"queue count {queue_count} is negative: give the queues the topic is to have, or 0 to "
                          "keep its count")
        if perm and perm_problem(perm):
            raise invalid(perm_problem(perm) + ", or 0 to keep the topic's")
        with self.gate:
            before = self.topic(name)
            config, detail = self.quota.update(client, name, queue_count,
                                               lambda: self.store.update_topic(name, queue_count, perm))
            if config is None:
                raise self._topic_not_found(name) if self.store.find_topic(name) is None else invalid(detail)
        if (config.queue_count, config.perm) != (before.queue_count, before.perm):
            log.info("topic %s updated: %d -> %d queues, perm %d -> %d%s", echo(name), before.queue_count,
                     config.queue_count, before.perm, config.perm,
                     f" ({config.stored_queues - config.queue_count} queues kept out of service)"
                     if config.stored_queues > config.queue_count else "",
                     extra={"topic": name, "client": client or None})
        return config

    def sending_topic(self, name: str, client: str = "", new_topic_queues: int = 0) -> TopicConfig:
        """The topic a send goes to; where sends create topics (``auto_create``) and it does not
        exist, created first, with ``new_topic_queues`` queues at most when the sender asks."""
        config = self.store.find_topic(name) if name else None
        if config is not None or self.auto_create is None or not name or system_topic_problem(name, "create"):
            return config if config is not None else self.topic(name)
        queues = self.auto_create.queue_count
        if new_topic_queues > 0:
            queues = min(queues, new_topic_queues)
        config, created = self.create_topic(name, queues, self.auto_create.queue_type, client)
        if created:
            log.info("topic %s created by a first send: %d queues, %s (autoCreateTopicEnable)", echo(name), queues,
                     self.auto_create.queue_type.value, extra={"topic": name, "client": client or None})
        return config

    def delete_topic(self, name: str, group_topics: bool = False) -> bool:
        """Delete a topic with its group offsets and pop state; False when there is no such topic.
        A consumer group's retry and dead-letter topics (``%RETRY%``, ``%DLQ%``), which the
        broker makes, are refused unless ``group_topics``: RocketMQ's admins may delete them
        (mqadmin deleteTopic, deleteSubGroup -c), and a group's next retry makes its topic again."""
        if not name:
            raise invalid("the topic name is empty; name the topic to delete")
        if not (group_topics and name.startswith((fmt.RETRY_TOPIC_PREFIX, fmt.DLQ_TOPIC_PREFIX))):
            _check_not_system(name, "delete")
        with self.gate:
            return self._delete_topic(name)

    def _delete_topic(self, name: str) -> bool:
        deleted = self.store.delete_topic(name)
        if deleted:
            self.quota.forget(name)
            self.metrics.forget_topic(name)
            self.offsets.remove_topic(name)
            self.pop_service.forget_topic(name)
        return deleted

    def topic(self, name: str) -> TopicConfig:
        """The topic's config; TOPIC_NOT_FOUND naming the topics that exist."""
        if not name:
            raise invalid("the topic name is empty; name the topic")
        config = self.store.find_topic(name)
        if config is None:
            raise self._topic_not_found(name)
        return config

    def find_topic(self, name: str) -> TopicConfig | None:
        """The topic's config, None when there is none (no sentence made: a route table asks often)."""
        return self.store.find_topic(name)

    # --- what doors that hold requests for messages ask, never waiting ------------------------

    def indexed_offset(self, topic: str, queue_id: int) -> int:
        """The queue's indexed end, never waiting for the dispatcher (an event loop asks);
        LookupError when the queue is gone."""
        return self.store.indexed_offset(topic, queue_id)

    def add_arrival_listener(self, listener) -> None:
        """Call ``listener()`` (on the dispatcher's thread: it must return at once) whenever newly
        indexed messages become readable."""
        self.store.add_arrival_listener(listener)

    @property
    def max_message_bytes(self) -> int:
        return self.store.config.max_message_bytes

    @property
    def store_host_bytes(self) -> bytes:
        """The broker's address as its records store it (what RocketMQ's message ids begin with)."""
        return self.store.config.store_host_bytes

    def describe_topic(self, name: str, wait_for_index: bool = False) -> tuple[TopicConfig, list[QueueOffsets]]:
        """The topic and its queues' offsets: the indexed ends (``queue_offsets``), or with
        ``wait_for_index`` everything stored before the call (an offset query: read-your-writes)."""
        with self.gate:
            config = self.topic(name)
            return config, self.queue_offsets_of(config, wait_for_index)

    def list_topics(self) -> list[TopicConfig]:
        with self.gate:
            return self.store.all_topics()

    def offsets_page(self, names: list[str], after: str | int, max_queues: int):
        """Topics with the offsets of their queues, a page of at most ``max_queues`` queues (0:
        the core's cap; a topic is never split). ``names`` empty: every topic, from the name
        ``after`` on; otherwise those topics, from index ``after``. Returns the page and where
        the next one starts (None: this was the last)."""
        if max_queues < 0:
            raise invalid(f"max_queues {max_queues} is negative: give the queues per answer, or 0 for the "
                          f"broker's cap of {MAX_OFFSETS_QUEUES}")
        limit = min(max_queues or MAX_OFFSETS_QUEUES, MAX_OFFSETS_QUEUES)
        with self.gate:
            if names:
                first = after
                configs = (self.topic(name) for name in names[first:])
            else:  # topics made or deleted meanwhile do not matter
                first = 0
                configs = (c for c in self.store.all_topics() if c.name >= after)
            page, queues = [], 0
            for index, config in enumerate(configs, first):
                if page and queues + config.queue_count > limit:
                    return page, (index if names else config.name)
                page.append((config, self.queue_offsets_of(config)))
                queues += config.queue_count
            return page, None

    def queue_offsets_of(self, config: TopicConfig, wait_for_index: bool = True) -> list[QueueOffsets]:
        return [QueueOffsets(q, *self.queue_offsets(config, q, wait_for_index)) for q in range(config.queue_count)]

    def queue_offsets(self, config: TopicConfig, queue_id: int, wait_for_index: bool = True) -> tuple[int, int]:
        """(min offset, max offset) of a queue; TOPIC_NOT_FOUND when deleted in the meantime.
        The max offset counts what was stored before the call (read-your-writes: GetOffsets, what
        reads plan from), or with ``wait_for_index`` False the indexed end, never waiting: a
        topic's description, which producers route by and sinks check topics with, must not
        wait for the dispatcher."""
        end = self.store.max_offset if wait_for_index else self.store.indexed_offset
        try:
            return self.store.min_offset(config.name, queue_id), end(config.name, queue_id)
        except LookupError:
            raise self._topic_not_found(config.name) from None

    def offsets_for_timestamp(self, topic: str, queue_ids: list[int], timestamp_ms: int) -> list[tuple[int, int]]:
        """(queue id, the first offset stored at or after ``timestamp_ms``) per queue (none given: all)."""
        if timestamp_ms < 0:
            raise invalid(f"timestamp_ms {timestamp_ms} is negative: give milliseconds since the epoch")
        with self.gate:
            config = self.topic(topic)
            queue_ids = list(queue_ids) or range(config.queue_count)
            for queue_id in queue_ids:
                _check_queue(config, queue_id)
            return [(q, self.store.offset_for_timestamp(config.name, q, timestamp_ms)) for q in queue_ids]

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """The store time of the queue's first message, -1 when it holds none."""
        with self.gate:
            config = self.topic(topic)
            _check_queue(config, queue_id)
            low, high = self.queue_offsets(config, queue_id)
            if high <= low:
                return -1
            result = self.store.get_messages(config.name, queue_id, low, low + 1, max_bytes=1)
            if not result.batches:
                return -1
            return fmt.HEADER.unpack_from(result.batches[0].data)[10]

    def reads_may_wait(self) -> bool:
        """Whether a read may wait now for the index to hold what was stored before it
        (read-your-writes: the store's dispatcher is behind its log). A door that runs reads
        on its event loop runs them in its pool then, so that the loop never waits."""
        return self.store.index_behind

    # --- sends -----------------------------------------------------------------------------

    def send(self, request: sends.SendRequest) -> sends.SendOutcome:
        """Store a send (prepared under its transaction, if it names one; held until its time,
        if it asks for a delay: the answer then gives the offset in the schedule queue, as
        RocketMQ's does); refusals raise."""
        sends.check_send(request)
        _check_writable(self.store.find_topic(request.topic))
        stored = self._delayed(request) if sends.asks_delay(request) else request
        with self.gate:
            # A prepared send is checked as a plain one, then kept aside by the transaction service.
            target = self.transactions.prepared(stored.transaction_id, stored.owner) if stored.transaction_id \
                else self.store
            result = sends.put(target, stored)
            if result.status is PutStatus.TOPIC_NOT_FOUND and self.auto_create is not None:
                self.sending_topic(stored.topic, stored.client, stored.new_topic_queues)  # or the refusal
                result = sends.put(target, stored)
        if not result.ok:
            raise from_put(result)
        if not result.duplicate:
            self.counters.add(put=result.count)
            self.metrics.took(request.topic, result.count, sends.content_bytes(request.content))
        ids = sends.message_ids(stored, result, self.store.config.store_host_bytes)
        if stored is not request:
            self.schedule.wake()
        return sends.SendOutcome(request.queue_id if stored is not request else result.queue_id, result.queue_offset,
                                 result.count, ids, result.store_timestamp, result.duplicate)

    def _delayed(self, request: sends.SendRequest) -> sends.SendRequest:
        """A delayed send as it is stored: into the schedule topic until its time (the request
        itself when its time has come already)."""
        if request.transaction_id or not isinstance(request.content, sends.SingleSend):
            raise invalid("a delay (DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) is for single messages: "
                          "batches and transactional messages cannot be delayed; send them without it")
        with self.gate:
            config = self.sending_topic(request.topic, request.client, request.new_topic_queues)  # checked now
            _check_queue(config, request.queue_id)
            try:
                diverted = self.schedule.divert(request.topic, request.queue_id, request.content.properties)
            except ValueError as bad:
                raise invalid(f"the message's delay: {bad}") from None
        if diverted is None:
            return request
        topic, queue_id, properties = diverted
        return dataclasses.replace(request, topic=topic, queue_id=queue_id,
                                   content=dataclasses.replace(request.content, properties=properties))

    # --- range reads -----------------------------------------------------------------------

    def open_ranges(self, ranges: list[OffsetRange], tag_filter: str, max_bytes: int) -> list[RangeCursor]:
        """Cursors over ``ranges`` (read in order, sharing ``max_bytes``), checked all before any
        is read; ``tag_filter`` "TagA || TagB" ("" or "*": all)."""
        if max_bytes <= 0:
            raise bad_range(f"max_bytes {max_bytes}: give a positive byte budget")
        tags = parse_tag_filter(tag_filter)
        budget = ReadBudget(max_bytes)
        with self.gate:
            return [self._cursor(i, r, tags, budget) for i, r in enumerate(ranges)]

    def _cursor(self, index: int, r: OffsetRange, tags, budget: ReadBudget) -> RangeCursor:
        config = self.topic(r.topic)
        _check_readable(config)
        _check_queue(config, r.queue_id)
        where = f"range {index} ({r.topic!r} queue {r.queue_id})"
        if r.start < 0:
            raise bad_range(f"{where}: start_offset {r.start} is negative; offsets start at 0")
        if r.end is not None and r.end < 0:
            raise bad_range(f"{where}: end_offset {r.end} is negative; give an exclusive end, or 0 for the queue's "
                            "max offset")
        if r.end is not None and r.end <= r.start:
            raise bad_range(f"{where}: end_offset {r.end} is not after start_offset {r.start}; the end is exclusive "
                            "(0: up to the max offset)")
        return RangeCursor(self, config, r.queue_id, r.start, r.end, tags, budget)

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int, max_bytes: int,
             tag_filter: TagFilter | None, consume: Callable, group: str = "") -> object:
        """RocketMQ's pull: whole stored records from ``offset`` until ``max_messages`` messages
        or ``max_bytes`` are reached (the first record always), passed through ``tag_filter``
        (parsed: see ``parse_tag_filter``). Calls ``consume(cursor, records)`` inside the gate,
        the records valid only there, and returns its result; ``cursor`` says how the read ended
        (``status``, ``next_offset``, ``min_offset``, ``max_offset``)."""
        if offset < 0:
            raise bad_range(f"queue offset {offset} is negative; offsets start at 0")
        if max_messages <= 0:
            raise invalid(f"max messages {max_messages}: ask for 1 or more")
        with self.gate:
            config = self.topic(topic)
            _check_readable(config)
            _check_queue(config, queue_id)
            cursor = RangeCursor(self, config, queue_id, offset, None, tag_filter, ReadBudget(max_bytes, max_messages),
                                 group)
            records = cursor.read_all(max_bytes)
            if records:
                self.counters.add(read=cursor.budget.messages)
            return consume(cursor, records)

    def ensure_retry_topic(self, group: str, client: str = "") -> str:
        """The group's retry topic ``%RETRY%{group}`` (one SimpleCQ queue, as RocketMQ's), made
        on first use: a consumer's failed messages come back through it. Counted as created by
        ``client``, as ``create_topic``."""
        _check_group(group)
        name = fmt.RETRY_TOPIC_PREFIX + group
        with self.gate:
            if self.store.find_topic(name) is None:
                status, detail = self.quota.create(client, name, 1, QueueType.SIMPLE_CQ,
                                                   lambda: self.store.create_topic(name, 1, QueueType.SIMPLE_CQ))
                if status not in (CreateStatus.CREATED, CreateStatus.ALREADY_EXISTS):
                    raise from_create(status, detail)
        return name

    # --- group offsets ---------------------------------------------------------------------

    def commit_offsets(self, group: str, entries: list[tuple[str, int, int]], quota_client: str = "") -> None:
        """Store the group's next offsets to consume, (topic, queue id, offset) each;
        ``quota_client`` (limits.client_key): who commits, charged for a group this makes."""
        _check_group(group)
        self.group_quota.admit(quota_client, group, self._group_exists)
        with self.gate:
            for topic, queue_id, offset in entries:
                config = self.topic(topic)
                _check_queue(config, queue_id)
                if offset < 0:
                    raise bad_range(f"offset {offset} of topic {topic!r} queue {queue_id} is negative: commit the "
                                    "next offset to consume, 0 or more")
                # RocketMQ's broker stores any offset (ConsumerManageProcessor.updateConsumerOffset
                # checks none); refused here because one past the end would make the group skip
                # messages stored later, and readers (the Spark source) trust committed offsets.
                end = self.store.next_offset(config.name, queue_id)
                if offset > end:
                    raise bad_range(f"offset {offset} of topic {topic!r} queue {queue_id} is past the queue's end: "
                                    f"commit at most {end}, the offset its next message gets")
            self.offsets.commit(group, entries)

    def update_group(self, group: str, orderly: bool) -> None:
        """Remember whether ``group`` consumes orderly (RocketMQ's consumeMessageOrderly)."""
        _check_group(group)
        self.groups.update(group, orderly)

    def group_orderly(self, group: str) -> bool:
        return self.groups.orderly(group)

    def list_groups(self, names: list[str]) -> list[tuple[str, list[str]]]:
        """The groups named (every group known when none is: those with offsets, settings or live
        consumers), each with its live consumers."""
        for name in names:
            _check_group(name)
        if not names:
            with self.gate:
                names = self._known_groups()
        return [(name, self.consumers.of(name)) for name in names]

    def delete_group(self, group: str, clean_offsets: bool = True, topics: bool = True) -> bool:
        """Forget a consumer group: its settings (orderly), and with ``clean_offsets`` its
        committed offsets, its pop state (messages in flight, pull offsets), its quota entry
        and its metrics series; with ``topics`` its retry topics (``%RETRY%{group}``, pop's
        ``%RETRY%{group}+{topic}``) and its dead-letter topic ``%DLQ%{group}`` too, as RocketMQ's
        mqadmin deleteSubGroup -c deletes them. Consumers connected now are not disconnected:
        their next heartbeat, pop or commit makes the group again. False when the broker knew no
        such group."""
        _check_group(group)
        with self.gate:
            known = group in self._known_groups() or self.pop_service.has_group(group)
            retry_topics = self._group_topics(group) if topics else []
            known = known or bool(retry_topics)
            self.groups.forget(group)
            self.consumers.forget(group)
            if clean_offsets:
                self.pop_service.forget_group(group)  # first: a pop's commit could write offsets back
                self.offsets.remove_group(group)
                self.group_quota.forget(group)
                self.metrics.forget_group(group)
            for name in retry_topics:
                self._delete_topic(name)
        if known:
            log.info("consumer group %s deleted%s%s", echo(group), "" if clean_offsets else " (its offsets kept)",
                     f", with topics {', '.join(retry_topics)}" if retry_topics else "", extra={"group": group})
        return known

    def _group_topics(self, group: str) -> list[str]:
        """The group's retry and dead-letter topics that exist: ``%RETRY%{group}``, ``%DLQ%{group}``,
        and pop's ``%RETRY%{group}+{topic}`` of the topics that exist or that the group popped."""
        names = {fmt.RETRY_TOPIC_PREFIX + group, fmt.DLQ_TOPIC_PREFIX + group}
        names.update(retry_topic(group, t.name) for t in self.store.all_topics())
        names.update(t for t in self.pop_service.popped_topics(group) if t.startswith(fmt.RETRY_TOPIC_PREFIX))
        return sorted(name for name in names if self.store.find_topic(name) is not None)

    def _group_exists(self, group: str) -> bool:
        return bool(self.offsets.query(group)) or self.groups.orderly(group) or self.pop_service.has_group(group)

    def _known_groups(self) -> list[str]:
        """Every group known: with offsets, settings or live consumers."""
        return sorted(set(self.offsets.groups()) | self.groups.names() | set(self.consumers.groups()))

    def query_offsets(self, group: str, topics: list[str] | None) -> list[tuple[str, int, int]]:
        """The group's committed (topic, queue id, offset)s, of ``topics`` (None: all)."""
        _check_group(group)
        with self.gate:
            return self.offsets.query(group, topics or None)

    # --- pop -------------------------------------------------------------------------------

    def pop(self, group: str, topic: str, queue_id: int, max_messages: int, invisible_time_ms: int,
            poll_time_ms: int, tag_filter: str, orderly: bool, consume: Callable, client: str = "",
            quota_client: str = ""):
        """Pop (PopService.pop) and call ``consume(result)`` while its records are valid; its
        result. ``client`` (who pops, as the door knows it) is a live consumer of the group now;
        ``quota_client`` (limits.client_key) is charged for a group this makes."""
        tags = parse_tag_filter(tag_filter)
        _check_readable(self.store.find_topic(topic), "peeking")
        self.group_quota.admit(quota_client, group, self._group_exists)
        self.consumers.seen(group, client or "(pop)")
        with self.gate:
            result = self.pop_service.pop(group, topic, queue_id, max_messages, invisible_time_ms, poll_time_ms,
                                          tags, orderly)
            if result.deliveries:
                self._count_popped(group, result.deliveries)
            return consume(result)

    def _count_popped(self, group: str, deliveries: list) -> None:
        """A pop's deliveries in the metrics: one update per topic (its own, or its retry
        topic's), not one per message."""
        counted: dict[str, list] = {}
        for unit in deliveries:
            tally = counted.setdefault(unit.checkpoint.topic, [0, 0])
            tally[0] += unit.checkpoint.count
            tally[1] += unit.record_size
        for topic, (messages, size) in counted.items():
            self.metrics.gave(topic, group, messages, size)

    def ack(self, group: str, receipt_handles: list[str]):
        with self.gate:
            return self.pop_service.ack(group, receipt_handles)

    def held_count(self, group: str, receipt_handle: str) -> int:
        """How many messages the popped unit a handle names holds (PopService.held_count)."""
        with self.gate:
            return self.pop_service.held_count(group, receipt_handle)

    def receipt_at(self, group: str, topic: str, queue_id: int, offset: int, deadline_ms: int,
                   orderly: bool = False) -> str:
        """The receipt handle of a unit in flight, named as RocketMQ's remoting clients name it."""
        _check_group(group)
        with self.gate:
            return self.pop_service.receipt_at(group, topic, queue_id, offset, deadline_ms, orderly)

    def send_back(self, group: str, physical_offset: int, delay_level: int, max_reconsume_times: int | None,
                  origin_message_id: str = "") -> str:
        """A consumer's failed message, named by its commitlog position, back through the
        group's retry topic (or its DLQ): see PopService.send_back. The topic it went to."""
        with self.gate:
            record = self._record_at(physical_offset)
            target, result = self.pop_service.send_back(group, record, delay_level, max_reconsume_times,
                                                        origin_message_id)
        if not result.ok:
            raise from_put(result)
        return target

    def forward_to_dead_letter(self, group: str, receipt_handle: str, origin_message_id: str) -> str:
        """A popped message into the group's dead-letter topic at once, then acked (v2's
        ForwardMessageToDeadLetterQueue). The topic it went to. A handle that expired meanwhile
        leaves the copy and raises: the message comes again too."""
        with self.gate:
            receipt = self.pop_service.signer.open(receipt_handle)
            topic, queue_id, offset = decode_key(receipt.key)[3:]
            found = self.store.get_messages(topic, queue_id, offset, offset + 1, max_bytes=1)
            if not found.batches:
                raise refused(Reason.MESSAGE_NOT_FOUND, f"{receipt.describe()} is no longer stored")
            record = bytes(found.batches[0].data)
            if fmt.decode_record(record).inner_count > 1:
                raise invalid(f"{receipt.describe()} is a message of an inner batch (a BatchCQ topic), which goes to "
                              "the dead-letter topic only as a whole: let its invisible time pass instead")
            # Stored first, acked then: a failed put loses nothing (a failed ack leaves a copy).
            target, result = self.pop_service.send_back(group, record, -1, None, origin_message_id)
            if not result.ok:
                raise from_put(result)
            failures = self.pop_service.ack(group, [receipt_handle])
        if failures:
            raise refused(Reason.RECEIPT_HANDLE_EXPIRED, failures[0].detail)
        return target

    def message_at(self, physical_offset: int) -> bytes:
        """The stored record at a commitlog position (what an offsetMsgId names), copied."""
        with self.gate:
            return self._record_at(physical_offset)

    def message_topic(self, physical_offset: int) -> str | None:
        """The topic of the record at a commitlog position, None when no message starts there:
        what an ACL check of a read by offset asks before it reads."""
        try:
            return fmt.decode_record(self.message_at(physical_offset)).topic
        except BrokerFault as err:
            if err.reason is Reason.MESSAGE_NOT_FOUND:
                return None
            raise

    def query_messages(self, topic: str, key: str, max_messages: int, begin_ms: int, end_ms: int,
                       unique_key: bool = False) -> list[bytes]:
        """Up to ``max_messages`` stored records of ``topic`` stored between ``begin_ms`` and
        ``end_ms`` whose KEYS hold ``key`` (``unique_key``: whose UNIQ_KEY is ``key``), most
        recent first. broker_sim keeps no key index (RocketMQ's IndexFile): each queue is scanned
        from the first offset stored at ``begin_ms``, at most QUERY_SCAN_BYTES in all."""
        if not key:
            raise invalid("the key to query is empty; give the message key (or its unique key)")
        if max_messages <= 0:
            raise invalid(f"max messages {max_messages}: ask for 1 or more")
        wanted = key.encode()
        found: list[tuple[int, bytes]] = []
        with self.gate:
            config = self.topic(topic)
            budget = QUERY_SCAN_BYTES
            for queue_id in range(config.queue_count):
                offset = self.store.offset_for_timestamp(config.name, queue_id, max(0, begin_ms))
                while budget > 0:
                    result = self.store.get_messages(config.name, queue_id, offset, max_bytes=min(budget, 4 << 20)) \
                        if offset < self.store.max_offset(config.name, queue_id) else None
                    if result is None or not result.batches:
                        break
                    for batch in result.batches:
                        budget -= len(batch.data)
                        stored_ms = fmt.HEADER.unpack_from(batch.data)[10]
                        if begin_ms <= stored_ms <= end_ms and _holds_key(batch.data, wanted, unique_key):
                            found.append((stored_ms, bytes(batch.data)))
                    offset = result.next_begin_offset
        found.sort(key=lambda item: item[0], reverse=True)
        return [record for _ms, record in found[:max_messages]]

    def _record_at(self, physical_offset: int) -> bytes:
        record = self.store.record_at(physical_offset)
        if record is None:
            raise refused(Reason.MESSAGE_NOT_FOUND, f"no message starts at commitlog offset {physical_offset}: the "
                                                    "id is not one this broker gave, or its message was deleted")
        return record

    def change_invisible_duration(self, group: str, receipt_handle: str, invisible_time_ms: int) -> tuple[str, int]:
        with self.gate:
            return self.pop_service.change_invisible_duration(group, receipt_handle, invisible_time_ms)

    # --- transactions ----------------------------------------------------------------------

    def commit_transactions(self, refs: list[tuple[str, int]], sink: tuple[str, int] | None,
                            owner: str | None = None, sink_named: bool = False) -> EndResult:
        """Commit (transaction id, messages sent under it: 0 not to check)s, recording the sink
        batch (sink id, batch id) with them when given. ``owner``: with ACLs, the caller's access
        key, which must be the one that opened each transaction, and own the sink unless the ACL
        file grants it the sink by name (``sink_named``)."""
        _check_message_counts(refs)
        with self.gate:
            return self.transactions.commit(refs, sink, owner, sink_named)

    def sinks(self) -> list[tuple[str, str, int, int, int]]:
        """Every sink: (sink id, owner, latest batch id, batches kept, when its latest was committed)."""
        with self.gate:
            return self.transactions.sinks()

    def release_sink(self, sink_id: str) -> str | None:
        """Forget who owns the sink (its batches stay); the owner it had, None if none."""
        with self.gate:
            return self.transactions.release_sink(sink_id)

    def rollback_transactions(self, refs: list[tuple[str, int]], owner: str | None = None) -> EndResult:
        """Roll back transactions, (id, messages sent under it) each as a commit names them."""
        _check_message_counts(refs)
        with self.gate:
            return self.transactions.rollback([txn_id for txn_id, _count in refs], owner)

    def prepared_message(self, transaction_id: str) -> bytes | None:
        """The first message prepared under an open transaction, in the record layout as
        RocketMQ's MessageDecoder.encode sends one; None once it has ended: what a transaction
        check shows the producer."""
        with self.gate:
            half = self.transactions.first_prepared(transaction_id)
        if half is None:
            return None
        record = half.record
        return fmt.encode_message(topic=half.topic, queue_id=half.queue_id, body=bytes(record.body),
                                  properties=bytes(record.properties), flag=record.flag, sys_flag=record.sys_flag,
                                  born_timestamp=record.born_timestamp, born_host=record.born_host,
                                  store_timestamp=record.born_timestamp, store_host=self.store.config.store_host_bytes,
                                  reconsume_times=record.reconsume_times)

    def sink_batch(self, sink_id: str, batch_id: int, owner: str | None = None, sink_named: bool = False):
        """The sink batch's record (None: not committed) and the sink's latest batch id;
        ``owner``: with ACLs, the caller's access key, which must own the sink unless granted it
        by name."""
        with self.gate:
            return self.transactions.sink_batch(sink_id, batch_id, None if sink_named else owner)

    def transaction_infos(self, ids: list[str], owner: str | None = None) -> list:
        """(transaction or None, its expiry in ms) per id (none given: every one known); with
        ``owner``, only that account's."""
        with self.gate:
            found = self.transactions.transactions(ids, owner)
            return [(txn, self.transactions.expires_ms(txn) if txn is not None else 0) for txn in found]

    # --- stats -----------------------------------------------------------------------------

    def stats(self) -> BrokerSnapshot:
        with self.gate:
            store = self.store
            topics = store.all_topics()
            log_positions = store.log_positions()
            lag_bytes, lag_ms = store.dispatch_lag()
            return BrokerSnapshot(
                topics=len(topics), queues=sum(t.queue_count for t in topics),
                commitlog_min_offset=log_positions.min_offset, commitlog_max_offset=log_positions.max_offset,
                commitlog_flushed_offset=log_positions.flushed_offset,
                dispatched_offset=log_positions.dispatched_offset, dispatch_lag_bytes=lag_bytes,
                dispatch_lag_ms=lag_ms, messages_put=self.counters.messages_put,
                messages_read=self.counters.messages_read, resident_memory_bytes=_resident_bytes(),
                data_dir=str(store.data_dir.resolve()), flush_mode=store.config.flush_mode.value,
                corrupted=store.corrupted_records(), disk_failure=store.disk.failure)

    def gauges(self) -> list:
        """The gauges of ``metrics.METRICS``, read now (at a scrape): one pass over the topics'
        queues and the groups' offsets, inside the gate."""
        with self.gate:
            store = self.store
            topics = {t.name: t for t in store.all_topics()}
            indexed = store.indexed_offset
            high = {name: [indexed(name, q) for q in range(t.queue_count)] for name, t in topics.items()}
            groups = self._known_groups()
            lag = gauge("rocketmq_consumer_lag_messages", labels=("topic", "consumer_group"))
            for group in groups:
                behind: dict[str, int] = {}
                for topic, queue_id, offset in self.offsets.query(group, None):
                    ends = high.get(topic)
                    if ends is not None and queue_id < len(ends):
                        behind[topic] = behind.get(topic, 0) + max(0, ends[queue_id] - offset)
                for topic, messages in sorted(behind.items()):
                    lag.add_metric([topic, group], messages)
            in_flight = gauge("rocketmq_consumer_inflight_messages", labels=("topic", "consumer_group"))
            popped, revive_due = self.pop_service.in_flight_messages()
            for (topic, group), messages in sorted(popped.items()):
                in_flight.add_metric([topic, group], messages)
            snapshot = self.stats()  # what BrokerStats answers: positions, dispatch lag, memory, damage
            transactions = self.transactions.transactions()
            return [gauge("rocketmq_topic_number", len(topics)), gauge("rocketmq_consumer_group_number", len(groups)),
                    lag, in_flight,
                    gauge("rocketmq_storage_size", snapshot.commitlog_max_offset - snapshot.commitlog_min_offset),
                    gauge("rocketmq_storage_flush_behind_bytes",
                          snapshot.commitlog_max_offset - snapshot.commitlog_flushed_offset),
                    gauge("rocketmq_storage_dispatch_behind_bytes", snapshot.dispatch_lag_bytes),
                    gauge("broker_sim_dispatch_lag_ms", snapshot.dispatch_lag_ms),
                    gauge("rocketmq_half_messages", sum(t.message_count for t in transactions)),
                    gauge("broker_sim_transactions_open", len(transactions)),
                    gauge("broker_sim_pop_revive_backlog_messages", revive_due),
                    gauge("broker_sim_memory_budget_held_bytes", self.memory.held),
                    gauge("broker_sim_memory_budget_bytes", self.memory.total_bytes),
                    gauge("broker_sim_responses_waiting", self.counters.responses_waiting),
                    gauge("broker_sim_resident_memory_bytes", snapshot.resident_memory_bytes),
                    gauge("broker_sim_corrupted_records", len(snapshot.corrupted))]

    def _topic_not_found(self, name: str) -> BrokerFault:
        names = [t.name for t in self.store.all_topics() if not system_topic_problem(t.name, "create")]
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        made = "" if self.auto_create is not None else " (this broker creates no topic on a first send)"
        return refused(Reason.TOPIC_NOT_FOUND, f"topic {echo(name)} does not exist{made}; existing topics: "
                                               f"{shown or 'none'}. Create it first, or check the name")


def _nothing() -> None:
    pass


def _keep_auto_create_topic(store: MessageStore, auto: AutoCreateTopics | None) -> None:
    """TBW102 as ``auto`` says: there with its settings where sends create topics, else gone
    (RocketMQ registers it only then, so a client takes its route as leave to create)."""
    existing = store.find_topic(fmt.AUTO_CREATE_TOPIC)
    if existing is not None and (auto is None or (existing.queue_count, existing.queue_type)
                                 != (auto.queue_count, auto.queue_type)):
        store.delete_topic(fmt.AUTO_CREATE_TOPIC)
        existing = None
    if auto is not None and existing is None:
        store.create_topic(fmt.AUTO_CREATE_TOPIC, auto.queue_count, auto.queue_type)


def _holds_key(record, key: bytes, unique_key: bool) -> bool:
    properties = fmt.properties_of(record)
    if unique_key:
        return fmt.find_property(properties, fmt.PROPERTY_UNIQ_KEY.encode()) == key
    keys = fmt.find_property(properties, fmt.PROPERTY_KEYS.encode())
    return keys is not None and key in keys.split(b" ")


def parse_tag_filter(expression: str) -> TagFilter | None:
    try:
        return TagFilter.parse(expression)
    except ValueError as bad:
        raise invalid(f"tag filter {echo(expression)} {bad}") from None


def _check_queue(config: TopicConfig, queue_id: int) -> None:
    if not 0 <= queue_id < config.queue_count:
        raise refused(Reason.QUEUE_NOT_FOUND, f"topic {config.name!r} has queues 0 to "
                                              f"{config.queue_count - 1}; there is no queue {queue_id}")


def _check_writable(config: TopicConfig | None) -> None:
    """PERMISSION_DENIED, as RocketMQ's NO_PERMISSION, for a topic without write perm."""
    if config is not None and not config.writable:
        raise refused(Reason.PERMISSION_DENIED, f"the topic[{config.name}] sending message is forbidden: its perm "
                                                f"is {config.perm} (read only); an admin makes it writable by "
                                                "updating the topic with perm 6 (rmq-admin, mqadmin updateTopic -p 6)")


def _check_readable(config: TopicConfig | None, verb: str = "pulling") -> None:
    """PERMISSION_DENIED, as RocketMQ's NO_PERMISSION, for a topic without read perm (its pull
    says "pulling", its pop "peeking")."""
    if config is not None and not config.readable:
        raise refused(Reason.PERMISSION_DENIED, f"the topic[{config.name}] {verb} message is forbidden: its perm is "
                                                f"{config.perm} (write only); an admin makes it readable by updating "
                                                "the topic with perm 6 (rmq-admin, mqadmin updateTopic -p 6)")


def _check_group(group: str) -> None:
    if not group:
        raise invalid("the consumer group name is empty; name the group")
    if not _GROUP_NAME.match(group):
        raise invalid(f"consumer group {echo(group)} may only use letters, digits, '%', '|', '+', '_' and '-', "
                      "at most 255 of them")


def _check_not_system(topic: str, action: str) -> None:
    problem = system_topic_problem(topic, action)
    if problem:
        raise invalid(problem)


def _check_message_counts(refs: list[tuple[str, int]]) -> None:
    for txn_id, count in refs:
        if count < 0:
            raise invalid(f"message_count {count} of transaction {echo(txn_id)} is negative: give the number of "
                          "messages sent under it, or 0 not to check")


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0



