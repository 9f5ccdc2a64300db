"""The producer's RecordAccumulator alone, without a broker: batching by key and size, the age
check on an injected clock, draining by request size, and the bound on held bytes."""

import threading

import pytest

from rmq_spark import BufferFullError, Message
from rmq_spark.producer.accumulator import RecordAccumulator
from rmq_spark.producer.batch import BatchKey, ProducerBatch
from rmq_spark.producer.config import ProducerConfig
from support.clock import Clock

KIB = 1024


def accumulator(clock=None, **config) -> RecordAccumulator:
    settings = {"batch_max_bytes": 4 * KIB, "batch_max_delay_ms": 10, "total_batch_max_bytes": 64 * KIB,
                **config}
    return RecordAccumulator(ProducerConfig(**settings), clock or Clock())


def body(size: int) -> bytes:
    return b"x" * size


def test_a_batch_is_ready_once_its_bodies_reach_batch_max_bytes():
    acc = accumulator()
    assert [acc.append(Message("t", body(KIB)), ("", 0), 1.0)[1] for _ in range(4)] == [False, False, False, True]
    [batch] = acc.drain(1 << 20)
    assert (batch.key, len(batch.messages), batch.body_bytes) == (BatchKey("t", 0, None), 4, 4 * KIB)
    assert acc.drain(1 << 20) == []


def test_messages_are_grouped_by_topic_queue_and_tag():
    acc = accumulator()
    for topic, queue_id, tags in [("a", 0, None), ("a", 1, None), ("a", 0, "red"), ("b", 0, None), ("a", 0, None)]:
        acc.append(Message(topic, b"m", tags=tags), ("", queue_id), 1.0)
    assert acc.seal_aged(flush_all=True) == 4
    batches = {batch.key: len(batch.messages) for batch in acc.drain(1 << 20)}
    assert batches == {BatchKey("a", 0, None): 2, BatchKey("a", 1, None): 1, BatchKey("a", 0, "red"): 1,
                       BatchKey("b", 0, None): 1}


def test_batches_go_once_batch_max_delay_ms_old():
    clock = Clock()
    acc = accumulator(clock)
    acc.append(Message("t", b"old"), ("", 0), 1.0)
    clock.now = 6
    acc.append(Message("t", b"young"), ("", 1), 1.0)
    clock.now = 9.9
    assert acc.seal_aged() == 0
    clock.now = 10
    assert acc.seal_aged() == 1
    assert [b.key.queue_id for b in acc.drain(1 << 20)] == [0]
    clock.now = 16
    assert acc.seal_aged() == 1
    assert [b.key.queue_id for b in acc.drain(1 << 20)] == [1]


def test_drain_takes_one_batch_at_least_then_what_fits_the_request():
    acc = accumulator()
    for queue_id in range(3):
        for _ in range(4):
            acc.append(Message("t", body(KIB)), ("", queue_id), 1.0)
    assert [b.key.queue_id for b in acc.drain(8 * KIB)] == [0, 1]
    assert [b.key.queue_id for b in acc.drain(KIB)] == [2]  # larger than the request: goes alone


def test_a_full_buffer_refuses_after_the_timeout_saying_what_to_do():
    acc = accumulator(batch_max_bytes=4 * KIB, total_batch_max_bytes=8 * KIB)
    for _ in range(8):
        acc.append(Message("t", body(KIB)), ("", 0), 1.0)
    with pytest.raises(BufferFullError, match="raise total_batch_max_bytes"):
        acc.append(Message("t", b"one more"), ("", 0), 0.0)
    assert acc.held_bytes == 8 * KIB  # the refused message holds nothing


def test_released_bytes_let_a_waiting_append_in():
    acc = accumulator(batch_max_bytes=4 * KIB, total_batch_max_bytes=4 * KIB)
    for _ in range(4):
        acc.append(Message("t", body(KIB)), ("", 0), 1.0)
    [batch] = acc.drain(1 << 20)
    appended = threading.Event()

    def append_when_room():
        acc.append(Message("t", body(KIB)), ("", 0), 10.0)
        appended.set()

    waiter = threading.Thread(target=append_when_room)
    waiter.start()
    assert not appended.wait(0.1)  # no room yet
    acc.release(batch)
    assert appended.wait(5)  # woken by the release, long before its own 10 s
    waiter.join(10)
    assert acc.held_bytes == KIB


def test_a_message_larger_than_the_bound_goes_when_nothing_else_is_held():
    acc = accumulator(batch_max_bytes=4 * KIB, total_batch_max_bytes=4 * KIB)
    acc.append(Message("t", body(10 * KIB)), ("", 0), 0.0)
    assert acc.held_bytes == 10 * KIB


def test_wait_empty_waits_for_every_drained_batch_to_be_released():
    acc = accumulator()
    acc.append(Message("t", b"m"), ("", 0), 1.0)
    assert not acc.wait_empty(0.0)  # open
    acc.seal_aged(flush_all=True)
    [batch] = acc.drain(1 << 20)
    assert not acc.wait_empty(0.0)  # in flight
    acc.release(batch)
    assert acc.wait_empty(0.0) and acc.held_bytes == 0


def test_hold_counts_a_batch_made_elsewhere_until_released():
    acc = accumulator(batch_max_bytes=4 * KIB, total_batch_max_bytes=4 * KIB)
    batch = ProducerBatch.of(BatchKey("t", 0, None), [Message("t", body(3 * KIB))])
    acc.hold(batch, 1.0)
    assert acc.held_bytes == 3 * KIB and not acc.wait_empty(0.0)
    with pytest.raises(BufferFullError):
        acc.hold(ProducerBatch.of(BatchKey("t", 1, None), [Message("t", body(2 * KIB))]), 0.0)
    acc.release(batch)
    assert acc.wait_empty(0.0)
