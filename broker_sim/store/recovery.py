"""Recovery at open: find the valid tail of the commitlog, cut only a torn tail after it, keep
damaged records in place, and bring the indexes back in line with the log.

1. Scan forward with CRC checks from a safe point (the segment before the checkpoint's);
   rebuild the idempotent producers' recent stamps from the records scanned. A record that
   fails its checks is a torn tail only when it lies at or past the checkpoint's flushed
   position and no valid record follows it: after a clean stop nothing is ever cut. Any
   other damaged record is kept in place, its offsets taken for good, and reported (ERROR
   log, the store's ``CorruptionReport``); reads refuse it.
2. Truncate the log at the tail. A topic created at an offset past the new tail gets the
   tail as its creation offset, so that the records it is sent from now on (written from
   the tail) are indexed.
3. Drop index units that point past the tail, or whose record does not match them (units
   pointing at a kept damaged record stay: they hold its offsets).
4. Re-dispatch every record after the last durably indexed one (idempotent per queue),
   stepping over damaged records: one whose header is intact is indexed from it; one whose
   header still names the queue's next offset is indexed under it; offsets that a later
   record of a queue shows missing are indexed to the damaged record before it, so that
   offsets stay dense and are never given again. A queue whose index lost units before that
   point (it has fewer than the queue table saved with the checkpoint, or a re-dispatched
   unit would leave a gap no damaged record explains) is emptied and rebuilt by
   re-dispatching from the start of the log.
5. Rebuild the queues' next offsets from the indexes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.commitlog import CommitLog, DamagedRecord
from broker_sim.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import IndexGapError, StoreError
from broker_sim.store.integrity import CorruptedRecord, CorruptionReport
from broker_sim.store.message_filter import tags_code
from broker_sim.store.producer_state import ProducerState, StampCollector
from broker_sim.store.topics import QueueType
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

_INNER_NUM_KEY = fmt.PROPERTY_INNER_NUM.encode()
_TAGS_KEY = fmt.PROPERTY_TAGS.encode()
_LARGEST_BATCH_UNIT = 32767  # a BatchCQ unit's batchSize is a Java short


@dataclass(frozen=True)
class RecoveryReport:
    clean: bool  # the last stop was clean (no abort marker)
    scanned_from: int
    tail: int
    stop_reason: str
    dropped_units: int
    redispatched_records: int
    damaged: tuple = ()  # the damaged records kept (commitlog.DamagedRecord), found by this scan


@dataclass(frozen=True)
class _Identity:
    """What a damaged record's header says it is, where that is plausible."""

    topic: str
    queue_id: int
    base_offset: int
    count: int
    tags_code: int
    store_timestamp: int


def recover(commitlog: CommitLog, queues: ConsumeQueueTable, dispatcher: Dispatcher,
            checkpoint: Checkpoint, queue_table: list, topics, clean: bool,
            producers: ProducerState, corruption: CorruptionReport) -> RecoveryReport:
    flushed = checkpoint.commitlog_flushed_offset
    start = _scan_start(commitlog, flushed)
    stamps = StampCollector(producers)
    tail, reason, damaged = commitlog.scan(start, flushed, stamps.visit)
    if stamps.incomplete_at is not None and stamps.incomplete_at >= flushed:
        # an early batch cut short past the flushed position: none of it was acknowledged
        tail, reason = stamps.incomplete_at, f"a stamped early batch is cut short by the end ({reason})"
        damaged = [d for d in damaged if d.position < tail]
    commitlog.truncate(tail)
    commitlog.flush()  # what the scan accepted is on disk before anything is built on it
    commitlog.damaged.update((d.position, d.end) for d in damaged)
    clamped = topics.clamp_created_at(tail)
    if clamped:
        log.warning("the log now ends at %d, before the creation of topics %s: they start there", tail, clamped,
                    extra={"topics": sorted(clamped)})
    dropped = sum(_drop_units_past(queue, commitlog, tail) for _key, queue in queues.all())
    lost = _queues_that_lost_units(queues, queue_table, topics, tail)
    dispatcher.position = max(commitlog.min_offset, min(checkpoint.index_flushed_offset, tail))
    redispatch = _Redispatch(commitlog, queues, dispatcher, topics, damaged, tail)
    redispatched = redispatch.run(lost)
    for (topic, queue_id), queue in queues.all():
        commitlog.queue_offsets[(topic, queue_id)] = queue.max_offset
    corruption.forget_below(commitlog.min_offset)
    for record in damaged:
        corruption.add(redispatch.described(record))
    report = RecoveryReport(clean, start, tail, reason, dropped, redispatched, tuple(damaged))
    if not clean or dropped or damaged:
        log.warning("recovered: %s", report)
    return report


