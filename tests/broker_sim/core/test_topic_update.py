"""A topic's queue count and permission changed (BrokerCore.update_topic, RocketMQ's updateTopic):
more queues, fewer (the queues past the count kept, unserved, and served again at their offsets
when the count grows back), perm enforced on sends, pulls, range reads and pops, every change
kept across a restart; and a consumer group deleted (BrokerCore.delete_group) with all the
broker keeps of it."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from broker_sim.core import BrokerCore, BrokerFault, CoreOptions, OffsetRange, Reason, SendRequest, SingleSend
from broker_sim.core.limits import ClientLimits
from broker_sim.core.metrics import BrokerMetrics
from broker_sim.store import QueueType, StoreConfig
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt


@pytest.fixture
def open_core(tmp_path):
    """Open (or reopen) a core on the test's data directory; each is closed at the end."""
    opened = []

    def open_(**options) -> BrokerCore:
        options.setdefault("auto_create_topics", None)
        core = BrokerCore.open(tmp_path / "data", CoreOptions(StoreConfig(segment_bytes=4 << 20), **options))
        opened.append(core)
        return core

    yield open_
    for core in opened:
        if not core.gate._closed:
            core.close(5.0)


@pytest.fixture
def core(open_core):
    return open_core()


def send(core, topic: str, queue_id: int, body: bytes = b"m", keys: str = ""):
    return core.send(SendRequest(topic, queue_id, SingleSend(body, {}, keys=keys)))


def bodies(core, topic: str, queue_id: int, start: int = 0) -> list[bytes]:
    assert core.store.wait_dispatched(10)
    [cursor] = core.open_ranges([OffsetRange(topic, queue_id, start, None)], "", 1 << 20)
    records, done = [], False
    while not done:
        done = cursor.step(1 << 20, lambda views, last: (records.extend(bytes(v) for v in views), last)[1])
    return [bytes(fmt.decode_record(r).body) for r in records]


def refusal(call, *args, **kwargs) -> BrokerFault:
    with pytest.raises(BrokerFault) as caught:
        call(*args, **kwargs)
    return caught.value


def pull(core, topic: str, queue_id: int, offset: int = 0, group: str = ""):
    return core.pull(topic, queue_id, offset, 32, 1 << 20, None, lambda cursor, records: len(records), group)


def pop(core, topic: str, group: str = "g", queue_id: int = -1):
    return core.pop(group, topic, queue_id, 32, 60_000, 0, "", False, lambda result: result.deliveries)


# --- queue count -------------------------------------------------------------------------------

def test_more_queues_are_served_at_once(core):
    core.create_topic("t", 2, QueueType.SIMPLE_CQ)
    assert refusal(send, core, "t", 3).reason is Reason.QUEUE_NOT_FOUND
    config = core.update_topic("t", queue_count=4)
    assert (config.queue_count, config.perm) == (4, 6)
    assert send(core, "t", 3).base_offset == 0
    assert bodies(core, "t", 3) == [b"m"]
    assert [q.queue_id for q in core.describe_topic("t")[1]] == [0, 1, 2, 3]


