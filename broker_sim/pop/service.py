"""PopService: RocketMQ's pop consumption (RIP-73) over the message store, its state in a
PopStateStore (RocksDB).

A pop reads units from the group's pull offset of each queue, writes one invisible record per
unit (a message, or a BatchCQ unit with its whole batch) and the new pull offset in ONE atomic
write, and only then answers. An ack deletes the record; an expired record is revived (see
``revive_expired``) into the retry topic ``%RETRY%{group}+{topic}``, which pops of the topic
read along with its queues, and after ``max_reconsume_times`` retries into ``%DLQ%{group}``.
The commit offset of a queue, the group's durable progress, is its lowest unacked offset (the
pull offset when none is in flight); it is written to the consumer offset table.

Memory mirrors the state store (rebuilt from it at open), so acks and the commit offset need
no reads. After a kill -9 the store holds every record that a pop answered with: no popped
message is lost (it comes back after its invisible time) and no acked one comes back.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

from broker_sim.common.logs import ThrottledLog
from broker_sim.pop.config import PopConfig, revive_backoff_ms
from broker_sim.pop.errors import GroupNotFound, InvalidPopRequest, InvalidReceiptHandle, ReceiptHandleExpired
from broker_sim.pop.receipt import ReceiptSigner
from broker_sim.pop.state import (
    ORDERLY,
    PULL,
    REVIVABLE,
    REVIVING,
    PopCheckpoint,
    PopStateStore,
    RocksDBState,
    checkpoint_key,
    decode_marker,
    decode_pull,
    expired_bound,
    key_parts,
    marker_value,
    pull_key,
    pull_value,
    queue_prefix,
    unit_suffix,
)
from broker_sim.store import (
    BatchPut,
    ConsumerOffsetTable,
    CreateStatus,
    GetStatus,
    MessageStore,
    PutContext,
    PutResult,
    QueueType,
    StateMarks,
    StoredBatch,
    StorePaths,
    UnknownQueueError,
    UnknownTopicError,
    echo,
    wall_clock_ms,
)
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

RETRY_PREFIX = fmt.RETRY_TOPIC_PREFIX
DLQ_PREFIX = fmt.DLQ_TOPIC_PREFIX
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"  # RocketMQ's: the topic a retried message was first sent to
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # RocketMQ's: the id of the message a retry copies
PROPERTY_POP_CK = "POP_CK"  # the nonce of the pop whose revive stored this copy
# Properties the store writes itself: a retry or DLQ copy gets its own (an idempotent send's
# stamp belongs to the send, not to a copy of its message).
_SYSTEM_PROPERTIES = (fmt.PROPERTY_INNER_NUM, fmt.PROPERTY_INNER_BASE, fmt.PROPERTY_BATCH_CODEC, fmt.PROPERTY_PRODUCER)
_POLL_SLICE_S = 0.5  # a waiting pop looks again at least this often (orderly queues unblock on acks)
_MAX_SCAN_UNITS = 4096  # units a pop looks at per queue, filtered out or not
_UNIT_BYTES_GUESS = 64 << 10  # a BatchCQ read asks for this many bytes per unit wanted (it loops for more)
_GROUP_NAME = re.compile(r"^[%|+a-zA-Z0-9_-]{1,255}$")


def retry_topic(group: str, topic: str) -> str:
    """The group's retry topic of ``topic`` (RocketMQ's v2 naming)."""
    return f"{RETRY_PREFIX}{group}+{topic}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"


class TagMatcher(Protocol):
    def matches(self, batch: StoredBatch) -> bool: ...


class AckStatus(enum.Enum):
    EXPIRED = "EXPIRED"  # acked already, revived after its invisible time, or its invisible time was changed
    INVALID = "INVALID"  # not issued by this broker, or to another group


class AckFailure(NamedTuple):
    """A handle of an ack call that was not acked: its index in the call, why."""

    index: int
    status: AckStatus
    detail: str


class PoppedUnit(NamedTuple):
    """A popped unit: its checkpoint (where it lives, how often it was consumed), the handle that
    acks it, the topic it was first sent to, and its record's size."""

    checkpoint: PopCheckpoint
    receipt_handle: str
    origin_topic: str
    retry: bool
    record_size: int


@dataclass(frozen=True)
class PopResult:
    """What a pop found. ``parts`` are views of the stored records of the deliveries, in
    order: valid while the store is open (a server copies them out at once, straight into its
    answer); ``records`` joins them."""

    deliveries: list = field(default_factory=list)
    parts: list = field(default_factory=list)
    polling_full: bool = False  # nothing found, and too many pops wait already to wait too

    @property
    def records(self) -> bytes:
        return b"".join(self.parts)


