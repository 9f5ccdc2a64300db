"""SimpleCQ and BatchCQ: lookups by offset at and inside batch boundaries, by store time,
min / max offsets, and reads of offset ranges."""

import os
import threading

import pytest

from broker_sim.store import BatchPut, GetStatus, QueueType, decode_record
from rmq_wire import record as fmt
from support.clock import Clock


@pytest.fixture
def clocked(open_store):
    clock = Clock(1_000_000)
    return open_store(now_ms=clock), clock


def fill_batches(store, topic, sizes, clock=None, step_ms=10):
    """Inner batches of the given sizes into queue 0; returns their base offsets."""
    bases = []
    for n in sizes:
        result = store.put_inner_batch(topic, 0, BatchPut(b"batch-%d" % n, n))
        assert result.ok, result.detail
        bases.append(result.queue_offset)
        if clock:
            clock.now += step_ms
    assert store.wait_dispatched(5)
    return bases


def test_batch_cq_lookup_at_boundaries_and_inside(store):
    store.create_topic("b", 1, "BatchCQ")
    sizes = [3, 1, 7, 2, 5, 4, 1, 1, 9, 6, 2, 8, 3, 3, 1, 10, 2, 4, 5]  # 19 units: three index files of 8
    bases = fill_batches(store, "b", sizes)
    assert len(os.listdir(store.paths.queue_index(QueueType.BATCH_CQ, "b", 0))) == 3
    for base, n in zip(bases, sizes):
        for offset in range(base, base + n):
            unit = store.lookup("b", 0, offset)
            assert (unit.base_offset, unit.count) == (base, n), offset
    assert store.lookup("b", 0, sum(sizes)) is None
    assert store.lookup("b", 0, -1) is None
    assert (store.min_offset("b", 0), store.max_offset("b", 0)) == (0, sum(sizes))


def test_simple_cq_lookup_is_per_message(store):
    store.create_topic("s", 1)
    batch = fmt.encode_message_batch([(b"m%d" % i, {"TAGS": "T%d" % (i % 3)}, 0) for i in range(40)])
    assert store.put_early_batch("s", 0, batch).ok
    store.wait_dispatched(5)
    assert len(os.listdir(store.paths.queue_index(QueueType.SIMPLE_CQ, "s", 0))) == 3  # 16 units a file
    for offset in range(40):
        unit = store.lookup("s", 0, offset)
        assert (unit.base_offset, unit.count) == (offset, 1)
        assert unit.tags_code == fmt.java_string_hash("T%d" % (offset % 3))
        assert bytes(decode_record(store.commitlog.view(unit.physical_offset, unit.size)).body) == b"m%d" % offset
    assert store.lookup("s", 0, 40) is None


@pytest.mark.parametrize("queue_type", ["SimpleCQ", "BatchCQ"])
def test_lookup_by_store_time(clocked, queue_type):
    store, clock = clocked
    store.create_topic("t", 1, queue_type)
    times = []
    for i in range(20):
        times.append(clock.now)
        assert store.put_message("t", 0, b"m").ok
        clock.now += 100 if i != 9 else 1000
    store.wait_dispatched(5)
    assert store.offset_for_timestamp("t", 0, 0) == 0
    for offset, ts in enumerate(times):
        assert store.offset_for_timestamp("t", 0, ts) == offset
        assert store.offset_for_timestamp("t", 0, ts - 1) == offset
        assert store.offset_for_timestamp("t", 0, ts + 1) == offset + 1
    assert store.offset_for_timestamp("t", 0, times[-1] + 1) == 20  # later than all: the max offset


def test_batch_cq_time_lookup_returns_the_batch_base(clocked):
    store, clock = clocked
    store.create_topic("b", 1, "BatchCQ")
    bases = fill_batches(store, "b", [4, 4, 4, 4, 4, 4, 4, 4, 4, 4], clock, step_ms=10)
    start = 1_000_000
    assert [store.offset_for_timestamp("b", 0, start + 10 * i - 5) for i in range(10)] == bases


def test_reads_return_whole_stored_records_covering_the_range(store):
    store.create_topic("b", 1, "BatchCQ")
    bases = fill_batches(store, "b", [5, 5, 5, 5])  # 0-4, 5-9, 10-14, 15-19
    read = store.get_messages("b", 0, 7, 12)
    assert read.status is GetStatus.FOUND
    assert [(b.base_offset, b.count) for b in read.batches] == [(5, 5), (10, 5)]
    assert read.next_begin_offset == 12  # the end asked for; the reader cuts the batch
    assert (read.min_offset, read.max_offset) == (0, 20)
    assert bytes(decode_record(read.batches[0].data).body) == b"batch-5"
    assert isinstance(read.batches[0].data, memoryview)

    read = store.get_messages("b", 0, 4, 5)
    assert [(b.base_offset, b.count) for b in read.batches] == [(0, 5)] and read.next_begin_offset == 5
    assert bases == [0, 5, 10, 15]


