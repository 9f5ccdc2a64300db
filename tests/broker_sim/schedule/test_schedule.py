"""Delayed messages through the broker core, on a real data directory with a stepped clock:
held in the schedule topic until due, delivered in order with their properties, kept across a
restart, and refused where RocketMQ refuses them."""

from __future__ import annotations

import pytest

from broker_sim.core import BrokerCore, BrokerFault, CoreOptions, InnerBatchSend, SendRequest, SingleSend
from broker_sim.schedule import SCHEDULE_TOPIC
from broker_sim.store import QueueType
from rmq_wire import record as fmt


def open_core(data_dir, clock) -> BrokerCore:
    core = BrokerCore.open(data_dir, CoreOptions(schedule_now_ms=clock))
    core.schedule.close()  # the test delivers, stepping its clock
    return core


@pytest.fixture
def core(tmp_path, clock):
    opened = open_core(tmp_path, clock)
    opened.create_topic("t", 2, QueueType.SIMPLE_CQ)
    yield opened
    opened.close(5)


def send(core, body: bytes, queue_id: int = 0, **properties):
    return core.send(SendRequest("t", queue_id, SingleSend(body, dict(properties), tags="TagA", keys="k")))


def bodies(core, queue_id: int = 0) -> list[bytes]:
    core.store.wait_dispatched(5)
    if core.store.max_offset("t", queue_id) == 0:
        return []
    result = core.store.get_messages("t", queue_id, 0)
    return [bytes(fmt.decode_record(b.data).body) for b in result.batches]


def test_a_delay_level_holds_the_message_until_its_time(core, clock):
    answer = send(core, b"in 5 s", DELAY="2", color="red")
    assert answer.queue_id == 0  # the queue it was sent to; its offset is the schedule queue's
    core.store.wait_dispatched(5)
    assert core.store.max_offset(SCHEDULE_TOPIC, 1) == 1  # level 2 waits in queue 1
    assert core.schedule.deliver_due() == clock.now + 5000
    assert bodies(core) == []
    clock.now += 5000
    assert core.schedule.deliver_due() is None
    core.store.wait_dispatched(5)  # the delivery is a send: indexed in the background
    [record] = [fmt.decode_record(b.data) for b in core.store.get_messages("t", 0, 0).batches]
    assert bytes(record.body) == b"in 5 s"
    assert record.properties["color"] == "red" and record.properties["TAGS"] == "TagA"
    assert "REAL_TOPIC" not in record.properties and "DELAY" not in record.properties


def test_levels_deliver_in_order_and_the_highest_level_is_two_hours(core, clock):
    send(core, b"a", DELAY="1")
    send(core, b"b", DELAY="1")
    send(core, b"c", DELAY="99")
    core.store.wait_dispatched(5)
    clock.now += 1000
    core.schedule.deliver_due()
    assert bodies(core) == [b"a", b"b"]
    clock.now += 7200 * 1000 - 1001
    core.schedule.deliver_due()
    assert bodies(core) == [b"a", b"b"]
    clock.now += 1
    core.schedule.deliver_due()
    assert bodies(core) == [b"a", b"b", b"c"]


def test_delivery_times_in_any_order(core, clock):
    now = clock.now
    send(core, b"late", TIMER_DELIVER_MS=str(now + 9000))
    send(core, b"soon", TIMER_DELAY_SEC="2")
    send(core, b"sooner", TIMER_DELAY_MS="1000", queue_id=1)
    core.store.wait_dispatched(5)
    assert core.schedule.deliver_due() == now + 1000
    clock.now = now + 2000
    core.schedule.deliver_due()
    assert (bodies(core), bodies(core, 1)) == ([b"soon"], [b"sooner"])
    clock.now = now + 9000
    assert core.schedule.deliver_due() is None
    assert bodies(core) == [b"soon", b"late"]


def test_a_time_already_past_or_level_zero_is_sent_at_once(core, clock):
    send(core, b"past", TIMER_DELIVER_MS=str(clock.now - 1))
    send(core, b"zero", DELAY="0")
    assert bodies(core) == [b"past", b"zero"]


def test_held_messages_survive_a_restart_and_none_is_delivered_twice(tmp_path, clock):
    core = open_core(tmp_path, clock)
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    send(core, b"first", DELAY="1")
    send(core, b"second", TIMER_DELAY_SEC="10")
    core.store.wait_dispatched(5)
    clock.now += 1000
    core.schedule.deliver_due()
    core.close(5)
    core = open_core(tmp_path, clock)
    try:
        core.store.wait_dispatched(5)
        core.schedule.deliver_due()
        assert bodies(core) == [b"first"]
        clock.now += 10_000
        core.schedule.deliver_due()
        assert bodies(core) == [b"first", b"second"]
    finally:
        core.close(5)


@pytest.mark.parametrize("content, says", [
    (InnerBatchSend(b"x" * 32, 1, properties={"DELAY": "1"}), "batches and transactional messages cannot be delayed"),
    (SingleSend(b"x", {"DELAY": "soon"}), "DELAY is 'soon': give a whole number"),
    (SingleSend(b"x", {"TIMER_DELAY_SEC": str(4 * 24 * 3600)}), "at most 259200 s"),
])
def test_delays_refused_say_why(core, content, says):
    with pytest.raises(BrokerFault, match=says):
        core.send(SendRequest("t", 0, content))


def test_a_delayed_send_to_an_unknown_queue_is_refused_at_once(core):
    with pytest.raises(BrokerFault, match="no queue 7"):
        core.send(SendRequest("t", 7, SingleSend(b"x", {"DELAY": "1"})))


def test_the_schedule_topic_is_the_broker_s(core):
    with pytest.raises(BrokerFault, match="holds delayed messages"):
        core.create_topic(SCHEDULE_TOPIC, 1, QueueType.SIMPLE_CQ)