@pytest.mark.parametrize("queue_type", [QueueType.SIMPLE_CQ, QueueType.BATCH_CQ])
def test_fewer_queues_keep_the_others_out_of_service_with_their_messages_and_offsets(core, queue_type):
    core.create_topic("t", 4, queue_type)
    for n in range(3):
        send(core, "t", 3, f"q3-{n}".encode())
    send(core, "t", 0, b"q0")
    assert core.store.wait_dispatched(10)
    core.commit_offsets("g", [("t", 3, 2)])

    config = core.update_topic("t", queue_count=2)
    assert (config.queue_count, config.stored_queues) == (2, 4)
    assert [q.queue_id for q in core.describe_topic("t")[1]] == [0, 1]
    assert [len(queues) for _config, queues in core.offsets_page(["t"], 0, 0)[0]] == [2]
    assert refusal(send, core, "t", 3).reason is Reason.QUEUE_NOT_FOUND
    assert refusal(bodies, core, "t", 3).reason is Reason.QUEUE_NOT_FOUND
    assert refusal(pull, core, "t", 3).reason is Reason.QUEUE_NOT_FOUND
    assert refusal(core.commit_offsets, "g", [("t", 3, 3)]).reason is Reason.QUEUE_NOT_FOUND
    assert core.query_offsets("g", ["t"]) == [("t", 3, 2)]  # the group's offset of the hidden queue stays
    assert [d.checkpoint.queue_id for d in pop(core, "t")] == [0]  # pops of any queue pass it over

    core.update_topic("t", queue_count=4)
    assert bodies(core, "t", 3) == [b"q3-0", b"q3-1", b"q3-2"]
    assert send(core, "t", 3, b"q3-3").base_offset == 3  # offsets go on where they stopped
    assert ("t", 3, 2) in core.query_offsets("g", ["t"])


def test_queue_count_and_perm_survive_a_restart_and_hidden_queues_their_offsets(open_core):
    core = open_core()
    core.create_topic("t", 4, QueueType.BATCH_CQ)
    for _ in range(2):
        send(core, "t", 3)
    core.update_topic("t", queue_count=2, perm=4)
    core.close(5.0)

    core = open_core()
    config = core.topic("t")
    assert (config.queue_count, config.stored_queues, config.perm) == (2, 4, 4)
    core.update_topic("t", queue_count=3, perm=6)
    core.close(5.0)

    core = open_core()
    config = core.topic("t")
    assert (config.queue_count, config.stored_queues, config.perm) == (3, 4, 6)
    core.update_topic("t", queue_count=4)
    assert send(core, "t", 3).base_offset == 2
    assert len(bodies(core, "t", 3)) == 3


def test_a_topic_journal_written_before_perm_reads_as_read_and_write(tmp_path, open_core):
    paths = StorePaths(tmp_path / "data")
    paths.topics.parent.mkdir(parents=True, exist_ok=True)
    paths.topics.write_text(json.dumps({"topics": [{"name": "old", "queue_count": 2, "queue_type": "SimpleCQ"}]}))
    paths.topics_journal.write_text(json.dumps({"create": {"name": "older", "queue_count": 1,
                                                           "queue_type": "BatchCQ"}}) + "\n")
    core = open_core()
    assert [(t.name, t.queue_count, t.perm) for t in core.list_topics()] == [("old", 2, 6), ("older", 1, 6)]
    send(core, "old", 1)
    assert bodies(core, "old", 1) == [b"m"]


def test_an_update_is_in_the_journal_before_it_answers(open_core, tmp_path):
    core = open_core()
    core.create_topic("t", 2, QueueType.SIMPLE_CQ)
    core.update_topic("t", perm=2)
    lines = StorePaths(tmp_path / "data").topics_journal.read_text().splitlines()
    assert json.loads(lines[-1]) == {"update": {"name": "t", "queue_count": 2, "queue_type": "SimpleCQ", "perm": 2}}


def test_a_read_open_across_an_update_goes_on(core):
    """A range cursor tells a deleted topic by its creation, not by its settings' object."""
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    for _ in range(3):
        send(core, "t", 0)
    assert core.store.wait_dispatched(10)
    [cursor] = core.open_ranges([OffsetRange("t", 0, 0, None)], "", 1 << 20)
    core.update_topic("t", queue_count=2)
    records = []
    cursor.step(1 << 20, lambda views, last: (records.extend(views), last)[1])
    assert len(records) == 3


# --- perm ----------------------------------------------------------------------------------------

def test_a_read_only_topic_refuses_sends_and_serves_reads(core):
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    send(core, "t", 0, b"before")
    core.update_topic("t", perm=4)
    error = refusal(send, core, "t", 0)
    assert error.reason is Reason.PERMISSION_DENIED
    assert error.message.startswith("the topic[t] sending message is forbidden")
    assert bodies(core, "t", 0) == [b"before"]
    assert pull(core, "t", 0) == 1
    assert len(pop(core, "t")) == 1
    core.update_topic("t", perm=6)
    assert send(core, "t", 0).base_offset == 1


