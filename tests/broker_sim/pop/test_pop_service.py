"""PopService on a real store and RocksDB, with a stepped clock: pop, ack, invisible time,
revive to retry and DLQ, orderly pop, tag filters, bad input, restarts."""

import dataclasses

import pytest

from broker_sim.pop import (
    AckStatus,
    GroupNotFound,
    InvalidPopRequest,
    InvalidReceiptHandle,
    ReceiptHandleExpired,
    dlq_topic,
    retry_topic,
)
from broker_sim.store import BatchPut, QueueType, UnknownTopicError
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt
from support.pop import CONFIG, Node, Tags, bodies, handles


def fill(node, topic="t", queues=1, count=10, queue_type=QueueType.SIMPLE_CQ, tags=None):
    node.store.create_topic(topic, queues, queue_type)
    for i in range(count):
        node.put(topic, i % queues, b"m%d" % i, tags=tags)
    node.indexed()


def test_pop_then_ack_is_never_delivered_again(node, clock):
    fill(node, count=10)
    first = node.pop.pop("g", "t", -1, 4, 1_000)
    assert bodies(node, first) == [b"m0", b"m1", b"m2", b"m3"]
    assert node.pop.ack("g", handles(first)) == []
    clock.step(5_000)
    assert node.pop.revive_expired() == 0  # nothing in flight expired: all were acked
    rest = node.pop.pop("g", "t", -1, 32, 1_000)
    assert bodies(node, rest) == [b"m%d" % i for i in range(4, 10)]
    assert node.pop.pop("g", "t", -1, 32, 1_000).deliveries == []


def test_groups_consume_independently(node):
    fill(node, count=3)
    assert len(node.pop.pop("a", "t", 0, 32, 1_000).deliveries) == 3
    assert len(node.pop.pop("b", "t", 0, 32, 1_000).deliveries) == 3


def test_commit_offset_is_the_lowest_unacked_and_apart_from_the_pull_offset(node):
    fill(node, count=6)
    popped = node.pop.pop("g", "t", 0, 6, 1_000)
    assert node.pop.pull_offset("g", "t", 0) == 6
    assert node.pop.commit_offset("g", "t", 0) == 0
    node.pop.ack("g", handles(popped)[1:4])  # offsets 1..3 acked, 0 not
    assert node.pop.commit_offset("g", "t", 0) == 0
    node.pop.ack("g", handles(popped)[:1])
    assert node.pop.commit_offset("g", "t", 0) == 4
    assert node.offsets.query("g") == [("t", 0, 4)]  # the commit offset, for lag and restarts
    node.pop.ack("g", handles(popped)[4:])
    assert node.offsets.query("g") == [("t", 0, 6)]


def test_unacked_messages_come_back_through_the_retry_topic_with_one_more_reconsume(node, clock):
    fill(node, queues=2, count=4)
    popped = node.pop.pop("g", "t", -1, 32, 1_000)
    assert len(popped.deliveries) == 4
    clock.step(999)
    assert node.pop.revive_expired() == 0  # still invisible
    clock.step(2)
    assert node.pop.revive_expired() == 4
    node.indexed()
    retry = retry_topic("g", "t")
    assert retry == "%RETRY%g+t" and node.store.max_offset(retry, 0) == 4
    again = node.pop.pop("g", "t", -1, 32, 1_000)  # the retry queue is popped along with the topic's
    assert sorted(bodies(node, again)) == [b"m0", b"m1", b"m2", b"m3"]
    assert {(d.retry, d.origin_topic, d.checkpoint.topic, d.checkpoint.reconsume_times) for d in again.deliveries} \
        == {(True, "t", retry, 1)}
    record = fmt.decode_record(node.store.get_messages(retry, 0, 0).batches[0].data)
    assert record.reconsume_times == 1 and record.properties["RETRY_TOPIC"] == "t"
    assert node.pop.commit_offset("g", "t", 0) == 2  # revived messages are done in their first queue


def test_past_the_maximum_retries_a_message_goes_to_the_dlq(node, clock):
    fill(node, count=1)
    deliveries = 0
    for _ in range(40):  # bounded: 1 + 16 deliveries, then the DLQ
        found = node.pop.pop("g", "t", -1, 32, 100)
        deliveries += len(found.deliveries)
        if found.deliveries:
            assert found.deliveries[0].checkpoint.reconsume_times == deliveries - 1
        clock.step(200)
        node.pop.revive_expired()
        node.indexed()
        if node.store.topics.get(dlq_topic("g")) and node.store.max_offset(dlq_topic("g"), 0):
            break
    assert deliveries == 1 + node.pop.config.max_reconsume_times
    dead = node.store.get_messages("%DLQ%g", 0, 0).batches
    assert len(dead) == 1
    record = fmt.decode_record(dead[0].data)
    assert bytes(record.body) == b"m0" and record.reconsume_times == 17 and record.properties["RETRY_TOPIC"] == "t"
    assert node.pop.pop("g", "t", -1, 32, 100).deliveries == []
    assert node.pop.in_flight("g") == 0