def test_reads_stop_at_the_byte_budget(store):
    store.create_topic("s", 1)
    for _i in range(30):
        store.put_message("s", 0, b"x" * 1000)
    store.wait_dispatched(5)
    read = store.get_messages("s", 0, 0, max_bytes=5000)
    assert 5 <= len(read.batches) <= 6 and sum(b.data.nbytes for b in read.batches[:-1]) < 5000
    assert read.next_begin_offset == len(read.batches)
    one = store.get_messages("s", 0, 3, max_bytes=1)
    assert [b.base_offset for b in one.batches] == [3]  # always at least one record


def test_read_statuses(store):
    store.create_topic("s", 2)
    for _ in range(3):
        store.put_message("s", 0, b"x")
    store.wait_dispatched(5)
    assert store.get_messages("s", 1, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_messages("s", 5, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.get_messages("nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    at_end = store.get_messages("s", 0, 3)
    assert (at_end.status, at_end.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 3)
    past = store.get_messages("s", 0, 9)
    assert (past.status, past.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 3)
    with pytest.raises(ValueError, match="bad read range"):
        store.get_messages("s", 0, 2, 2)
    with pytest.raises(ValueError, match="bad read range"):
        store.get_messages("s", 0, -1)


def test_offset_too_small_after_the_head_is_gone(store):
    store.create_topic("s", 1)
    for _ in range(40):
        store.put_message("s", 0, b"x")
    store.wait_dispatched(5)
    queue = store.queues.find("s", 0)
    queue.files.files.pop(0).destroy()  # as retention would delete the oldest index file
    too_small = store.get_messages("s", 0, 3)
    assert (too_small.status, too_small.next_begin_offset, too_small.min_offset) == (GetStatus.OFFSET_TOO_SMALL, 16, 16)


def test_a_message_is_readable_only_once_indexed(store):
    store.create_topic("s", 1)
    store.dispatcher.stop()
    store.put_message("s", 0, b"x")
    assert store.max_offset("s", 0) == 0
    assert store.get_messages("s", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    store.dispatcher.dispatch()
    assert store.max_offset("s", 0) == 1
    store.dispatcher.start()


def test_waiters_are_woken_by_the_dispatcher(store):
    store.create_topic("s", 1)
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait_for_messages("s", 0, 0, timeout_s=10)))
    waiter.start()
    store.put_message("s", 0, b"x")
    waiter.join(10)
    assert woke == [True]
    assert store.wait_for_messages("s", 0, 1, timeout_s=0.05) is False


def test_redispatch_is_idempotent(store):
    store.create_topic("b", 1, "BatchCQ")
    fill_batches(store, "b", [2, 3, 4])
    store.dispatcher.dispatch(limit=store.commitlog.max_offset)
    before = [store.lookup("b", 0, o) for o in range(9)]
    store.dispatcher.position = 0
    store.dispatcher.dispatch(limit=store.commitlog.max_offset)
    assert [store.lookup("b", 0, o) for o in range(9)] == before
    assert store.queues.find("b", 0).unit_count == 3


def test_index_layout_on_disk(store):
    store.create_topic("b", 1, "BatchCQ")
    store.create_topic("s", 1, QueueType.SIMPLE_CQ)
    store.put_inner_batch("b", 0, BatchPut(b"p", 3, properties={"TAGS": "x"}))
    store.put_message("s", 0, b"p")
    store.wait_dispatched(5)
    store.flush()
    raw = (store.paths.queue_index(QueueType.BATCH_CQ, "b", 0) / ("0" * 20)).read_bytes()
    assert len(raw) == 8 * 46
    import struct
    physical, size, tags, store_ts, base, count, compacted, reserved = struct.unpack_from(">qiqqqhii", raw)
    assert (physical, base, count, compacted, reserved) == (0, 0, 3, -1, 0)
    assert tags == fmt.java_string_hash("x") and size > 91 and store_ts > 0
    assert raw[46:92] == bytes(46)
    simple = (store.paths.queue_index(QueueType.SIMPLE_CQ, "s", 0) / ("0" * 20)).read_bytes()
    assert len(simple) == 16 * 20 and struct.unpack_from(">qiq", simple) == (size, simple_size(store), 0)


def simple_size(store):
    return store.lookup("s", 0, 0).size