def test_a_write_only_topic_refuses_pulls_range_reads_and_pops(core):
    core.create_topic("t", 1, QueueType.BATCH_CQ)
    core.update_topic("t", perm=2)
    assert send(core, "t", 0).base_offset == 0
    for call, verb in ((lambda: bodies(core, "t", 0), "pulling"), (lambda: pull(core, "t", 0), "pulling"),
                       (lambda: pop(core, "t"), "peeking")):
        error = refusal(call)
        assert error.reason is Reason.PERMISSION_DENIED
        assert error.message.startswith(f"the topic[t] {verb} message is forbidden")
    assert core.describe_topic("t")[1][0].max_offset == 1  # offsets are no read of messages


def test_a_new_topic_may_be_made_read_only_and_a_create_without_perm_finds_it_the_same(core):
    config, created = core.create_topic("t", 2, QueueType.SIMPLE_CQ, perm=4)
    assert created and config.perm == 4
    assert core.create_topic("t", 2, QueueType.SIMPLE_CQ) == (config, False)
    assert refusal(core.create_topic, "t", 2, QueueType.SIMPLE_CQ, perm=6).reason is Reason.TOPIC_CONFLICT


@pytest.mark.parametrize(("name", "count", "perm", "reason", "words"), [
    ("%RETRY%g", 2, 0, Reason.INVALID_ARGUMENT, "cannot update topic"),
    ("%DLQ%g", 0, 4, Reason.INVALID_ARGUMENT, "cannot update topic"),
    (fmt.SCHEDULE_TOPIC, 2, 0, Reason.INVALID_ARGUMENT, "cannot update topic"),
    ("missing", 2, 0, Reason.TOPIC_NOT_FOUND, "does not exist"),
    ("t", -1, 0, Reason.INVALID_ARGUMENT, "negative"),
    ("t", 70_000, 0, Reason.INVALID_ARGUMENT, "use 1 to 65536"),
    ("t", 0, 1, Reason.INVALID_ARGUMENT, "use 2 (write only), 4 (read only) or 6"),
    ("t", 0, 7, Reason.INVALID_ARGUMENT, "use 2 (write only), 4 (read only) or 6"),
    ("", 2, 0, Reason.INVALID_ARGUMENT, "empty"),
])
def test_updates_refused(core, name, count, perm, reason, words):
    core.create_topic("t", 2, QueueType.SIMPLE_CQ)
    error = refusal(core.update_topic, name, count, perm)
    assert error.reason is reason and words in error.message
    assert (core.topic("t").queue_count, core.topic("t").perm) == (2, 6)


def test_added_queues_count_against_the_limits_as_created_ones(open_core):
    core = open_core(limits=ClientLimits(max_queues=8, max_queues_created_per_client=6))
    core.create_topic("t", 4, QueueType.SIMPLE_CQ, client="c1")
    error = refusal(core.update_topic, "t", 7, client="c1")
    assert error.reason is Reason.LIMIT_EXCEEDED and "3 more queues of topic 't'" in error.message
    assert "--max-queues-created-per-client" in error.message
    assert core.update_topic("t", 6, client="c1").queue_count == 6
    core.update_topic("t", 2, client="c1")
    assert core.update_topic("t", 6, client="c1").queue_count == 6  # its own queues again: nothing added
    error = refusal(core.update_topic, "t", 9, client="c2")
    assert error.reason is Reason.LIMIT_EXCEEDED and "--max-queues)" in error.message
    core.delete_topic("t")
    assert core.create_topic("u", 6, QueueType.SIMPLE_CQ, client="c1")[1]  # its room came back with the topic


# --- deleting a group ----------------------------------------------------------------------------