def test_a_batchcq_unit_is_one_delivery_with_its_whole_batch_through_retry_and_dlq(node, clock):
    node.pop = node.pop  # (the node's default config: 16 retries; this test steps through them)
    node.store.create_topic("b", 1, QueueType.BATCH_CQ)
    payload = fmt.encode_message_batch([(b"x%d" % i, {"KEYS": "k%d" % i}, 0) for i in range(5)])
    assert node.store.put_inner_batch("b", 0, BatchPut(payload, 5, properties={"TAGS": "T"})).ok
    node.indexed()
    popped = node.pop.pop("g", "b", -1, 1, 100)
    (delivery,) = popped.deliveries
    assert (delivery.checkpoint.offset, delivery.checkpoint.count) == (0, 5)
    record = fmt.decode_record(popped.records)
    assert bytes(record.body) == payload and record.inner_count == 5
    for expected in range(1, 18):
        clock.step(200)
        assert node.pop.revive_expired() == 1
        node.indexed()
        if expected == 17:
            break
        (again,) = node.pop.pop("g", "b", -1, 32, 100).deliveries
        assert (again.retry, again.checkpoint.count, again.checkpoint.reconsume_times) == (True, 5, expected)
    (dead,) = node.store.get_messages("%DLQ%g", 0, 0).batches
    assert dead.count == 5 and bytes(fmt.decode_record(dead.data).body) == payload


def test_change_invisible_duration_issues_a_new_handle_and_the_old_one_stops_working(node, clock):
    fill(node, count=1)
    (delivery,) = node.pop.pop("g", "t", 0, 1, 1_000).deliveries
    new_handle, until = node.pop.change_invisible_duration("g", delivery.receipt_handle, 10_000)
    assert until == clock.now + 10_000
    clock.step(5_000)
    assert node.pop.revive_expired() == 0  # the first deadline passed, the new one did not
    (failure,) = node.pop.ack("g", [delivery.receipt_handle])
    assert failure.status is AckStatus.EXPIRED and "changed" in failure.detail
    with pytest.raises(ReceiptHandleExpired):
        node.pop.change_invisible_duration("g", delivery.receipt_handle, 1_000)
    assert node.pop.ack("g", [new_handle]) == []
    clock.step(60_000)
    assert node.pop.revive_expired() == 0


def test_change_invisible_duration_can_bring_a_message_back_sooner(node, clock):
    fill(node, count=1)
    (delivery,) = node.pop.pop("g", "t", 0, 1, 60_000).deliveries
    node.pop.change_invisible_duration("g", delivery.receipt_handle, 100)
    clock.step(101)
    assert node.pop.revive_expired() == 1


def test_bad_handles_fail_alone_and_the_others_are_acked(node, clock):
    fill(node, count=3)
    popped = node.pop.pop("g", "t", 0, 3, 1_000)
    good = handles(popped)
    forged = good[0][:-6] + ("AAAAAA" if not good[0].endswith("AAAAAA") else "BBBBBB")
    failures = node.pop.ack("g", [good[0], forged, "not a handle!", "", good[1], good[1]])
    assert [(f.index, f.status) for f in failures] == [
        (1, AckStatus.INVALID), (2, AckStatus.INVALID), (3, AckStatus.INVALID), (5, AckStatus.EXPIRED)]
    assert "not issued by this broker" in failures[0].detail
    assert node.pop.in_flight("g") == 1  # good[2] only
    clock.step(2_000)
    assert node.pop.revive_expired() == 1
    (expired,) = node.pop.ack("g", [good[2]])
    assert expired.status is AckStatus.EXPIRED and "came back after its invisible time" in expired.detail


def test_a_handle_of_another_group_is_refused(node):
    fill(node, count=1)
    handle = handles(node.pop.pop("a", "t", 0, 1, 1_000))[0]
    node.pop.pop("b", "t", 0, 1, 1_000)
    (failure,) = node.pop.ack("b", [handle])
    assert failure.status is AckStatus.INVALID and "issued to another group" in failure.detail
    with pytest.raises(InvalidReceiptHandle):
        node.pop.change_invisible_duration("b", handle, 1_000)
    assert node.pop.in_flight("a") == 1


