"""Long polling: a pop with nothing to return waits, is woken by new matching messages, and
the number of waiting pops is limited. Bounded waits only; no timing assertions."""

import dataclasses
import threading

from broker_sim.store import QueueType
from support.pop import CONFIG, Node, Tags, bodies


def _pop_in_thread(node, **kwargs):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", node.pop.pop("g", "t", -1, 32, 1_000,
                                                                                      **kwargs)))
    thread.start()
    return thread, out


def _wait_until_waiting(node, count=1):
    for _ in range(2000):  # bounded: until the pop thread is waiting
        if node.pop._waiting >= count:
            return
        threading.Event().wait(0.005)
    raise AssertionError("the pop never waited")


def test_a_waiting_pop_is_woken_by_a_send(node):
    node.store.create_topic("t", 4, QueueType.SIMPLE_CQ)
    thread, out = _pop_in_thread(node, poll_time_ms=30_000)
    _wait_until_waiting(node)
    node.put("t", 2, b"late")
    thread.join(30)
    assert not thread.is_alive()
    assert bodies(node, out["result"]) == [b"late"]


def test_a_waiting_pop_is_not_answered_with_messages_of_other_tags(node):
    node.store.create_topic("t", 1, QueueType.SIMPLE_CQ)
    thread, out = _pop_in_thread(node, poll_time_ms=30_000, tag_filter=Tags("Wanted"))
    _wait_until_waiting(node)
    node.put("t", 0, b"other", tags="Other")
    node.indexed()
    thread.join(0.3)
    assert thread.is_alive()  # still waiting: the message did not match
    node.put("t", 0, b"wanted", tags="Wanted")
    thread.join(30)
    assert not thread.is_alive()
    assert bodies(node, out["result"]) == [b"wanted"]


def test_a_pop_with_nothing_answers_empty_after_its_poll_time(node):
    node.store.create_topic("t", 1, QueueType.SIMPLE_CQ)
    result = node.pop.pop("g", "t", -1, 32, 1_000, poll_time_ms=50)
    assert result.deliveries == [] and not result.polling_full


def test_waiting_pops_are_limited(tmp_path, clock):
    node = Node(tmp_path / "d", clock, dataclasses.replace(CONFIG, max_waiting_pops=1))
    try:
        node.store.create_topic("t", 1, QueueType.SIMPLE_CQ)
        thread, out = _pop_in_thread(node, poll_time_ms=30_000)
        _wait_until_waiting(node)
        full = node.pop.pop("g", "t", -1, 32, 1_000, poll_time_ms=30_000)
        assert full.polling_full and full.deliveries == []
        node.put("t", 0, b"x")
        thread.join(30)
        assert bodies(node, out["result"]) == [b"x"]
    finally:
        node.close()


def test_stopping_answers_waiting_pops(node):
    node.store.create_topic("t", 1, QueueType.SIMPLE_CQ)
    thread, out = _pop_in_thread(node, poll_time_ms=60_000)
    _wait_until_waiting(node)
    node.pop.stop_waiting()
    thread.join(30)
    assert not thread.is_alive() and out["result"].deliveries == []