class _Queue:
    """A group's state of one queue: pull offset and the offsets in flight (popped, not acked)."""

    __slots__ = ("pull", "inflight", "heap", "committed")

    def __init__(self, pull: int):
        self.pull = pull
        self.inflight: dict[int, bytes] = {}  # offset -> checkpoint key
        self.heap: list[int] = []  # offsets in flight, with stale ones removed lazily
        self.committed = -1

    def add(self, offset: int, key: bytes) -> None:
        self.inflight[offset] = key
        heapq.heappush(self.heap, offset)
        if len(self.heap) > 2 * len(self.inflight) + 1024:  # many acked below one held long: drop them
            self.heap = sorted(self.inflight)

    def commit_offset(self) -> int:
        heap = self.heap
        while heap and heap[0] not in self.inflight:
            heapq.heappop(heap)
        return min(heap[0], self.pull) if heap else self.pull


class _Changes:
    """What one operation changes, written to the state store at once and then to memory.
    Records travel with their keys: a key is made once."""

    def __init__(self):
        self.added: list[tuple[bytes, PopCheckpoint]] = []
        self.removed: list[tuple[bytes, PopCheckpoint]] = []
        self.pulls: dict[tuple[str, str, int], int] = {}
        self.delivered: list[tuple[bytes, PopCheckpoint, memoryview, str, bool]] = []

    def deliver(self, key: bytes, ck: PopCheckpoint, unit: StoredBatch, origin: str, retry: bool) -> None:
        self.added.append((key, ck))
        self.delivered.append((key, ck, unit.data, origin, retry))


@dataclass
class _PopRound:
    """One pop call over the queues it reads: who pops what, until when it is invisible, and
    what it has taken so far (``changes``, and the bytes ``budget_bytes`` left)."""

    group: str
    topic: str  # the topic popped (a retry queue's units carry it as their origin)
    want: int
    budget_bytes: int
    now_ms: int
    deadline_ms: int
    tag_filter: TagMatcher | None
    changes: _Changes = field(default_factory=_Changes)

    @property
    def wanted(self) -> int:
        """Units still wanted."""
        return self.want - len(self.changes.delivered)


