"""Read-your-writes in the store (issue 29, point 5): a put is answered once its records are in
the commitlog, and a read started after it (max offsets, messages, offsets by time) sees them
while the dispatcher lags behind (``LaggingDispatch``); a read waits only for what it asks for,
at most ``index_wait_ms``, and not at all when indexing is stopped."""

from __future__ import annotations

import logging

from broker_sim.store import BatchPut, GetStatus, QueueType, StoreConfig
from rmq_wire import record as fmt
from support.lagging_dispatch import LaggingDispatch


def put_rmq_batch(store, topic: str, queue_id: int, bodies: list[bytes]):
    payload = fmt.encode_message_batch([(body, {}, 0) for body in bodies])
    return store.put_inner_batch(topic, queue_id, BatchPut(payload, len(bodies)))


def fill(store, topic: str, queue_type=QueueType.SIMPLE_CQ, messages: int = 5) -> None:
    store.create_topic(topic, 2, queue_type)
    for i in range(messages):
        if queue_type is QueueType.BATCH_CQ:
            assert put_rmq_batch(store, topic, 0, [b"b%d-%d" % (i, j) for j in range(3)]).ok
        else:
            assert store.put_message(topic, 0, b"m%d" % i).ok
    assert store.wait_dispatched(10)


def test_max_offset_and_reads_wait_for_what_was_stored_before_them(store):
    fill(store, "simple")
    fill(store, "batch", QueueType.BATCH_CQ)
    with LaggingDispatch(store) as lag:
        assert store.put_message("simple", 0, b"after").ok
        assert lag.read(lambda: store.max_offset("simple", 0)) == 6
    with LaggingDispatch(store) as lag:
        assert put_rmq_batch(store, "batch", 0, [b"x", b"y"]).ok
        result = lag.read(lambda: store.get_messages("batch", 0, 15))
        assert (result.status, result.max_offset, [(b.base_offset, b.count) for b in result.batches]) == \
            (GetStatus.FOUND, 17, [(15, 2)])
    with LaggingDispatch(store) as lag:
        assert store.put_message("simple", 1, b"first of its queue").ok
        assert lag.read(lambda: store.offset_for_timestamp("simple", 1, 2**62)) == 1


def test_a_read_waits_only_for_the_offsets_it_asks_for(store):
    fill(store, "simple")
    with LaggingDispatch(store) as lag:
        assert store.put_message("simple", 0, b"not asked for").ok
        waits = store.reads_waited_for_index
        result = lag.read(lambda: store.get_messages("simple", 0, 2, 5))  # offset 5 is the new one
        assert store.reads_waited_for_index == waits  # everything below 5 was indexed: no wait
        assert [b.base_offset for b in result.batches] == [2, 3, 4]
        assert store.max_offset("simple", 1) == 0  # nothing stored there: no wait either
        assert store.get_messages("simple", 0, 9).status is GetStatus.OFFSET_OVERFLOW_BADLY  # past what is stored
        assert store.reads_waited_for_index == waits


def test_a_read_waits_at_most_index_wait_ms_then_sees_what_is_indexed(open_store, caplog):
    store = open_store(StoreConfig(index_wait_ms=50))
    fill(store, "simple")
    with LaggingDispatch(store), caplog.at_level(logging.WARNING):
        assert store.put_message("simple", 0, b"late").ok
        assert store.max_offset("simple", 0) == 5
    assert "waited 50 ms (index_wait_ms) for offsets below 6" in caplog.text
    assert store.max_offset("simple", 0) == 6


def test_reads_do_not_wait_while_the_dispatcher_is_stopped(store):
    fill(store, "batch", QueueType.BATCH_CQ)
    store.dispatcher.stop()
    assert put_rmq_batch(store, "batch", 0, [b"unindexed"]).ok
    waits = store.reads_waited_for_index
    assert store.max_offset("batch", 0) == 15
    assert store.get_messages("batch", 0, 15).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.reads_waited_for_index == waits
    store.dispatcher.start()
    assert store.max_offset("batch", 0) == 16
