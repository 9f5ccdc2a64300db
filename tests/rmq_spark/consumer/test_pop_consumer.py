"""PopConsumer against a real broker over gRPC (the broker's pop clock is stepped by the test)."""

import threading

import pyarrow as pa
import pytest

from broker_sim.broker import Broker
from broker_sim.store import FlushMode, StoreConfig
from rmq_spark import (
    Admin,
    ConfigError,
    GroupNotFoundError,
    InvalidReceiptHandleError,
    InvalidRequestError,
    Message,
    PopConsumer,
    Producer,
    ReceiptHandleExpiredError,
    TopicNotFoundError,
)
from support.pop import CONFIG


@pytest.fixture
def broker(new_broker, clock):
    return new_broker(pop_config=CONFIG, pop_now_ms=clock)


def send(broker, topic, queue_type, messages, queues=1, batch=False):
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, queues, queue_type)
    with Producer(broker.endpoint, codec="arrow" if batch else "rmq") as producer:
        if batch:
            producer.send_batch(messages)
        else:
            for message in messages:
                producer.send(message)
    assert broker.core.store.wait_dispatched(10)


def revive(broker, clock, ms):
    clock.step(ms)
    broker.core.pop_service.revive_expired()
    assert broker.core.store.wait_dispatched(10)


def test_receive_ack_and_messages(broker):
    send(broker, "s", "SimpleCQ", [Message("s", b"m%d" % i, tags="A", keys=f"k{i}", properties={"p": str(i)})
                                   for i in range(5)])
    with PopConsumer(broker.endpoint, "g", "s", max_messages=3, poll_ms=0) as consumer:
        first = consumer.receive()
        assert [d.count for d in first] == [1, 1, 1]
        message = first[0].messages()[0]
        assert (message.topic, message.body, message.tags, message.keys, message.properties,
                message.reconsume_times) == ("s", b"m0", "A", "k0", {"p": "0"}, 0)
        assert message.receipt_handle == first[0].receipt_handle
        assert first[1].records.column("body").to_pylist() == [b"m1"]
        consumer.ack(first)
        rest = consumer.receive(max_messages=10)
        assert [d.records.column("body")[0].as_py() for d in rest] == [b"m3", b"m4"]
        consumer.ack(rest)
        assert consumer.receive() == []


def test_pops_and_acks_whose_state_writes_are_synced_run_in_the_pool_alike(tmp_path):
    synced = Broker(tmp_path / "synced", "127.0.0.1", 0, store_config=StoreConfig(flush_mode=FlushMode.SYNC))
    synced.start()
    try:
        assert synced.core.pop_waits_for_disk
        send(synced, "s", "SimpleCQ", [Message("s", b"m%d" % i) for i in range(3)])
        with PopConsumer(synced.endpoint, "g", "s", max_messages=2, poll_ms=0) as consumer:
            first = consumer.receive()
            assert [d.messages()[0].body for d in first] == [b"m0", b"m1"]
            consumer.ack(first)
            last = consumer.receive(poll_ms=1000)
            assert [d.messages()[0].body for d in last] == [b"m2"]  # the pool's wait
            assert consumer.receive(poll_ms=200, ack=last) == []  # acked in the pool, once, then waits
        assert synced.core.pop_service.in_flight("g") == 0
    finally:
        synced.stop(grace=1.0)


def test_a_batchcq_unit_arrives_as_one_delivery_as_arrow_and_structs(broker):
    send(broker, "b", "BatchCQ", [Message("b", b"x%d" % i, tags="T", keys=f"k{i}", queue_id=0) for i in range(4)],
         batch=True)
    with PopConsumer(broker.endpoint, "g", "b", poll_ms=0) as consumer:
        (delivery,) = consumer.receive()
        assert (delivery.count, delivery.offset, delivery.retry) == (4, 0, False)
        assert isinstance(delivery.records, pa.RecordBatch)
        assert delivery.records.column("queue_offset").to_pylist() == [0, 1, 2, 3]
        assert [m.body for m in delivery.messages()] == [b"x0", b"x1", b"x2", b"x3"]
        assert {m.receipt_handle for m in delivery.messages()} == {delivery.receipt_handle}
        consumer.ack(delivery)


def test_unacked_come_back_from_the_retry_queue_under_their_topic(broker, clock):
    send(broker, "s", "SimpleCQ", [Message("s", b"m", tags="A")])
    with PopConsumer(broker.endpoint, "g", "s", invisible_ms=1_000, poll_ms=0) as consumer:
        (first,) = consumer.receive()
        revive(broker, clock, 1_001)
        (again,) = consumer.receive()
        assert (again.retry, again.topic, again.reconsume_times) == (True, "s", 1)
        assert again.records.column("topic").to_pylist() == ["s"]
        assert again.messages()[0].body == b"m" and again.messages()[0].properties == {}
        with pytest.raises(ReceiptHandleExpiredError) as caught:
            consumer.ack([again, first])
        assert list(caught.value.failed) == [first.receipt_handle]
        assert broker.core.pop_service.in_flight("g") == 0  # `again` was acked all the same


