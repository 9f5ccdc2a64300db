"""The source's pure planning: admission control (read limits to the record, no queue
starved) and partition planning (many queues coalesced, large ranges split, deterministic)."""

import itertools

import pytest

from rmq_spark.spark.planning import QueueRange, plan_partitions, rate_limit, should_delay


def backlog_of(sizes, start=0):
    return {("t", q): (start, n) for q, n in enumerate(sizes)}


@pytest.mark.parametrize("sizes, limit", [
    ([1000, 10, 1], 100), ([5, 5, 5, 5], 7), ([3, 0, 900, 97], 50), ([1] * 50, 49), ([10 ** 9, 1], 2),
    ([7, 7], 14), ([7, 7], 1000), ([123, 456, 789], 1),
])
def test_rate_limit_takes_exactly_the_limit_and_never_more_than_a_queue_has(sizes, limit):
    taken = rate_limit(backlog_of(sizes), limit)
    assert sum(taken.values()) == min(limit, sum(sizes))
    assert all(0 < taken[("t", q)] <= n for q, n in enumerate(sizes) if ("t", q) in taken)
    if limit >= sum(1 for n in sizes if n):
        assert all(("t", q) in taken for q, n in enumerate(sizes) if n), "a queue with a backlog was starved"


def test_rate_limit_is_proportional_to_the_backlog():
    sizes = [9001, 1001, 1]
    taken = rate_limit(backlog_of(sizes), 1000)
    assert taken[("t", 2)] == 1  # not starved
    for q in (0, 1):
        assert abs(taken[("t", q)] - 1000 * sizes[q] / sum(sizes)) <= 3, taken


def test_rate_limit_takes_turns_when_queues_outnumber_the_limit():
    """10 queues with a backlog, 3 records a trigger: every queue is served within 4 triggers,
    and a replay of the same start picks the same queues."""
    positions = {("t", q): 0 for q in range(10)}
    served = []
    for _ in range(4):
        backlog = {key: (offset, 100 - offset) for key, offset in positions.items()}
        taken = rate_limit(backlog, 3)
        assert taken == rate_limit(backlog, 3)
        assert sum(taken.values()) == 3
        served += list(taken)
        for key, n in taken.items():
            positions[key] += n
    assert set(served) == set(positions)


def test_should_delay_until_enough_records_or_the_delay_passed():
    assert should_delay(available=5, min_records=10, now_ms=1_000, last_trigger_ms=0, max_delay_ms=5_000)
    assert not should_delay(available=10, min_records=10, now_ms=1_000, last_trigger_ms=0, max_delay_ms=5_000)
    assert not should_delay(available=5, min_records=10, now_ms=5_000, last_trigger_ms=0, max_delay_ms=5_000)


def ranges(n_queues, records, topic="t"):
    return [QueueRange(topic, q, 100, 100 + records) for q in range(n_queues)]


def flat(partitions):
    return sorted((r.topic, r.queue_id, r.start, r.end) for p in partitions for r in p)


def covered(partitions):
    """Every offset of every queue, as (topic, queue, offset) – to check nothing is lost or doubled."""
    return sorted((r.topic, r.queue_id, o) for p in partitions for r in p for o in range(r.start, r.end))


def test_ten_thousand_queues_become_few_even_tasks():
    parts = plan_partitions(ranges(10_000, 3), max_partitions=32)
    assert len(parts) == 32
    sizes = [sum(r.records for r in p) for p in parts]
    assert max(sizes) - min(sizes) <= 3
    assert flat(parts) == flat([ranges(10_000, 3)])


def test_few_queues_keep_a_task_each():
    parts = plan_partitions(ranges(16, 1000), max_partitions=32)
    assert len(parts) == 16 and all(len(p) == 1 for p in parts)


def test_large_ranges_are_split_under_max_records_per_partition():
    parts = plan_partitions([QueueRange("t", 0, 5, 1005), QueueRange("t", 1, 0, 10)], max_records_per_partition=300,
                            max_partitions=2)
    assert all(sum(r.records for r in p) <= 300 for p in parts)
    assert covered(parts) == covered([[QueueRange("t", 0, 5, 1005), QueueRange("t", 1, 0, 10)]])
    assert len(parts) >= 4  # the cap wins over maxPartitions


def test_min_partitions_splits_the_largest_ranges():
    original = [QueueRange("t", 0, 0, 1000), QueueRange("t", 1, 0, 10)]
    parts = plan_partitions(original, min_partitions=5, max_partitions=32)
    assert len(parts) == 5
    assert covered(parts) == covered([original])
    assert max(sum(r.records for r in p) for p in parts) <= 250


def test_planning_is_deterministic_and_drops_empty_ranges():
    mixed = [QueueRange(f"t{i % 3}", q, q, q + (q * 7919) % 500) for i, q in itertools.product(range(3), range(200))]
    first = plan_partitions(mixed, max_records_per_partition=700, min_partitions=4, max_partitions=16)
    again = plan_partitions(list(reversed(mixed)), max_records_per_partition=700, min_partitions=4, max_partitions=16)
    assert first == again
    assert covered(first) == covered([mixed])
    assert all(r.records > 0 for p in first for r in p)
    assert plan_partitions([QueueRange("t", 0, 5, 5)], max_partitions=4) == []