def test_a_handle_of_another_broker_is_refused(tmp_path, node, clock):
    other = Node(tmp_path / "other", clock)
    try:
        fill(other, count=1)
        foreign = handles(other.pop.pop("g", "t", 0, 1, 1_000))[0]
    finally:
        other.close()
    fill(node, count=1)
    node.pop.pop("g", "t", 0, 1, 1_000)
    (failure,) = node.pop.ack("g", [foreign])
    assert failure.status is AckStatus.INVALID


def test_bad_requests_say_what_is_wrong(node):
    fill(node, count=1)
    with pytest.raises(InvalidPopRequest, match="invisible time 5 ms is out of range"):
        node.pop.pop("g", "t", -1, 1, 5)
    with pytest.raises(InvalidPopRequest, match="invisible time"):
        node.pop.pop("g", "t", -1, 1, 13 * 3600 * 1000)
    with pytest.raises(InvalidPopRequest, match="max_messages 0"):
        node.pop.pop("g", "t", -1, 0, 1_000)
    with pytest.raises(InvalidPopRequest, match="poll_time_ms"):
        node.pop.pop("g", "t", -1, 1, 1_000, poll_time_ms=-1)
    with pytest.raises(InvalidPopRequest, match="consumer group"):
        node.pop.pop("a@b", "t", -1, 1, 1_000)
    with pytest.raises(UnknownTopicError, match="does not exist"):
        node.pop.pop("g", "nope", -1, 1, 1_000)
    with pytest.raises(UnknownTopicError, match="no queue 3"):
        node.pop.pop("g", "t", 3, 1, 1_000)
    with pytest.raises(GroupNotFound, match="has popped nothing"):
        node.pop.ack("stranger", ["x"])
    assert node.pop.in_flight() == 0


def test_tag_filter_skips_other_tags_and_moves_the_commit_offset_past_them(node):
    node.store.create_topic("t", 1, QueueType.SIMPLE_CQ)
    for i, tag in enumerate(["A", "B", "A", "C", "B"]):
        node.put("t", 0, b"m%d" % i, tags=tag)
    node.indexed()
    popped = node.pop.pop("g", "t", 0, 32, 1_000, tag_filter=Tags("B"))
    assert bodies(node, popped) == [b"m1", b"m4"]
    node.pop.ack("g", handles(popped))
    assert node.pop.commit_offset("g", "t", 0) == 5


def test_orderly_pop_holds_a_queue_until_its_messages_are_acked_or_expire(node, clock):
    fill(node, queues=2, count=6)  # queue 0: m0 m2 m4; queue 1: m1 m3 m5
    first = node.pop.pop("g", "t", 0, 2, 1_000, orderly=True)
    assert bodies(node, first) == [b"m0", b"m2"]
    assert node.pop.pop("g", "t", 0, 2, 1_000, orderly=True).deliveries == []  # held
    other = node.pop.pop("g", "t", 1, 1, 1_000, orderly=True)  # other queues are not held
    assert bodies(node, other) == [b"m1"]
    clock.step(1_001)
    assert node.pop.revive_expired() == 0  # orderly messages never go to the retry topic
    again = node.pop.pop("g", "t", 0, 32, 1_000, orderly=True)
    assert bodies(node, again) == [b"m0", b"m2"]  # the same messages, not m4
    assert [d.checkpoint.reconsume_times for d in again.deliveries] == [1, 1]
    node.pop.ack("g", handles(again)[:1])
    assert node.pop.pop("g", "t", 0, 32, 1_000, orderly=True).deliveries == []  # m2 still invisible
    node.pop.ack("g", handles(again)[1:])
    assert bodies(node, node.pop.pop("g", "t", 0, 32, 1_000, orderly=True)) == [b"m4"]
    assert node.store.topics.get(retry_topic("g", "t")) is None


def test_orderly_pop_sends_a_message_past_the_maximum_to_the_dlq(tmp_path, clock):
    node = Node(tmp_path / "d", clock, dataclasses.replace(CONFIG, max_reconsume_times=2))
    try:
        fill(node, count=2)
        for reconsume in range(3):
            found = node.pop.pop("g", "t", 0, 1, 100, orderly=True)
            assert bodies(node, found) == [b"m0"]
            assert found.deliveries[0].checkpoint.reconsume_times == reconsume
            clock.step(101)
        assert bodies(node, node.pop.pop("g", "t", 0, 1, 100, orderly=True)) == [b"m1"]
        node.indexed()
        (dead,) = node.store.get_messages("%DLQ%g", 0, 0).batches
        assert bytes(fmt.decode_record(dead.data).body) == b"m0"
    finally:
        node.close()