def test_change_invisible_duration(broker, clock):
    send(broker, "s", "SimpleCQ", [Message("s", b"m")])
    with PopConsumer(broker.endpoint, "g", "s", invisible_ms=1_000, poll_ms=0) as consumer:
        (delivery,) = consumer.receive()
        moved = consumer.change_invisible_duration(delivery, 5_000)
        assert moved.receipt_handle != delivery.receipt_handle
        assert moved.invisible_until_ms == clock.now + 5_000
        with pytest.raises(ReceiptHandleExpiredError):
            consumer.change_invisible_duration(delivery.receipt_handle, 5_000)
        with pytest.raises(ReceiptHandleExpiredError):
            consumer.ack(delivery)
        consumer.ack(moved)


def test_errors_are_typed_and_say_what_to_do(broker):
    send(broker, "s", "SimpleCQ", [Message("s", b"m")])
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        PopConsumer(broker.endpoint, "g", "nope", poll_ms=0).receive()
    with pytest.raises(InvalidRequestError, match="invisible time 1 ms is out of range"):
        PopConsumer(broker.endpoint, "g", "s", invisible_ms=1, poll_ms=0).receive()
    with pytest.raises(GroupNotFoundError, match="popped nothing"):
        PopConsumer(broker.endpoint, "stranger", "s").ack("AAAA")
    with pytest.raises(ConfigError):
        PopConsumer(broker.endpoint, "g", [])
    with PopConsumer(broker.endpoint, "g", "s", poll_ms=0) as consumer:
        (delivery,) = consumer.receive()
        with pytest.raises(InvalidReceiptHandleError, match="not issued by this broker") as caught:
            consumer.ack([delivery.receipt_handle[:-4] + "AAAA", delivery])
        assert len(caught.value.failed) == 1
        with pytest.raises(InvalidReceiptHandleError):
            consumer.change_invisible_duration("garbage!", 1_000)
    assert broker.core.pop_service.in_flight() == 0


def test_consume_acks_what_the_handler_finishes_and_failures_come_back(broker, clock):
    send(broker, "s", "SimpleCQ", [Message("s", b"m%d" % i) for i in range(6)])
    failed_once = set()

    def handler(delivery):
        body = delivery.messages()[0].body
        if body in (b"m1", b"m4") and body not in failed_once:
            failed_once.add(body)
            raise RuntimeError("not now")

    with PopConsumer(broker.endpoint, "g", "s", invisible_ms=1_000, poll_ms=0) as consumer:
        assert consumer.consume(handler, max_deliveries=6) == 4
        assert broker.core.pop_service.in_flight("g") == 2
        revive(broker, clock, 1_001)
        assert consumer.consume(handler, max_deliveries=2) == 2
    assert broker.core.pop_service.in_flight("g") == 0 and failed_once == {b"m1", b"m4"}


def test_a_pop_carries_the_acks_of_what_was_finished_one_call_a_round(broker, clock, caplog):
    """``receive(ack=...)`` acks before it pops, in the same call: those messages never come back;
    a handle that cannot be acked is logged with its reason and the others are acked; the pop
    itself answers as ever, and in the synced pool's path (acks once, not again when it waits)."""
    send(broker, "s", "SimpleCQ", [Message("s", b"m%d" % i) for i in range(6)])
    with PopConsumer(broker.endpoint, "g", "s", max_messages=2, poll_ms=0, invisible_ms=1_000) as consumer:
        calls = []
        real_ack = consumer._transport.ack
        consumer._transport.ack = lambda *a: calls.append(a) or real_ack(*a)
        first = consumer.receive()
        second = consumer.receive(ack=first)
        assert broker.core.pop_service.in_flight("g") == 2  # first acked by the second pop
        third = consumer.receive(ack=[d.receipt_handle for d in second] + [first[0].receipt_handle])
        assert [d.messages()[0].body for d in first + second + third] == [b"m%d" % i for i in range(6)]
        assert "1 of 3 receipt handles carried by a pop were not acked" in caplog.text  # first[0] twice
        assert consumer.receive(ack=third, poll_ms=300) == []  # acks carried by a pop that waits and finds nothing
        assert calls == []  # no Ack call of its own
    assert broker.core.pop_service.in_flight("g") == 0
    revive(broker, clock, 1_001)
    with PopConsumer(broker.endpoint, "g", "s", poll_ms=0) as consumer:
        assert consumer.receive() == []  # nothing came back


def test_consume_acks_with_the_next_pop_and_the_last_round_with_an_ack(broker):
    send(broker, "s", "SimpleCQ", [Message("s", b"m%d" % i) for i in range(7)])
    with PopConsumer(broker.endpoint, "g", "s", max_messages=3, poll_ms=0) as consumer:
        acks = []
        real_ack = consumer._transport.ack
        consumer._transport.ack = lambda group, handles: acks.append(len(handles)) or real_ack(group, handles)
        assert consumer.consume(lambda delivery: None, max_deliveries=7) == 7
        assert acks == [1]  # rounds of 3, 3 and 1: the first two carried by the next pops
    assert broker.core.pop_service.in_flight("g") == 0