class PopService:
    """Pop, ack, change of invisible time and revive of one broker.

    Parameters
    ----------
    store : MessageStore
    offsets : ConsumerOffsetTable
        Where commit offsets go (and where a group's first pop of a queue starts, if set).
    state : PopStateStore
        The invisible records and pull offsets (``RocksDBState``).
    signer : ReceiptSigner
    config : PopConfig
    now_ms : callable
        The clock of visibility deadlines; tests step it instead of sleeping.
    """

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable, state: PopStateStore,
                 signer: ReceiptSigner, config: PopConfig | None = None, *,
                 now_ms: Callable[[], int] = wall_clock_ms):
        self.store = store
        self.offsets = offsets
        self.state = state
        self.signer = signer
        self.config = config or PopConfig()
        self.now_ms = now_ms
        self._lock = threading.Lock()
        self._checkpoints: dict[bytes, PopCheckpoint] = {}
        self._queues: dict[tuple[str, str, int], _Queue] = {}
        self._groups: set[str] = set()
        self._rotation: dict[tuple[str, str], int] = {}
        self._nonces = itertools.count(time.time_ns())  # larger than any of an earlier run
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self._closing = False
        self._closed = False
        # Lines that repeat per record (a damaged record each pop meets, the checkpoints of a
        # deleted topic), per topic (and group): at most 5 per 10 s each, then a count.
        self._repeated = ThrottledLog(log)
        self._load()

    @classmethod
    def open(cls, data_dir, store: MessageStore, offsets: ConsumerOffsetTable, config: PopConfig | None = None,
             marks: StateMarks | None = None, **kwargs) -> "PopService":
        """The pop service of a data directory: its RocksDB and receipt secret where ``StorePaths``
        puts them; with ``marks``, a RocksDB lost since the broker left it is refused."""
        config = config or PopConfig()
        paths = StorePaths(data_dir)
        signer = ReceiptSigner.from_file(paths.receipt_secret)
        state = RocksDBState(paths.pop_state, sync=config.sync_writes, marks=marks)
        try:
            return cls(store, offsets, state, signer, config, **kwargs)
        except BaseException:
            state.close()
            raise

    def _load(self) -> None:
        self._settle_revives()
        for key, value in self.state.scan(PULL, bytes([PULL[0] + 1])):
            group, topic, queue_id, offset = decode_pull(key, value)
            self._queues[(group, topic, queue_id)] = _Queue(offset)
            self._groups.add(group)
        for kind in (REVIVABLE, ORDERLY):
            for key, value in self.state.scan(kind, bytes([kind[0] + 1])):
                ck = PopCheckpoint.decode(key, value)
                self._checkpoints[key] = ck
                self._queue(ck.group, ck.topic, ck.queue_id).add(ck.offset, key)
                self._groups.add(ck.group)
        commits: dict[str, list] = {}  # the offset table may be older than the state store (a crash)
        for (group, topic, queue_id), queue in self._queues.items():
            queue.committed = queue.commit_offset()
            commits.setdefault(group, []).append((topic, queue_id, queue.committed))
        for group, entries in commits.items():
            self.offsets.commit(group, entries)

    # --- pop -------------------------------------------------------------------------------

    def pop(self, group: str, topic: str, queue_id: int = -1, max_messages: int = 32,
            invisible_time_ms: int = 60_000, poll_time_ms: int = 0, tag_filter: TagMatcher | None = None,
            orderly: bool = False) -> PopResult:
        """Pop up to ``max_messages`` deliveries of ``topic`` (``queue_id`` -1: any of its queues,
        and the group's retry queue, in turn), invisible to the group for ``invisible_time_ms``.
        With nothing to return, wait up to ``poll_time_ms`` for new messages."""
        self._check_group(group)
        self._check_invisible(invisible_time_ms)
        if not 1 <= max_messages <= self.config.max_pop_messages:
            raise InvalidPopRequest(f"max_messages {max_messages}: pop 1 to {self.config.max_pop_messages} at a time")
        if not 0 <= poll_time_ms <= self.config.max_poll_time_ms:
            raise InvalidPopRequest(f"poll_time_ms {poll_time_ms}: wait 0 to {self.config.max_poll_time_ms} ms for "
                                    "messages")
        config = self.store.topic(topic)
        if queue_id != -1 and not 0 <= queue_id < config.queue_count:
            raise UnknownQueueError(f"topic {topic!r} has queues 0 to {config.queue_count - 1}; there is no queue "
                                    f"{queue_id} (pop queue -1 for any)")
        give_up = time.monotonic() + poll_time_ms / 1000
        waiting = False
        try:
            while True:
                position = self.store.indexed_position
                result = self._pop_once(group, topic, queue_id, max_messages, invisible_time_ms, tag_filter, orderly)
                left = give_up - time.monotonic()
                if result.deliveries or left <= 0 or self._closing:
                    return result
                if not waiting:
                    if not self._enter_waiting():
                        return PopResult(polling_full=True)
                    waiting = True
                self.store.wait_indexed_past(position, min(left, _POLL_SLICE_S))
        finally:
            if waiting:
                with self._waiting_lock:
                    self._waiting -= 1

    def _enter_waiting(self) -> bool:
        with self._waiting_lock:
            if self._waiting >= self.config.max_waiting_pops:
                return False
            self._waiting += 1
            return True

    def _pop_once(self, group: str, topic: str, queue_id: int, want: int, invisible_ms: int,
                  tag_filter: TagMatcher | None, orderly: bool) -> PopResult:
        with self._lock:
            config = self.store.topic(topic)
            now = self.now_ms()
            pop = _PopRound(group, topic, want, self.config.max_pop_bytes, now, now + invisible_ms, tag_filter)
            for name, queue, retry in self._targets(group, config, queue_id, orderly):
                if pop.wanted <= 0 or pop.budget_bytes <= 0:
                    break
                if orderly:
                    self._pop_orderly(pop, name, queue)
                else:
                    self._pop_queue(pop, name, queue, retry)
            self._groups.add(group)
            changes = pop.changes
            self._apply(changes)
            sign = self.signer.sign
            deliveries = [PoppedUnit(ck, sign(key, ck), origin, retry, len(data))
                          for key, ck, data, origin, retry in changes.delivered]
            return PopResult(deliveries, [item[2] for item in changes.delivered])

    def _targets(self, group: str, config, queue_id: int, orderly: bool) -> list[tuple[str, int, bool]]:
        """(topic, queue, is the retry queue) to pop from, starting at the group's next queue."""
        if queue_id >= 0:
            return [(config.name, queue_id, False)]
        targets = [(config.name, q, False) for q in range(config.queue_count)]
        retry = retry_topic(group, config.name)
        if not orderly and self.store.find_topic(retry) is not None:
            targets.append((retry, 0, True))
        key = (group, config.name)
        start = self._rotation.get(key, 0) % len(targets)
        self._rotation[key] = start + 1
        return targets[start:] + targets[:start]

    def _pop_queue(self, pop: _PopRound, topic: str, queue_id: int, retry: bool) -> None:
        queue = self._queue(pop.group, topic, queue_id)
        units, after = self._read(pop, topic, queue_id, queue.pull)
        if units:
            head, prefix, nonces = key_parts(False, pop.deadline_ms), queue_prefix(pop.group, topic), self._nonces
            for unit in units:
                reconsume = _reconsume_times(unit) if retry else 0  # a retried record counts its retries
                key = head + prefix + unit_suffix(queue_id, unit.base_offset)
                checkpoint = PopCheckpoint(False, pop.deadline_ms, pop.group, topic, queue_id, unit.base_offset,
                                           unit.count, reconsume, next(nonces), pop.now_ms)
                pop.changes.deliver(key, checkpoint, unit, pop.topic, retry)
        if after != queue.pull:
            pop.changes.pulls[(pop.group, topic, queue_id)] = after

    def _pop_orderly(self, pop: _PopRound, topic: str, queue_id: int) -> None:
        """An orderly pop of a queue: nothing while some of its messages are invisible; its
        expired ones again, with one more reconsume, before anything new."""
        group, changes = pop.group, pop.changes
        queue = self._queue(group, topic, queue_id)
        held = [(key, self._checkpoints[key]) for key in queue.inflight.values()]
        if any(ck.deadline_ms > pop.now_ms for _key, ck in held):
            return
        again = sorted(((key, ck) for key, ck in held if ck.orderly), key=lambda item: item[1].offset)
        delivered = len(changes.delivered)
        if again:
            want = pop.wanted
            for key, ck in again[:want]:
                unit = self._unit(ck)
                if unit is None or ck.reconsume_times >= self.config.max_reconsume_times:
                    if unit is None or self._forward(ck, unit, self._ensure_topic(dlq_topic(group), QueueType.BATCH_CQ),
                                                     topic):
                        changes.removed.append((key, ck))
                    continue
                changes.removed.append((key, ck))
                moved = ck.moved(pop.deadline_ms, next(self._nonces), reconsume_times=ck.reconsume_times + 1,
                                 pop_time_ms=pop.now_ms)
                changes.deliver(moved.key(), moved, unit, topic, False)
                pop.budget_bytes -= len(unit.data)
            if len(changes.delivered) > delivered or len(again) > want:
                return  # the queue is held by what came again (or what is left of it)
        units, after = self._read(pop, topic, queue_id, queue.pull)
        for unit in units:
            ck = PopCheckpoint(True, pop.deadline_ms, group, topic, queue_id, unit.base_offset, unit.count, 0,
                               next(self._nonces), pop.now_ms)
            changes.deliver(ck.key(), ck, unit, topic, False)
        if after != queue.pull:
            changes.pulls[(group, topic, queue_id)] = after

    def _read(self, pop: _PopRound, topic: str, queue_id: int, start: int) -> tuple[list[StoredBatch], int]:
        """Up to the units the pop still wants from ``start`` that pass its filter, within its
        byte budget; and the offset after the last unit looked at (filtered-out units are
        passed over)."""
        taken: list[StoredBatch] = []
        want = pop.wanted
        offset, looked = start, 0
        simple = self.store.topic(topic).queue_type is QueueType.SIMPLE_CQ
        while len(taken) < want and looked < _MAX_SCAN_UNITS and pop.budget_bytes > 0:
            end_of_queue = self.store.max_offset(topic, queue_id)
            if offset >= end_of_queue:
                # Past the end only when the store lost its tail in a machine crash: go on from
                # the end (never back: what was popped there may have been acked).
                return taken, min(offset, end_of_queue)
            end = offset + (want - len(taken)) if simple else None
            ask = pop.budget_bytes if simple else min(pop.budget_bytes, (want - len(taken)) * _UNIT_BYTES_GUESS)
            result = self.store.get_messages(topic, queue_id, offset, end, max_bytes=ask)
            if result.status is GetStatus.OFFSET_TOO_SMALL:  # deleted below: go on from the first stored
                offset = result.next_begin_offset
                continue
            if result.status is GetStatus.RECORD_CORRUPTED:  # never delivered, and never blocks the queue
                self._repeated.error("pop skips a damaged record: %s", result.detail, key=(topic, queue_id),
                                     extra={"topic": topic, "queue": queue_id, "group": pop.group, "offset": offset})
                looked += 1
                offset = result.next_begin_offset
                continue
            if result.status is not GetStatus.FOUND:
                break
            for unit in result.batches:
                if len(taken) >= want or (taken and len(unit.data) > pop.budget_bytes):
                    return taken, offset
                looked += 1
                offset = unit.base_offset + unit.count
                if pop.tag_filter is None or pop.tag_filter.matches(unit):
                    taken.append(unit)
                    pop.budget_bytes -= len(unit.data)
        return taken, offset

    def _unit(self, ck: PopCheckpoint) -> StoredBatch | None:
        """The stored unit a checkpoint names, or None when it is no longer stored."""
        try:
            result = self.store.get_messages(ck.topic, ck.queue_id, ck.offset, ck.offset + 1)
        except UnknownTopicError:
            return None
        if result.status is not GetStatus.FOUND or result.batches[0].base_offset != ck.offset:
            return None
        return result.batches[0]

    # --- ack and change of invisible time ----------------------------------------------------

    def ack(self, group: str, handles: list[str]) -> list[AckFailure]:
        """Ack the handles, all in one write; returns the ones not acked (none: all were). The
        acked messages are never delivered again."""
        self._check_known_group(group)
        owner = group.encode()
        failures = []
        with self._lock:
            changes = _Changes()
            acked: set[bytes] = set()
            for index, handle in enumerate(handles):
                try:
                    key, held = self._held(owner, handle)
                except InvalidReceiptHandle as err:
                    failures.append(AckFailure(index, AckStatus.INVALID, str(err)))
                    continue
                except ReceiptHandleExpired as err:
                    failures.append(AckFailure(index, AckStatus.EXPIRED, str(err)))
                    continue
                if key in acked:
                    failures.append(AckFailure(index, AckStatus.EXPIRED, "the handle was acked earlier in this call"))
                    continue
                acked.add(key)
                changes.removed.append((key, held))
            self._apply(changes)
        return failures

    def held_count(self, group: str, handle: str) -> int:
        """How many messages the unit ``handle`` names holds, the handle checked as ``ack``
        checks it (signed by this broker, for ``group``, still in flight); raises
        InvalidReceiptHandle or ReceiptHandleExpired."""
        self._check_known_group(group)
        with self._lock:
            return self._held(group.encode(), handle)[1].count

    def change_invisible_duration(self, group: str, handle: str, invisible_time_ms: int) -> tuple[str, int]:
        """Make a popped unit invisible for ``invisible_time_ms`` from now; returns its new
        receipt handle and visibility deadline. The old handle stops working."""
        self._check_known_group(group)
        self._check_invisible(invisible_time_ms)
        with self._lock:
            key, held = self._held(group.encode(), handle)
            moved = held.moved(self.now_ms() + invisible_time_ms, next(self._nonces), revive_failures=0)
            moved_key = moved.key()
            changes = _Changes()
            changes.removed.append((key, held))
            changes.added.append((moved_key, moved))
            self._apply(changes)
            return self.signer.sign(moved_key, moved), moved.deadline_ms

    def receipt_at(self, group: str, topic: str, queue_id: int, offset: int, deadline_ms: int,
                   orderly: bool = False) -> str:
        """The receipt handle of the unit at ``offset`` popped with visibility deadline
        ``deadline_ms``: how RocketMQ's remoting clients name a popped message (its queue, offset,
        pop time and invisible time). Raises ReceiptHandleExpired when no such unit is in flight."""
        key = checkpoint_key(orderly, deadline_ms, queue_prefix(group, topic), queue_id, offset)
        with self._lock:
            held = self._checkpoints.get(key)
            if held is None:
                raise ReceiptHandleExpired(
                    f"no message of {topic!r} queue {queue_id} offset {offset} popped by {group!r} with that pop and "
                    "invisible time is in flight: it was acked, came back after its invisible time, or its invisible "
                    "time was changed")
            return self.signer.sign(key, held)

    def _held(self, group: bytes, handle: str) -> tuple[bytes, PopCheckpoint]:
        """The record a handle names, with its key; raises InvalidReceiptHandle or
        ReceiptHandleExpired."""
        receipt = self.signer.open(handle)
        if not receipt.belongs_to(group):
            raise InvalidReceiptHandle(f"the receipt handle of {receipt.describe()} was issued to another group than "
                                       f"{group.decode()!r}: ack with the group that popped the message")
        held = self._checkpoints.get(receipt.key)
        if held is None or held.nonce != receipt.nonce:
            raise ReceiptHandleExpired(
                f"the receipt handle of {receipt.describe()} has expired: the message was acked, came back after its "
                "invisible time (it is delivered again with a new handle), or its invisible time was changed (use "
                "the handle that change returned)")
        return receipt.key, held

    # --- revive ------------------------------------------------------------------------------

    def revive_expired(self, limit: int | None = None) -> int:
        """Revive records whose invisible time has passed (one range scan of the state store):
        into the retry topic with one more reconsume, or past the group's maximum into its DLQ.
        A revive that fails is tried again after RocketMQ's backoffs. Returns how many records
        were handled.

        The records first become markers naming where their copies go (one write), then the
        copies are stored, then the markers are deleted (one write): after a crash in between,
        ``_load`` finds each marker's copy or restores its record, so no message is copied twice
        or lost."""
        with self._lock:
            now = self.now_ms()
            changes = _Changes()
            copies = []
            for key, value in self.state.scan(REVIVABLE, expired_bound(now), limit or self.config.revive_batch):
                ck = self._checkpoints.get(key) or PopCheckpoint.decode(key, value)
                changes.removed.append((key, ck))
                unit = self._unit(ck)
                if unit is None:
                    self._repeated.warning("pop revive: %s queue %d offset %d of group %s is no longer stored; "
                                           "dropped", ck.topic, ck.queue_id, ck.offset, ck.group,
                                           key=(ck.topic, ck.group), extra=_subject(ck))
                    continue
                target = self._revive_target(ck)
                copies.append((key, ck, unit, target, self._queue_end(target)))
            if not changes.removed:
                return 0
            markers = [(REVIVING + key, marker_value(ck, target, start)) for key, ck, _unit, target, start in copies]
            self.state.write(markers, [key for key, _ck in changes.removed])
            for _key, ck, unit, target, _start in copies:
                if not self._forward(ck, unit, target):
                    failures = ck.revive_failures + 1
                    retried = ck.moved(now + revive_backoff_ms(failures), ck.nonce, revive_failures=failures)
                    changes.added.append((retried.key(), retried))
            self._apply(changes, also_delete=[key for key, _value in markers])
            return len(changes.removed)

    def _revive_target(self, ck: PopCheckpoint) -> str:
        """Where an expired unit goes: its group's retry topic, or its DLQ past the maximum
        retries (made on first use: the retry topic of the unit's queue type, the DLQ BatchCQ,
        which holds single messages and batches alike)."""
        if ck.reconsume_times >= self.config.max_reconsume_times:
            return self._ensure_topic(dlq_topic(ck.group), QueueType.BATCH_CQ)
        if ck.topic.startswith(RETRY_PREFIX):
            return ck.topic
        source = self.store.find_topic(ck.topic)
        return self._ensure_topic(retry_topic(ck.group, ck.topic), source.queue_type if source else QueueType.BATCH_CQ)

    def _ensure_topic(self, name: str, queue_type: QueueType) -> str:
        if self.store.find_topic(name) is None:
            status, detail = self.store.create_topic(name, 1, queue_type)
            if detail and status is not CreateStatus.ALREADY_EXISTS:
                self._repeated.warning("pop: cannot create %s: %s", name, detail, key=name, extra={"topic": name})
        return name

    def _queue_end(self, topic: str) -> int:
        try:
            return self.store.max_offset(topic, 0)
        except UnknownTopicError:
            return 0

    def _forward(self, ck: PopCheckpoint, unit: StoredBatch, target: str, origin: str | None = None) -> bool:
        """Store a copy of the unit's record in ``target`` (queue 0) with RECONSUMETIMES + 1,
        the first topic in RETRY_TOPIC and the pop's nonce in POP_CK."""
        record = fmt.decode_record(unit.data)
        properties = {k: v for k, v in record.properties.items() if k not in _SYSTEM_PROPERTIES}
        properties.setdefault(PROPERTY_RETRY_TOPIC, origin or ck.topic)
        properties[PROPERTY_POP_CK] = str(ck.nonce)
        context = PutContext(record.born_timestamp, record.born_host, reconsume_times=ck.reconsume_times + 1,
                             stored_before=True)
        if record.sys_flag & fmt.SysFlag.INNER_BATCH:
            codec = record.properties.get(fmt.PROPERTY_BATCH_CODEC, "rmq")
            batch = BatchPut(bytes(record.body), unit.count, codec, record.compression, properties, record.flag)
            result = self.store.put_inner_batch(target, 0, batch, context=context)
        else:
            result = self.store.put_message(target, 0, bytes(record.body), properties=properties, flag=record.flag,
                                            context=context)
        if not result.ok:
            self._repeated.warning("pop revive of %s queue %d offset %d (group %s) into %s failed: %s; trying again "
                                   "later", ck.topic, ck.queue_id, ck.offset, ck.group, target,
                                   result.detail or result.status.value, key=(ck.topic, ck.group),
                                   extra={**_subject(ck), "target": target})
        return result.ok

    def send_back(self, group: str, record: bytes, delay_level: int, max_reconsume_times: int | None = None,
                  origin_message_id: str = "") -> tuple[str, PutResult]:
        """A push consumer's failed message (RocketMQ's CONSUMER_SEND_MSG_BACK): a copy of its
        stored ``record`` into the group's retry topic ``%RETRY%{group}`` with one more
        reconsume, delayed by ``delay_level`` (0: level 3 + its reconsumes, as RocketMQ), or into
        its DLQ once it was reconsumed ``max_reconsume_times`` (None: the config's) or when
        ``delay_level`` is negative. Returns the topic it went to and the put's result."""
        self._check_group(group)
        message = fmt.decode_record(record)
        limit = self.config.max_reconsume_times if max_reconsume_times is None else max_reconsume_times
        properties = {k: v for k, v in message.properties.items() if k not in _SYSTEM_PROPERTIES}
        properties.setdefault(PROPERTY_RETRY_TOPIC, message.topic)
        origin_id = origin_message_id or properties.get(fmt.PROPERTY_UNIQ_KEY, "")
        properties.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin_id)
        properties.pop(fmt.PROPERTY_DELAY_TIME_LEVEL, None)
        if message.reconsume_times >= limit or delay_level < 0:
            target = self._ensure_topic(dlq_topic(group), QueueType.SIMPLE_CQ)
        else:
            target = self._ensure_topic(f"{RETRY_PREFIX}{group}", QueueType.SIMPLE_CQ)
            properties[fmt.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level or 3 + message.reconsume_times)
        context = PutContext(message.born_timestamp, message.born_host, reconsume_times=message.reconsume_times + 1,
                             stored_before=True)
        return target, self.store.put_message(target, 0, bytes(message.body), properties=properties,
                                              flag=message.flag, sys_flag=message.sys_flag, context=context)

    def _settle_revives(self) -> None:
        """After a crash in a revive: a marker whose copy is stored is done; any other gets its
        record back (expired: the next revive pass copies it)."""
        puts, deletes = [], []
        for key, value in self.state.scan(REVIVING, bytes([REVIVING[0] + 1])):
            ck, target, start = decode_marker(key, value)
            if not self._copied(target, start, ck.nonce):
                puts.append((key[1:], ck.value()))
            deletes.append(key)
        if deletes:
            log.info("pop: %d revives were cut short by a stop; %d of them are redone", len(deletes), len(puts))
            self.state.write(puts, deletes)

    def _copied(self, topic: str, start: int, nonce: int) -> bool:
        """Whether ``topic``'s queue 0 holds, from ``start`` on, the copy of the pop ``nonce``."""
        self.store.wait_dispatched(10.0)
        wanted, offset = str(nonce), start
        while True:
            try:
                result = self.store.get_messages(topic, 0, offset)
            except (UnknownTopicError, ValueError):
                return False
            if result.status is GetStatus.RECORD_CORRUPTED:  # not the copy: look past it
                offset = result.next_begin_offset
                continue
            if result.status is not GetStatus.FOUND:
                return result.status is GetStatus.OFFSET_TOO_SMALL and self._copied(topic, result.next_begin_offset,
                                                                                     nonce)
            for batch in result.batches:
                if fmt.decode_record(batch.data).properties.get(PROPERTY_POP_CK) == wanted:
                    return True
            offset = result.next_begin_offset

    # --- state -------------------------------------------------------------------------------

    def _queue(self, group: str, topic: str, queue_id: int) -> _Queue:
        key = (group, topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(self._first_offset(group, topic, queue_id))
        return queue

    def _first_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where a group's first pop of a queue starts: its committed offset, else the queue's
        first stored offset."""
        for _name, queue, offset in self.offsets.query(group, [topic]):
            if queue == queue_id:
                return offset
        try:
            return self.store.min_offset(topic, queue_id)
        except UnknownTopicError:
            return 0

    def _apply(self, changes: _Changes, also_delete: list[bytes] = ()) -> None:
        """Write the changes to the state store in one atomic write, then to memory, then
        the commit offsets that moved to the consumer offset table."""
        puts = [(key, ck.value()) for key, ck in changes.added]
        puts += [(pull_key(queue_prefix(g, t), q), pull_value(offset)) for (g, t, q), offset in changes.pulls.items()]
        self.state.write(puts, [key for key, _ck in changes.removed] + list(also_delete))
        touched: dict[tuple[str, str, int], _Queue] = {}
        checkpoints = self._checkpoints
        for key, ck in changes.removed:
            checkpoints.pop(key, None)
            queue = touched.get(ck[2:5]) or touched.setdefault(ck[2:5], self._queue(*ck[2:5]))
            if queue.inflight.get(ck.offset) == key:
                del queue.inflight[ck.offset]
        for key, ck in changes.added:
            checkpoints[key] = ck
            queue = touched.get(ck[2:5]) or touched.setdefault(ck[2:5], self._queue(*ck[2:5]))
            queue.add(ck.offset, key)
        for where, offset in changes.pulls.items():
            queue = touched.get(where) or touched.setdefault(where, self._queue(*where))
            queue.pull = offset
        commits: dict[str, list] = {}
        for (group, topic, queue_id), queue in touched.items():
            offset = queue.commit_offset()
            if offset != queue.committed:
                queue.committed = offset
                commits.setdefault(group, []).append((topic, queue_id, offset))
        for group, entries in commits.items():
            self.offsets.commit(group, entries)

    def forget_topic(self, topic: str) -> int:
        """Drop the pop state of a deleted topic (its invisible records and every group's pull
        offsets), so that a topic created again under the name is popped from its start;
        returns how many records went. Handles of the dropped records stop working."""
        with self._lock:
            keys = [key for key, ck in self._checkpoints.items() if ck.topic == topic]
            queues = [where for where in self._queues if where[1] == topic]
            self.state.write([], keys + [pull_key(queue_prefix(group, name), queue_id)
                                         for group, name, queue_id in queues])
            for key in keys:
                del self._checkpoints[key]
            for where in queues:
                del self._queues[where]
            for rotation in [r for r in self._rotation if r[1] == topic]:
                del self._rotation[rotation]
            return len(keys)

    def forget_group(self, group: str) -> int:
        """Drop the pop state of a deleted consumer group (its invisible records and its pull
        offsets on every queue), so that a group made again under the name pops from its
        committed offsets, or the queues' starts; returns how many records went. Handles of
        the dropped records stop working."""
        with self._lock:
            keys = [key for key, ck in self._checkpoints.items() if ck.group == group]
            queues = [where for where in self._queues if where[0] == group]
            self.state.write([], keys + [pull_key(queue_prefix(name, topic), queue_id)
                                         for name, topic, queue_id in queues])
            for key in keys:
                del self._checkpoints[key]
            for where in queues:
                del self._queues[where]
            for rotation in [r for r in self._rotation if r[0] == group]:
                del self._rotation[rotation]
            self._groups.discard(group)
            return len(keys)

    def popped_topics(self, group: str) -> set[str]:
        """The topics whose queues ``group`` popped (its retry topics among them)."""
        with self._lock:
            return {topic for name, topic, _queue in self._queues if name == group}

    # --- checks and lifecycle ----------------------------------------------------------------

    def _check_group(self, group: str) -> None:
        if not isinstance(group, str) or not _GROUP_NAME.match(group):
            raise InvalidPopRequest(f"consumer group {echo(group)} may only use letters, digits, '%', '|', '+', "
                                    "'_' and '-', 1 to 255 of them")

    def has_group(self, group: str) -> bool:
        """Whether the group popped on this broker."""
        return group in self._groups

    def _check_known_group(self, group: str) -> None:
        self._check_group(group)
        if group not in self._groups:
            raise GroupNotFound(f"consumer group {echo(group)} has popped nothing on this broker: there is nothing of "
                                "it to ack; check the group name")

    def _check_invisible(self, invisible_time_ms: int) -> None:
        low, high = self.config.min_invisible_time_ms, self.config.max_invisible_time_ms
        if not low <= invisible_time_ms <= high:
            raise InvalidPopRequest(f"invisible time {invisible_time_ms} ms is out of range: use {low} to {high} ms")

    def in_flight(self, group: str | None = None) -> int:
        """Units popped and neither acked nor revived (of ``group``, or of all groups)."""
        with self._lock:
            return sum(1 for ck in self._checkpoints.values() if group is None or ck.group == group)

    def in_flight_messages(self) -> tuple[dict[tuple[str, str], int], int]:
        """Messages popped and neither acked nor revived, by (topic, group); and how many of them
        are past their invisible time (the revive service's backlog)."""
        counts: dict[tuple[str, str], int] = {}
        now, due = self.now_ms(), 0
        with self._lock:
            for ck in self._checkpoints.values():
                counts[(ck.topic, ck.group)] = counts.get((ck.topic, ck.group), 0) + ck.count
                if ck.deadline_ms <= now:
                    due += ck.count
        return counts, due

    def commit_offset(self, group: str, topic: str, queue_id: int) -> int:
        with self._lock:
            return self._queue(group, topic, queue_id).commit_offset()

    def pull_offset(self, group: str, topic: str, queue_id: int) -> int:
        with self._lock:
            return self._queue(group, topic, queue_id).pull

    def stop_waiting(self) -> None:
        """Waiting pops answer now, and pops from now on do not wait (the broker is stopping)."""
        self._closing = True

    def close(self) -> None:
        """Close the state store; idempotent."""
        self._closing = True
        with self._lock:
            if not self._closed:
                self._closed = True
                self.state.close()


def _reconsume_times(unit: StoredBatch) -> int:
    """RECONSUMETIMES of a stored record."""
    return fmt.HEADER.unpack_from(unit.data)[12]


def _subject(ck: PopCheckpoint) -> dict:
    """A checkpoint's fields in a log line."""
    return {"topic": ck.topic, "queue": ck.queue_id, "offset": ck.offset, "group": ck.group}
