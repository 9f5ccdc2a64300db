"""Range reads: the stored records of a queue's offset range, handed out as they are (views of
the store's files, valid while the caller's ``consume`` runs), within a byte budget shared by
the ranges of one request, passed through a tag filter. Expected ends (nothing there yet, an
offset below the minimum or past the end, the budget spent, a damaged record) are statuses."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from broker_sim.core.errors import BrokerFault, Reason, refused
from broker_sim.store import GetStatus, TagFilter, TopicConfig, same_topic


class RangeStatus(enum.Enum):
    FOUND = "FOUND"  # records were read (maybe none passed the filter)
    NO_MESSAGE = "NO_MESSAGE"  # nothing at start yet: read again later from next_offset
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # start is below the minimum: next_offset is the minimum
    OFFSET_OVERFLOW = "OFFSET_OVERFLOW"  # start is past the end: next_offset is the end
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"  # ranges before it took the budget
    RECORD_CORRUPTED = "RECORD_CORRUPTED"  # the record at corrupted_from is damaged: detail says why


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` .. ``end - 1`` of a queue; ``end`` None: up to its max offset at read time."""

    topic: str
    queue_id: int
    start: int
    end: int | None


class ReadBudget:
    """The request's byte budget, and optionally a message budget (RocketMQ's pull: whole
    records until ``max_messages`` are reached); its first record is returned even when larger."""

    def __init__(self, total: int, max_messages: int | None = None):
        self.left = total
        self.max_messages = max_messages
        self.returned = False
        self.exhausted = False
        self.messages = 0

    def fits(self, size: int) -> bool:
        if not self.returned:
            return True
        if size > self.left or (self.max_messages is not None and self.messages >= self.max_messages):
            self.exhausted = True  # later ranges get nothing either: ranges are served in order
        return not self.exhausted

    def take(self, size: int) -> None:
        self.left -= size
        self.returned = True
        if self.left <= 0:
            self.exhausted = True

    def step_bytes(self, most: int) -> int:
        """How much one store read may ask for: ``most``, less what the budget has left."""
        return max(1, min(most, self.left if self.returned else most))


_GET_STATUS = {
    GetStatus.OFFSET_TOO_SMALL: RangeStatus.OFFSET_TOO_SMALL,
    GetStatus.OFFSET_OVERFLOW_ONE: RangeStatus.NO_MESSAGE,
    GetStatus.OFFSET_OVERFLOW_BADLY: RangeStatus.OFFSET_OVERFLOW,
}


class RangeCursor:
    """Reads one range a store read at a time (``step``). Once a step says done, ``status``,
    ``next_offset`` (where to read on), ``min_offset`` / ``max_offset`` of the queue, and for a
    damaged record ``corrupted_from`` and ``detail``, say how the range ended."""

    def __init__(self, core, config: TopicConfig, queue_id: int, start: int, end: int | None,
                 tags: TagFilter | None, budget: ReadBudget, group: str = ""):
        self._core = core
        self.group = group  # who reads, for the broker's metrics ("": a range read names none)
        self.config, self.queue_id, self.start, self.end = config, queue_id, start, end
        self.tags = tags
        self.budget = budget
        self.next_offset = start
        self.status = RangeStatus.FOUND
        self.corrupted_from = 0
        self.detail = ""
        self.min_offset = self.max_offset = 0
        self._read_any = False

    def step(self, most_bytes: int, consume: Callable[[list, bool], object]):
        """Read up to ``most_bytes`` (less when the budget has less) and call ``consume(records,
        done)`` with the records that pass the filter and fit the budget, views of the store
        that are valid only during the call; its result."""
        with self._core.gate:
            records, done = self._step(most_bytes)
            return consume(records, done)

    def read_all(self, most_bytes: int) -> list:
        """Every record of the range the budget allows, by store reads of ``most_bytes``; the
        caller holds the core's gate while it uses them."""
        records, done = self._step(most_bytes)
        while not done:
            more, done = self._step(most_bytes)
            records += more
        return records

    def _step(self, most_bytes: int) -> tuple[list, bool]:
        out: list = []
        if self.budget.exhausted and not self._read_any:
            self.status = RangeStatus.BUDGET_EXHAUSTED
            self.min_offset, self.max_offset = self._core.queue_offsets(self.config, self.queue_id)
            return out, True
        store = self._core.store
        try:
            result = store.get_messages(self.config.name, self.queue_id, self.next_offset, self.end,
                                        max_bytes=self.budget.step_bytes(most_bytes))
        except Exception:
            if self._deleted():  # its index files went away under the read
                raise self._deleted_error() from None
            raise
        if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE or self._deleted():
            raise self._deleted_error()
        self.min_offset, self.max_offset = result.min_offset, result.max_offset
        if result.status is GetStatus.RECORD_CORRUPTED:  # the range ends before it, whatever was read
            self.status, self.corrupted_from, self.detail = RangeStatus.RECORD_CORRUPTED, self.next_offset, \
                result.detail
            self.next_offset = result.next_begin_offset
            return out, True
        if result.status is not GetStatus.FOUND:
            if not self._read_any:
                self._no_records(result)
            return out, True
        if self.end is None:
            self.end = result.max_offset  # up to the max offset at read time
        self._read_any = True
        messages = taken = 0
        try:
            for batch in result.batches:
                after = min(batch.base_offset + batch.count, self.end)
                if self.tags is None or self.tags.matches(batch):
                    size = len(batch.data)
                    if not self.budget.fits(size):
                        if self.next_offset == self.start:
                            self.status = RangeStatus.BUDGET_EXHAUSTED
                        return out, True
                    out.append(batch.data)
                    self.budget.take(size)
                    count = after - max(batch.base_offset, self.next_offset)
                    self.budget.messages += count
                    messages += count
                    taken += size
                self.next_offset = after  # past filtered records too
        finally:
            self._core.metrics.gave(self.config.name, self.group, messages, taken)
        done = not result.batches or self.next_offset >= self.end or self.budget.exhausted
        return out, done

    def _deleted(self) -> bool:
        """The topic was deleted (and maybe created again) since the read began."""
        return not same_topic(self._core.find_topic(self.config.name), self.config)

    def _deleted_error(self) -> BrokerFault:
        return refused(Reason.TOPIC_NOT_FOUND, f"topic {self.config.name!r} was deleted while it was being read; "
                                               "nothing more of it can be read (created again, it starts empty)")

    def _no_records(self, result) -> None:
        if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:  # nothing was ever stored in the queue
            self.status = RangeStatus.NO_MESSAGE if self.start == 0 else RangeStatus.OFFSET_OVERFLOW
            self.next_offset = 0
        else:
            self.status = _GET_STATUS[result.status]
            self.next_offset = self.start if result.status is GetStatus.OFFSET_OVERFLOW_ONE \
                else result.next_begin_offset