class _Redispatch:
    """Step 4: re-dispatch to the tail, over the damaged records (see the module's notes)."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, dispatcher: Dispatcher, topics,
                 damaged: list[DamagedRecord], tail: int):
        self.commitlog = commitlog
        self.queues = queues
        self.dispatcher = dispatcher
        self.topics = topics
        self.damaged = damaged
        self.tail = tail
        self.identities: dict[int, _Identity] = {}  # damaged record position -> offsets indexed to it

    def run(self, lost: dict) -> int:
        dispatcher = self.dispatcher
        redispatched = 0
        rebuilt: set = set()
        while True:
            if lost:
                log.warning("index of %s lost units: rebuilding from the start of the commitlog", sorted(lost),
                            extra={"topics": sorted({topic for topic, _queue in lost})})
                for queue in lost.values():
                    queue.truncate_units(queue.first_unit)
                dispatcher.position = self.commitlog.min_offset
                rebuilt.update(lost)
                lost = {}
            started = dispatcher.position
            try:
                redispatched += self._dispatch_to_tail()
                return redispatched
            except IndexGapError as gap:
                key = (gap.topic, gap.queue_id)
                queue = self.queues.find(*key)
                holder = self._damaged_between(queue.indexed_end, gap.position)
                if holder is not None and (key in rebuilt or started <= queue.indexed_end):
                    self._index_to(holder, queue, gap.offset)
                elif key not in rebuilt:
                    lost = {key: queue}
                else:
                    raise StoreError(f"queue {gap.queue_id} of topic {gap.topic!r}: offsets {queue.max_offset} to "
                                     f"{gap.offset - 1} are in no record of the commitlog, not even a damaged one; "
                                     "the data directory is damaged beyond recovery") from gap

    def _dispatch_to_tail(self) -> int:
        dispatcher = self.dispatcher
        count = 0
        for record in self.damaged:
            if dispatcher.position >= record.end:
                continue
            if dispatcher.position <= record.position:
                count += dispatcher.dispatch(limit=record.position)
                if dispatcher.position == record.position:
                    self._index_damaged(record)
            dispatcher.position = max(dispatcher.position, record.end)
        return count + dispatcher.dispatch(limit=self.tail)

    def _index_damaged(self, record: DamagedRecord) -> None:
        """Index a damaged record whose header can be believed: intact, or naming exactly the
        next offset of an existing queue."""
        identity = self.identity(record)
        if identity is None:
            return
        config = self.topics.get(identity.topic)
        queue = self.queues.get(identity.topic, identity.queue_id, config.queue_type)
        if not record.header_intact and identity.base_offset != queue.max_offset:
            return
        size = fmt.HEADER.unpack_from(self.commitlog.view(record.position, fmt.HEADER.size))[0] \
            if record.header_intact else record.size
        with self.dispatcher.lock:
            queue.put(record.position, size, identity.tags_code, identity.store_timestamp, identity.base_offset,
                      identity.count)
        self.identities[record.position] = identity

    def _index_to(self, record: DamagedRecord, queue: ConsumeQueue, end: int) -> None:
        """Index the queue's missing offsets, up to ``end``, to the damaged record ``record``."""
        first = queue.max_offset
        last = queue.last_unit()
        store_ts = last.store_timestamp if last else 0  # keeps the units' store times in order
        step = _LARGEST_BATCH_UNIT if queue.queue_type is QueueType.BATCH_CQ else 1
        with self.dispatcher.lock:
            for base in range(first, end, step):
                queue.put(record.position, record.size, 0, store_ts, base, min(step, end - base))
        self.identities[record.position] = _Identity(queue.topic, queue.queue_id, first, end - first, 0, store_ts)
        log.error("offsets %d to %d of topic %r queue %d are in no valid record: indexed to the damaged record at "
                  "commitlog offset %d, whose reads fail", first, end - 1, queue.topic, queue.queue_id,
                  record.position, extra={"topic": queue.topic, "queue": queue.queue_id,
                                          "commitlog_offset": record.position})

    def _damaged_between(self, start: int, end: int) -> DamagedRecord | None:
        """The first damaged record between commitlog offsets ``start`` and ``end``."""
        return next((d for d in self.damaged if start <= d.position < end), None)

    def identity(self, record: DamagedRecord) -> _Identity | None:
        """What the record's header says, when it is plausible: its own position, an existing
        topic and queue, a message count."""
        view = self.commitlog.view(record.position, record.size)
        if len(view) < fmt.FIXED_BYTES:
            return None
        (total, magic, _crc, queue_id, _flag, base, physical, sys_flag, _born, _host, store_ts, _store_host,
         _reconsume, _prepared, body_len) = fmt.HEADER.unpack_from(view)
        if magic != fmt.MAGIC_V1 or physical != record.position or not 0 <= body_len <= len(view) - fmt.FIXED_BYTES:
            return None
        at = fmt.HEADER.size + body_len
        try:
            topic = bytes(view[at + 1 : at + 1 + view[at]]).decode()
        except UnicodeDecodeError:
            return None
        config = self.topics.get(topic)
        if config is None or not 0 <= queue_id < config.stored_queues or record.position < config.created_at_offset:
            return None
        end = min(total, len(view)) if record.header_intact else len(view)
        properties = bytes(view[at + 3 + view[at] : end])
        count = 1
        if sys_flag & fmt.SysFlag.INNER_BATCH:
            raw = fmt.find_property(properties, _INNER_NUM_KEY)
            if config.queue_type is not QueueType.BATCH_CQ or not raw or not raw.isdigit():
                return None
            count = int(raw)
        if not 1 <= count <= _LARGEST_BATCH_UNIT:
            return None
        tags = fmt.find_property(properties, _TAGS_KEY) if record.header_intact else None  # else maybe damaged
        return _Identity(topic, queue_id, base, count, tags_code(tags), store_ts)

    def described(self, record: DamagedRecord) -> CorruptedRecord:
        identity = self.identities.get(record.position) or (self.identity(record) if record.header_intact else None)
        if identity is None:
            return CorruptedRecord(record.position, record.size, record.reason, "recovery")
        return CorruptedRecord(record.position, record.size, record.reason, "recovery", identity.topic,
                               identity.queue_id, identity.base_offset, identity.base_offset + identity.count)