def test_state_survives_a_restart_and_handles_still_ack(node, clock):
    fill(node, count=5)
    popped = node.pop.pop("g", "t", 0, 3, 1_000)
    node.pop.ack("g", handles(popped)[:1])
    node.reopen()
    assert node.pop.in_flight("g") == 2
    assert node.pop.pull_offset("g", "t", 0) == 3 and node.pop.commit_offset("g", "t", 0) == 1
    assert node.pop.ack("g", handles(popped)[1:2]) == []  # the broker secret is kept in the data dir
    assert bodies(node, node.pop.pop("g", "t", 0, 32, 1_000)) == [b"m3", b"m4"]
    clock.step(1_001)
    assert node.pop.revive_expired() == 3  # m2 (from before the restart), m3, m4


class CrashAfter:
    """A state store that dies (raises, writing nothing) at its n-th write: a kill -9 there."""

    def __init__(self, state, writes: int):
        self.state = state
        self.left = writes

    def write(self, puts, deletes):
        self.left -= 1
        if self.left < 0:
            raise SystemExit("killed")
        self.state.write(puts, deletes)

    def scan(self, *args, **kwargs):
        return self.state.scan(*args, **kwargs)

    def close(self):
        self.state.close()


@pytest.mark.parametrize("crash_at_write", [0, 1])
def test_a_revive_cut_short_copies_each_message_once(node, clock, crash_at_write):
    """Write 0: the markers are not written (nothing happened). Write 1: the copies are stored
    but the markers not cleared: the restart must find the copies, not store them again."""
    from broker_sim.pop import RocksDBState
    fill(node, count=3)
    node.pop.pop("g", "t", 0, 3, 1_000)
    node.pop.close()
    state = CrashAfter(RocksDBState(StorePaths(node.data_dir).pop_state), crash_at_write)
    node.pop = type(node.pop)(node.store, node.offsets, state, node.pop.signer, node.config, now_ms=clock)
    clock.step(1_001)
    with pytest.raises(SystemExit):
        node.pop.revive_expired()
    node.reopen()
    node.pop.revive_expired()
    node.indexed()
    assert node.store.max_offset(retry_topic("g", "t"), 0) == 3  # each message copied once
    again = node.pop.pop("g", "t", -1, 32, 1_000)
    assert sorted(bodies(node, again)) == [b"m0", b"m1", b"m2"]


def test_a_failed_revive_is_tried_again_after_rocketmq_backoffs(node, clock):
    group = "g" * 120  # its retry topic name is longer than a topic name may be: the copy fails
    fill(node, count=1)
    node.pop.pop(group, "t", 0, 1, 1_000)
    clock.step(1_001)
    assert node.pop.revive_expired() == 1
    assert node.pop.in_flight(group) == 1  # kept, for a later try
    clock.step(9_999)
    assert node.pop.revive_expired() == 0
    clock.step(1)
    assert node.pop.revive_expired() == 1  # 10 s after the failure
    clock.step(29_999)
    assert node.pop.revive_expired() == 0
    clock.step(1)
    assert node.pop.revive_expired() == 1  # then 30 s


def test_pop_spreads_over_queues_in_turn(node):
    fill(node, queues=4, count=40)
    first_queues = [node.pop.pop("g", "t", -1, 1, 1_000).deliveries[0].checkpoint.queue_id for _ in range(8)]
    assert sorted(first_queues[:4]) == [0, 1, 2, 3] and first_queues[4:] == first_queues[:4]


def test_a_pull_offset_past_a_shortened_queue_goes_on_from_its_end(node):
    """The store lost its tail (a machine crash): what was popped there may be acked, so the
    group goes on from the new end, never back."""
    from broker_sim.pop.state import pull_key, pull_value, queue_prefix
    fill(node, count=3)
    node.pop.pop("g", "t", 0, 32, 1_000)
    node.close()
    from broker_sim.pop import RocksDBState
    state = RocksDBState(StorePaths(node.data_dir).pop_state)
    state.write([(pull_key(queue_prefix("g", "t"), 0), pull_value(10))], [])
    state.close()
    node.open()
    assert node.pop.pop("g", "t", 0, 32, 1_000).deliveries == []
    assert node.pop.pull_offset("g", "t", 0) == 3
    node.put("t", 0, b"new")
    node.indexed()
    assert bodies(node, node.pop.pop("g", "t", 0, 32, 1_000)) == [b"new"]