def test_deleting_a_group_forgets_everything_the_broker_keeps_of_it(open_core):
    metrics = BrokerMetrics()
    core = open_core(metrics=metrics, limits=ClientLimits(max_groups_per_client=1))
    core.create_topic("t", 2, QueueType.SIMPLE_CQ)
    core.create_topic("keep", 1, QueueType.SIMPLE_CQ)
    for queue_id in (0, 1):
        send(core, "t", queue_id)
    assert core.store.wait_dispatched(10)
    core.commit_offsets("g", [("t", 0, 1)], quota_client="c1")
    core.commit_offsets("other", [("t", 0, 1)])
    core.update_group("g", orderly=True)
    assert pull(core, "t", 1, group="g") == 1  # a metrics series of the group
    [popped] = pop(core, "t", "g", queue_id=1)
    core.ensure_retry_topic("g")
    core.store.create_topic("%RETRY%g+t", 1)  # as pop's revive makes them
    core.store.create_topic("%DLQ%g", 1)
    assert 'consumer_group="g"' in generate_latest(metrics.registry).decode()
    assert refusal(core.commit_offsets, "g2", [("t", 0, 1)], quota_client="c1").reason is Reason.LIMIT_EXCEEDED

    assert core.delete_group("g") is True

    assert core.query_offsets("g", None) == []
    assert core.query_offsets("other", None) == [("t", 0, 1)]
    assert core.group_orderly("g") is False
    assert "g" not in [name for name, _consumers in core.list_groups([])]
    assert core.pop_service.in_flight("g") == 0 and not core.pop_service.has_group("g")
    assert refusal(core.ack, "g", [popped.receipt_handle]).reason is Reason.GROUP_NOT_FOUND
    assert {t.name for t in core.list_topics()} == {"t", "keep"}
    assert 'consumer_group="g"' not in generate_latest(metrics.registry).decode()
    core.commit_offsets("g2", [("t", 0, 1)], quota_client="c1")  # its quota entry went with it
    assert [d.checkpoint.queue_id for d in pop(core, "t", "g")] == [0, 1]  # made again: pops from the start
    assert core.delete_group("g") is True and core.delete_group("g") is False
    assert core.delete_group("never") is False


def test_deleting_a_group_survives_a_restart(open_core):
    core = open_core()
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    send(core, "t", 0)
    assert core.store.wait_dispatched(10)
    core.commit_offsets("g", [("t", 0, 1)])
    core.update_group("g", orderly=True)
    pop(core, "t", "g")
    assert core.delete_group("g")
    core.close(5.0)
    core = open_core()
    assert core.query_offsets("g", None) == [] and not core.group_orderly("g")
    assert not core.pop_service.has_group("g") and core.delete_group("g") is False


def test_a_group_deleted_keeping_its_offsets_loses_its_settings_only(core):
    """RocketMQ's DELETE_SUBSCRIPTIONGROUP without cleanOffset."""
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    send(core, "t", 0)
    assert core.store.wait_dispatched(10)
    core.commit_offsets("g", [("t", 0, 1)])
    core.update_group("g", orderly=True)
    core.ensure_retry_topic("g")
    assert core.delete_group("g", clean_offsets=False, topics=False) is True
    assert core.query_offsets("g", None) == [("t", 0, 1)] and not core.group_orderly("g")
    assert core.find_topic("%RETRY%g") is not None


def test_a_group_retry_or_dead_letter_topic_is_deleted_only_when_asked(core):
    core.ensure_retry_topic("g")
    assert refusal(core.delete_topic, "%RETRY%g").reason is Reason.INVALID_ARGUMENT
    assert core.delete_topic("%RETRY%g", group_topics=True) is True
    assert refusal(core.delete_topic, fmt.SCHEDULE_TOPIC, group_topics=True).reason is Reason.INVALID_ARGUMENT


def test_a_group_name_is_checked(core):
    assert refusal(core.delete_group, "").reason is Reason.INVALID_ARGUMENT
    assert refusal(core.delete_group, "a b").reason is Reason.INVALID_ARGUMENT
