"""A stored batch that does not decode (stored before payloads were checked, issue 15) in a
pop: the other deliveries of the pop decode; its own raises UndecodableBatchError, fails in
the consume loop without stopping it, and goes through the retry topic to the DLQ."""

import dataclasses

import pytest

from broker_sim.store import BatchPut, MessageStore
from rmq_spark import OffsetRange, PopConsumer, RangeReader, UndecodableBatchError
from rmq_wire.codec import encode_messages
from support.pop import CONFIG


def payload(first: int, count: int) -> bytes:
    return encode_messages([(b"m%d" % i, None, None, None, None) for i in range(first, first + count)], "rmq", "none")


@pytest.fixture
def broker(tmp_path, clock, new_broker):
    """Topic "p" (BatchCQ): good batch 0-2, poison batch 3-5 (it holds 2 messages), good 6-8."""
    with MessageStore(tmp_path / "data") as store:  # no payload check: as stored before it
        store.create_topic("p", 1, "BatchCQ")
        for data, count in ((payload(0, 3), 3), (payload(3, 2), 3), (payload(6, 3), 3)):
            assert store.put_inner_batch("p", 0, BatchPut(data, count)).ok
    return new_broker(tmp_path / "data", pop_config=dataclasses.replace(CONFIG, max_reconsume_times=1),
                        pop_now_ms=clock)


def revive(broker, clock):
    clock.step(1_001)
    broker.core.pop_service.revive_expired()
    assert broker.core.store.wait_dispatched(10)


def test_only_the_bad_delivery_fails(broker):
    with PopConsumer(broker.endpoint, "g", "p", invisible_ms=1_000, poll_ms=0) as consumer:
        first, bad, last = consumer.receive()
        assert first.records.column("body").to_pylist() == [b"m0", b"m1", b"m2"]
        assert [m.body for m in last.messages()] == [b"m6", b"m7", b"m8"]
        with pytest.raises(UndecodableBatchError) as caught:
            _ = bad.records
        assert "p queue 0: the stored batch at offsets 3 to 5 does not decode" in str(caught.value)
        with pytest.raises(UndecodableBatchError):
            bad.messages()


def test_the_consume_loop_goes_on_and_the_bad_batch_ends_in_the_dlq(broker, clock):
    bodies = []
    with PopConsumer(broker.endpoint, "g", "p", invisible_ms=1_000, poll_ms=0) as consumer:
        handled = consumer.consume(lambda d: bodies.extend(d.records.column("body").to_pylist()), max_deliveries=3)
        assert (handled, bodies) == (2, [b"m0", b"m1", b"m2", b"m6", b"m7", b"m8"])
        revive(broker, clock)  # to the retry topic
        (again,) = consumer.receive()
        assert (again.retry, again.reconsume_times, again.count) == (True, 1, 3)
        with pytest.raises(UndecodableBatchError):
            _ = again.records
        revive(broker, clock)  # past max_reconsume_times: to the DLQ
        assert consumer.receive() == []
    assert broker.core.store.max_offset("%DLQ%g", 0) == 3
    with RangeReader(broker.endpoint, on_data_loss="skip") as reader:  # the DLQ keeps the batch as stored
        assert reader.read_table([OffsetRange("%DLQ%g", 0, 0, 3)]).num_rows == 0