def test_consume_needs_an_end(broker):
    with PopConsumer(broker.endpoint, "g", "s") as consumer:
        with pytest.raises(ConfigError, match="needs an end"):
            consumer.consume(print)


def test_one_consumer_pops_many_topics(broker):
    send(broker, "a", "SimpleCQ", [Message("a", b"1")])
    send(broker, "b", "BatchCQ", [Message("b", b"2", queue_id=0), Message("b", b"3", queue_id=0)], batch=True)
    with PopConsumer(broker.endpoint, "g", ["a", "b"], poll_ms=0) as consumer:
        got = consumer.receive() + consumer.receive()
        assert sorted((d.topic, d.count) for d in got) == [("a", 1), ("b", 2)]
        consumer.ack(got)


def test_long_polling_is_woken_by_a_send(broker):
    with Admin(broker.endpoint) as admin:
        admin.create_topic("s", 2, "SimpleCQ")
    out = {}
    with PopConsumer(broker.endpoint, "g", "s", poll_ms=30_000) as consumer:
        thread = threading.Thread(target=lambda: out.setdefault("got", consumer.receive()))
        thread.start()
        for _ in range(2000):  # bounded: until the pop waits on the broker
            if broker.core.pop_service._waiting:
                break
            threading.Event().wait(0.005)
        with Producer(broker.endpoint) as producer:
            producer.send(Message("s", b"wake", queue_id=1))
        thread.join(30)
        assert not thread.is_alive()
        assert [d.messages()[0].body for d in out["got"]] == [b"wake"]


def test_orderly_consumer(broker, clock):
    send(broker, "s", "SimpleCQ", [Message("s", b"m%d" % i, queue_id=0) for i in range(3)])
    with PopConsumer(broker.endpoint, "g", "s", orderly=True, max_messages=2, invisible_ms=1_000,
                     poll_ms=0) as consumer:
        first = consumer.receive()
        assert [d.offset for d in first] == [0, 1]
        assert consumer.receive() == []
        clock.step(1_001)
        again = consumer.receive()
        assert [(d.offset, d.reconsume_times) for d in again] == [(0, 1), (1, 1)]
        consumer.ack(again)
        assert [d.offset for d in consumer.receive()] == [2]


def test_batched_messages_have_their_properties_and_records_only_when_asked(broker):
    send(broker, "b", "BatchCQ", [Message("b", b"x", properties={"p": "1"}, queue_id=0)] * 2, batch=True)
    with PopConsumer(broker.endpoint, "g", "b", poll_ms=0) as consumer:
        (delivery,) = consumer.receive()
        assert "properties" not in delivery.records.schema.names
        assert [m.properties for m in delivery.messages()] == [{"p": "1"}, {"p": "1"}]
        consumer.ack(delivery)
    with PopConsumer(broker.endpoint, "h", "b", poll_ms=0, include_properties=True) as consumer:
        (delivery,) = consumer.receive()
        assert delivery.records.column("properties").to_pylist() == [[("p", "1")], [("p", "1")]]


def test_retry_copies_do_not_carry_the_idempotent_send_stamp(broker, clock):
    from rmq_wire import record as fmt
    send(broker, "s", "SimpleCQ", [Message("s", b"m")])
    with PopConsumer(broker.endpoint, "g", "s", invisible_ms=1_000, poll_ms=0) as consumer:
        consumer.receive()
        revive(broker, clock, 1_001)
        (copy,) = broker.core.store.get_messages("%RETRY%g+s", 0, 0).batches
        properties = fmt.decode_record(copy.data).properties
        assert fmt.PROPERTY_PRODUCER not in properties and properties["RETRY_TOPIC"] == "s"


def test_a_topic_deleted_and_created_again_is_popped_from_its_start(broker):
    send(broker, "gone", "SimpleCQ", [Message("gone", b"old%d" % i) for i in range(6)])
    with PopConsumer(broker.endpoint, "g", "gone", max_messages=4, poll_ms=0) as consumer:
        held = consumer.receive()  # four invisible, two never popped
        assert len(held) == 4
        with Admin(broker.endpoint) as admin:
            admin.delete_topic("gone")
        assert broker.core.pop_service.in_flight("g") == 0  # the deleted topic's pop state went with it
        send(broker, "gone", "SimpleCQ", [Message("gone", b"new%d" % i) for i in range(3)])
        fresh = consumer.receive(max_messages=10)
        assert [m.body for d in fresh for m in d.messages()] == [b"new0", b"new1", b"new2"]
        consumer.ack(fresh)
        with pytest.raises(ReceiptHandleExpiredError):  # a handle of the old topic's message
            consumer.ack(held[0])