def _queues_that_lost_units(queues: ConsumeQueueTable, queue_table: list, topics, tail: int) -> dict:
    """Queues with fewer units than the table saved at the last full index flush says, where
    the records those units indexed are still in the log."""
    damaged = {}
    for topic, queue_id, max_offset, indexed_end in queue_table:
        config = topics.get(topic)
        if config is None or queue_id >= config.stored_queues or indexed_end > tail:
            continue
        queue = queues.get(topic, queue_id, config.queue_type)
        if queue.max_offset < max_offset:
            damaged[(topic, queue_id)] = queue
    return damaged


def _scan_start(commitlog: CommitLog, flushed: int) -> int:
    """The start of the segment before the one holding the checkpointed flush point."""
    files = commitlog.segments.files
    if not files:
        return 0
    at = commitlog.segments.find(min(flushed, files[-1].end - 1)) or files[0]
    index = files.index(at)
    return files[max(0, index - 1)].start


def _drop_units_past(queue: ConsumeQueue, commitlog: CommitLog, tail: int) -> int:
    """Drop trailing units that point at or past ``tail`` or at a record that does not match."""
    dropped = 0
    while True:
        unit = queue.last_unit()
        if unit is None or _unit_matches(unit, commitlog, tail):
            return dropped
        queue.truncate_units(queue.unit_count - 1)
        dropped += 1


def _unit_matches(unit, commitlog: CommitLog, tail: int) -> bool:
    if unit.size <= 0 or unit.physical_offset < commitlog.min_offset or unit.physical_offset + unit.size > tail:
        return False
    if unit.physical_offset in commitlog.damaged:  # a kept damaged record: the unit holds its offsets
        return True
    header = commitlog.view(unit.physical_offset, fmt.HEADER.size)
    total, magic, _crc, _queue_id, _flag, queue_offset = fmt.HEADER.unpack_from(header)[:6]
    return magic == fmt.MAGIC_V1 and total == unit.size and queue_offset == unit.base_offset
