"""Pure planning of the source: how many records each queue gives a trigger (admission
control), and how the ranges of a micro-batch become Spark partitions.

Nothing here talks to the broker or to Spark, so that every rule is tested on its own and
replays plan the same way: the same inputs give the same outputs, always.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class QueueRange:
    """Offsets ``start`` .. ``end - 1`` of one queue (of ``broker``: "" through our door)."""

    topic: str
    queue_id: int
    start: int
    end: int
    broker: str = ""

    @property
    def order(self) -> tuple:
        return self.topic, self.broker, self.queue_id, self.start

    @property
    def records(self) -> int:
        return self.end - self.start


def rate_limit(backlog: dict, limit: int) -> dict:
    """Split ``limit`` records over queues in proportion to their backlog; returns how many
    each queue reads (a queue absent reads nothing).

    ``backlog``: {queue key: (start offset, records available)}, keys that sort. The result sums to
    exactly ``min(limit, total backlog)``. No queue with a backlog is starved: each gets at
    least one record when the limit allows it; when there are more such queues than records,
    they take turns, round robin, starting where the start offsets point (so a replay picks the
    same queues, and the next trigger the queues after them).
    """
    waiting = sorted(key for key, (_, available) in backlog.items() if available > 0)
    total = sum(backlog[key][1] for key in waiting)
    if total <= limit:
        return {key: backlog[key][1] for key in waiting}
    if limit < len(waiting):
        first = sum(backlog[key][0] for key in waiting) % len(waiting)
        turn = (waiting[first:] + waiting[:first])[:limit]
        return {key: 1 for key in turn}
    # Each waiting queue gets one; the rest is shared by largest remainders of the proportional
    # shares (ties to the queue first in order). A share never passes the queue's backlog.
    rest = limit - len(waiting)
    above_one = total - len(waiting)
    shares = {key: rest * (backlog[key][1] - 1) / above_one for key in waiting}
    given = {key: 1 + math.floor(share) for key, share in shares.items()}
    left = limit - sum(given.values())
    by_remainder = sorted(waiting, key=lambda key: (-(shares[key] - math.floor(shares[key])), key))
    for key in by_remainder[:left]:
        given[key] += 1
    return given


def should_delay(available: int, min_records: int, now_ms: int, last_trigger_ms: int, max_delay_ms: int) -> bool:
    """minRecordsPerTrigger: hold the trigger while fewer records wait, until maxTriggerDelay
    has passed since the last trigger that ran."""
    return available < min_records and now_ms - last_trigger_ms < max_delay_ms


def plan_partitions(ranges: list, *, max_records_per_partition: int | None = None, min_partitions: int | None = None,
                    max_partitions: int) -> list:
    """Group the ranges of a micro-batch into partitions (lists of QueueRange), one Spark task
    each, which reads all its ranges with one ReadRanges call.

    1. A range above ``max_records_per_partition`` is cut into equal pieces under it.
    2. While there are fewer than ``min_partitions`` pieces, the largest is cut in two.
    3. The pieces are packed into ``min(pieces, max_partitions)`` partitions, largest first
       into the partition holding the fewest records, so that many small queues share a task
       and the tasks are even; ``max_records_per_partition`` is never passed (it opens more
       partitions when it must).
    Ranges within a partition are in (topic, broker, queue, offset) order; partitions in the
    order of their first range. Empty ranges are dropped.
    """
    pieces = [r for r in ranges if r.records > 0]
    if max_records_per_partition:
        pieces = [piece for r in pieces for piece in _cut(r, math.ceil(r.records / max_records_per_partition))]
    if min_partitions and len(pieces) < min_partitions:
        pieces = _split_largest(pieces, min_partitions)
    if not pieces:
        return []
    count = min(len(pieces), max_partitions)
    bins = [(0, i, []) for i in range(count)]  # (records, index, ranges): a heap, fewest records on top
    extra = count
    for piece in sorted(pieces, key=lambda r: (-r.records, r.order)):
        records, index, members = heapq.heappop(bins)
        if max_records_per_partition and members and records + piece.records > max_records_per_partition:
            heapq.heappush(bins, (records, index, members))  # the emptiest cannot take it: none can
            records, index, members, extra = 0, extra, [], extra + 1
        members.append(piece)
        heapq.heappush(bins, (records + piece.records, index, members))
    partitions = [sorted(members, key=lambda r: r.order) for _, _, members in bins if members]
    return sorted(partitions, key=lambda members: members[0].order)


def _cut(r: QueueRange, parts: int) -> list:
    """``r`` in ``parts`` consecutive pieces of near-equal size."""
    if parts <= 1:
        return [r]
    bounds = [r.start + r.records * i // parts for i in range(parts + 1)]
    return [QueueRange(r.topic, r.queue_id, a, b, r.broker) for a, b in zip(bounds, bounds[1:]) if b > a]


def _split_largest(pieces: list, wanted: int) -> list:
    heap = [(-r.records, r.order, r) for r in pieces]
    heapq.heapify(heap)
    while len(heap) < wanted and heap and -heap[0][0] > 1:
        _, _, largest = heapq.heappop(heap)
        for piece in _cut(largest, 2):
            heapq.heappush(heap, (-piece.records, piece.order, piece))
    return [entry[-1] for entry in heap]
