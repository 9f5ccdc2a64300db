"""Recovery at open: find the valid tail of the commitlog, cut everything after it, and bring
the indexes back in line with the log.

1. Scan forward with CRC checks from a safe point (the segment before the checkpoint's) to the
   first record that is short, has an unknown magic, a wrong CRC or a wrong length; rebuild
   the idempotent producers' recent stamps from the records scanned.
2. Truncate the log there: a torn or corrupted tail is never served. A topic created at an
   offset past the new tail gets the tail as its creation offset, so that the records it is
   sent from now on (written from the tail) are indexed.
3. Drop index units that point past the tail, or whose record does not match them.
4. Re-dispatch every record after the last durably indexed one (idempotent per queue). A
   queue whose index lost units before that point (it has fewer than the queue table saved
   with the checkpoint, or a re-dispatched unit would leave a gap) is emptied and rebuilt by
   re-dispatching from the start of the log.
5. Rebuild the queues' next offsets from the indexes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from . import format as fmt
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .consume_queue import ConsumeQueue, ConsumeQueueTable
from .dispatcher import Dispatcher
from .errors import IndexGapError
from .producer_state import ProducerState, StampCollector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryReport:
    clean: bool  # the last stop was clean (no abort marker)
    scanned_from: int
    tail: int
    stop_reason: str
    dropped_units: int
    redispatched_records: int


def recover(commitlog: CommitLog, queues: ConsumeQueueTable, dispatcher: Dispatcher,
            checkpoint: Checkpoint, queue_table: list, topics, clean: bool,
            producers: ProducerState) -> RecoveryReport:
    start = _scan_start(commitlog, checkpoint.commitlog_flushed_offset)
    stamps = StampCollector(producers)
    tail, reason = commitlog.scan_valid_tail(start, stamps.visit)
    if stamps.incomplete_at is not None:  # an early batch cut short: none of it was acknowledged
        tail, reason = stamps.incomplete_at, f"a stamped early batch is cut short by the end ({reason})"
    commitlog.truncate(tail)
    commitlog.flush()  # what the scan accepted is on disk before anything is built on it
    clamped = topics.clamp_created_at(tail)
    if clamped:
        log.warning("the log now ends at %d, before the creation of topics %s: they start there", tail, clamped)
    dropped = sum(_drop_units_past(queue, commitlog, tail) for _key, queue in queues.all())
    damaged = _queues_that_lost_units(queues, queue_table, topics, tail)
    dispatcher.position = max(commitlog.min_offset, min(checkpoint.index_flushed_offset, tail))
    redispatched = 0
    while True:
        if damaged:
            log.warning("index of %s lost units: rebuilding from the start of the commitlog", sorted(damaged))
            for queue in damaged.values():
                queue.truncate_units(queue.first_unit)
            dispatcher.position = commitlog.min_offset
            damaged = {}
        try:
            redispatched += dispatcher.dispatch(limit=tail)
            break
        except IndexGapError as gap:
            damaged = {(gap.topic, gap.queue_id): queues.find(gap.topic, gap.queue_id)}
    for (topic, queue_id), queue in queues.all():
        commitlog.queue_offsets[(topic, queue_id)] = queue.max_offset
    report = RecoveryReport(clean, start, tail, reason, dropped, redispatched)
    if not clean or dropped:
        log.warning("recovered: %s", report)
    return report


def _queues_that_lost_units(queues: ConsumeQueueTable, queue_table: list, topics, tail: int) -> dict:
    """Queues with fewer units than the table saved at the last full index flush says, where
    the records those units indexed are still in the log."""
    damaged = {}
    for topic, queue_id, max_offset, indexed_end in queue_table:
        config = topics.get(topic)
        if config is None or queue_id >= config.queue_count or indexed_end > tail:
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
    header = commitlog.view(unit.physical_offset, fmt.HEADER.size)
    total, magic, _crc, _queue_id, _flag, queue_offset = fmt.HEADER.unpack_from(header)[:6]
    return magic == fmt.MAGIC_V1 and total == unit.size and queue_offset == unit.base_offset
