"""The Admin service over a real channel: topics, offsets, timestamps, stats, group offsets,
and each refusal with its code and rmq-reason."""

import time

import grpc
import pytest

from rmq_wire.contract import broker_pb2 as pb
from support.grpc_client import CALL_TIMEOUT_S, refusal

NOT_FOUND, INVALID = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT
CONFLICT = grpc.StatusCode.ALREADY_EXISTS


def test_create_list_describe_delete(client):
    answer = client.create("orders", 4, pb.BATCH_CQ)
    assert answer.created and (answer.topic.name, answer.topic.queue_count, answer.topic.queue_type) == (
        "orders", 4, pb.BATCH_CQ)
    again = client.create("orders", 4, pb.BATCH_CQ)
    assert not again.created and again.topic == answer.topic  # same settings: nothing to do
    client.create("events", 2, pb.SIMPLE_CQ)
    listed = client.admin.ListTopics(pb.ListTopicsRequest())
    assert [(t.name, t.queue_count, t.queue_type) for t in listed.topics] == [
        ("events", 2, pb.SIMPLE_CQ), ("orders", 4, pb.BATCH_CQ)]

    client.send_single("events", 1, b"a")
    client.send_single("events", 1, b"b")
    client.wait_readable("events", 1, 2)
    described = client.admin.DescribeTopic(pb.DescribeTopicRequest(name="events"))
    assert described.topic.name == "events"
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in described.queues] == [(0, 0, 0), (1, 0, 2)]

    assert client.admin.DeleteTopic(pb.DeleteTopicRequest(name="events")).deleted is True
    assert client.admin.DeleteTopic(pb.DeleteTopicRequest(name="events")).deleted is False
    code, reason, details = refusal(client.admin.DescribeTopic, pb.DescribeTopicRequest(name="events"))
    assert (code, reason) == (NOT_FOUND, "TOPIC_NOT_FOUND")
    assert "'events' does not exist" in details and "existing topics: orders" in details
    # Created again, it starts empty.
    client.create("events", 1, pb.SIMPLE_CQ)
    assert client.offsets("events") == {0: (0, 0)}
    assert client.send_single("events", 0, b"c").base_offset == 0


@pytest.mark.parametrize("topic, expected_code, expected_reason, expected_text", [
    (pb.Topic(name="t", queue_count=8, queue_type=pb.SIMPLE_CQ), CONFLICT, "TOPIC_CONFLICT",
     "4 queues of type BatchCQ"),
    (pb.Topic(name="t", queue_count=4, queue_type=pb.SIMPLE_CQ), CONFLICT, "TOPIC_CONFLICT", "fixed at creation"),
    (pb.Topic(name="u", queue_count=0, queue_type=pb.SIMPLE_CQ), INVALID, "INVALID_ARGUMENT", "use 1 to 65536"),
    (pb.Topic(name="u", queue_count=-3, queue_type=pb.SIMPLE_CQ), INVALID, "INVALID_ARGUMENT", "use 1 to 65536"),
    (pb.Topic(name="u", queue_count=1), INVALID, "INVALID_ARGUMENT", "QUEUE_TYPE_UNSPECIFIED"),
    (pb.Topic(name="u", queue_count=1, queue_type=9), INVALID, "INVALID_ARGUMENT", "9 (unknown)"),
    (pb.Topic(name="", queue_count=1, queue_type=pb.SIMPLE_CQ), INVALID, "INVALID_ARGUMENT", "empty"),
    (pb.Topic(name="a b", queue_count=1, queue_type=pb.SIMPLE_CQ), INVALID, "INVALID_ARGUMENT", "letters, digits"),
    (None, INVALID, "INVALID_ARGUMENT", "no topic"),
])
def test_create_topic_refusals(client, topic, expected_code, expected_reason, expected_text):
    client.create("t", 4, pb.BATCH_CQ)
    request = pb.CreateTopicRequest() if topic is None else pb.CreateTopicRequest(topic=topic)
    code, reason, details = refusal(client.admin.CreateTopic, request)
    assert (code, reason) == (expected_code, expected_reason) and expected_text in details, details
    assert [t.name for t in client.admin.ListTopics(pb.ListTopicsRequest()).topics] == ["t"]


def test_get_offsets_of_many_topics(client):
    client.create("a", 2)
    client.create("b", 1, pb.BATCH_CQ)
    client.send_single("a", 1)
    client.send_inner("b", 0, [(b"x", {}, 0)] * 5)
    client.wait_readable("b", 0, 5)
    client.wait_readable("a", 1, 1)
    answer = client.admin.GetOffsets(pb.GetOffsetsRequest(topics=["b", "a"]))
    got = {t.topic: [(q.queue_id, q.min_offset, q.max_offset) for q in t.queues] for t in answer.topics}
    assert [t.topic for t in answer.topics] == ["b", "a"]
    assert got == {"a": [(0, 0, 0), (1, 0, 1)], "b": [(0, 0, 5)]}
    everything = client.admin.GetOffsets(pb.GetOffsetsRequest())  # no names: every topic
    assert [t.topic for t in everything.topics] == ["a", "b"]
    code, reason, details = refusal(client.admin.GetOffsets, pb.GetOffsetsRequest(topics=["a", "nope"]))
    assert (code, reason) == (NOT_FOUND, "TOPIC_NOT_FOUND") and "'nope'" in details and "a, b" in details


def pages(client, topics=(), max_queues=0) -> list[tuple[list[str], str]]:
    """GetOffsets page by page: (the topics of each answer, its next page token)."""
    out, token = [], ""
    for _ in range(100):  # bounded: far more pages than any test makes
        answer = client.admin.GetOffsets(pb.GetOffsetsRequest(topics=topics, max_queues=max_queues,
                                                              page_token=token), timeout=CALL_TIMEOUT_S)
        token = answer.next_page_token
        out.append(([t.topic for t in answer.topics], token))
        if not token:
            return out
    raise AssertionError("GetOffsets never gave its last page")


def test_get_offsets_answers_in_pages_of_whole_topics(client):
    for name, queues in (("a", 3), ("b", 3), ("c", 5), ("d", 1)):
        client.create(name, queues)
    assert pages(client, max_queues=6) == [(["a", "b"], "c"), (["c", "d"], "")]
    # A topic larger than a page travels alone.
    assert pages(client, max_queues=4) == [(["a"], "b"), (["b"], "c"), (["c"], "d"), (["d"], "")]
    assert pages(client, ["d", "a", "c"], max_queues=4) == [(["d", "a"], "2"), (["c"], "")]
    for token in ("7", "x", "0"):
        code, reason, details = refusal(client.admin.GetOffsets, pb.GetOffsetsRequest(topics=["a", "b"],
                                                                                      page_token=token))
        assert (code, reason) == (INVALID, "INVALID_ARGUMENT") and "next_page_token" in details, details
    code, _, details = refusal(client.admin.GetOffsets, pb.GetOffsetsRequest(max_queues=-1))
    assert code == INVALID and "max_queues -1 is negative" in details


def test_get_offsets_of_every_topic_is_capped(client):
    """An empty topic list used to answer every queue of every topic at once (14.7 MB)."""
    client.create("w1", 10_000)
    client.create("w2", 10_000)
    client.create("x", 1)
    first = client.admin.GetOffsets(pb.GetOffsetsRequest(max_queues=1 << 30), timeout=CALL_TIMEOUT_S)
    assert [t.topic for t in first.topics] == ["w1"] and first.next_page_token == "w2"
    assert first.ByteSize() < 1 << 20
    assert pages(client) == [(["w1"], "w2"), (["w2", "x"], "")]


def test_a_long_poll_of_offsets_longer_than_the_cap_is_refused_saying_the_cap(client):
    """GetOffsetsRequest.wait_ms is at most 30,000 (rmq_wire.types.MAX_OFFSETS_WAIT_MS); a raw client
    asking more is told the cap, before anything waits."""
    client.create("long-poll", 1)
    request = pb.GetOffsetsRequest(topics=["long-poll"], wait_ms=40_000,
                                   known=[pb.TopicOffsets(topic="long-poll", queues=[pb.QueueOffsets(queue_id=0)])])
    code, _reason, details = refusal(client.admin.GetOffsets, request, timeout=CALL_TIMEOUT_S)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "wait_ms 40000 is more than 30,000" in details


def test_offset_for_timestamp(client):
    client.create("t", 2, pb.BATCH_CQ)
    first = client.send_inner("t", 0, [(b"x", {}, 0)] * 3)
    time.sleep(0.02)
    second = client.send_inner("t", 0, [(b"y", {}, 0)] * 2)
    assert second.store_timestamp_ms > first.store_timestamp_ms
    client.wait_readable("t", 0, 5)

    def at(ts, queue_ids=()):
        answer = client.admin.OffsetForTimestamp(pb.OffsetForTimestampRequest(topic="t", queue_ids=queue_ids,
                                                                              timestamp_ms=ts))
        return [(o.queue_id, o.offset) for o in answer.offsets]

    assert at(0) == [(0, 0), (1, 0)]  # every queue when none is named
    assert at(first.store_timestamp_ms + 1, [0]) == [(0, 3)]
    assert at(second.store_timestamp_ms, [0]) == [(0, 3)]
    assert at(second.store_timestamp_ms + 1, [0, 1]) == [(0, 5), (1, 0)]  # none later: the max offset
    code, reason, details = refusal(client.admin.OffsetForTimestamp,
                                    pb.OffsetForTimestampRequest(topic="t", queue_ids=[0, 2], timestamp_ms=1))
    assert (code, reason) == (NOT_FOUND, "QUEUE_NOT_FOUND") and "queues 0 to 1" in details
    code, reason, _ = refusal(client.admin.OffsetForTimestamp, pb.OffsetForTimestampRequest(topic="t", timestamp_ms=-1))
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")
    code, reason, _ = refusal(client.admin.OffsetForTimestamp, pb.OffsetForTimestampRequest(topic="x", timestamp_ms=1))
    assert (code, reason) == (NOT_FOUND, "TOPIC_NOT_FOUND")


def test_broker_stats(client, broker):
    client.create("s", 3)
    client.create("b", 2, pb.BATCH_CQ)
    client.send_single("s", 0)
    client.send_inner("b", 1, [(b"m", {}, 0)] * 10)
    client.wait_readable("b", 1, 10)
    client.read([("b", 1, 0, 0), ("s", 0, 0, 0)])
    stats = client.stats()
    assert (stats.topics, stats.queues) == (2, 5)
    assert stats.messages_put == 11 and stats.messages_read == 11
    assert stats.commitlog_min_offset == 0 and stats.commitlog_max_offset > 0
    assert stats.dispatched_offset == stats.commitlog_max_offset and stats.dispatch_lag_bytes == 0
    assert 0 <= stats.commitlog_flushed_offset <= stats.commitlog_max_offset
    assert stats.resident_memory_bytes > 10 << 20
    assert stats.data_dir == str(broker.data_dir.resolve()) and stats.flush_mode == "async"
    assert stats.dispatch_lag_ms == 0


def test_broker_stats_report_dispatch_lag(client, broker):
    client.create("s", 1)
    broker.core.store.dispatcher.stop()  # nothing is indexed from here on
    try:
        client.send_single("s", 0)
        stats = client.stats()
        assert stats.dispatch_lag_bytes == stats.commitlog_max_offset - stats.dispatched_offset > 0
        assert stats.dispatch_lag_ms >= 0
    finally:
        broker.core.store.dispatcher.start()
    client.wait_readable("s", 0, 1)
    stats = client.stats()
    assert (stats.dispatch_lag_bytes, stats.dispatch_lag_ms) == (0, 0)


def test_commit_and_query_group_offsets(client):
    client.create("a", 2)
    client.create("b", 1)
    for topic, queue_id in (("a", 0), ("a", 1), ("b", 0)):  # offsets are committed up to the max offset
        for _ in range(10):
            client.send_single(topic, queue_id)
        client.wait_readable(topic, queue_id, 10)

    def commit(group, *entries):
        return client.admin.CommitOffsets(pb.CommitOffsetsRequest(
            group=group, offsets=[pb.GroupOffset(topic=t, queue_id=q, offset=o) for t, q, o in entries]))

    def query(group, topics=()):
        answer = client.admin.QueryOffsets(pb.QueryOffsetsRequest(group=group, topics=topics))
        return [(o.topic, o.queue_id, o.offset) for o in answer.offsets]

    commit("g1", ("a", 0, 5), ("a", 1, 7), ("b", 0, 2))
    commit("g1", ("a", 0, 6))
    commit("g2", ("a", 1, 1))
    assert query("g1") == [("a", 0, 6), ("a", 1, 7), ("b", 0, 2)]
    assert query("g1", ["b"]) == [("b", 0, 2)]
    assert query("g2") == [("a", 1, 1)] and query("nobody") == []

    refusals = [
        (("", ("a", 0, 1)), INVALID, "INVALID_ARGUMENT", "group name is empty"),
        (("g 1", ("a", 0, 1)), INVALID, "INVALID_ARGUMENT", "may only use"),
        (("g1", ("a", 0, 9), ("zzz", 0, 1)), NOT_FOUND, "TOPIC_NOT_FOUND", "'zzz' does not exist"),
        (("g1", ("a", 0, 9), ("a", 2, 1)), NOT_FOUND, "QUEUE_NOT_FOUND", "queues 0 to 1"),
        (("g1", ("a", 0, 9), ("a", 1, -4)), INVALID, "BAD_OFFSET_RANGE", "offset -4"),
    ]
    for args, expected_code, expected_reason, text in refusals:
        code, reason, details = refusal(commit, *args)
        assert (code, reason) == (expected_code, expected_reason) and text in details, (args, details)
    assert query("g1") == [("a", 0, 6), ("a", 1, 7), ("b", 0, 2)], "a refused commit changes nothing"
    code, reason, _ = refusal(query, "")
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")

    # Deleting a topic forgets the groups' offsets of it.
    client.admin.DeleteTopic(pb.DeleteTopicRequest(name="a"))
    assert query("g1") == [("b", 0, 2)] and query("g2") == []


def test_delete_topic_needs_a_name(client):
    code, reason, _ = refusal(client.admin.DeleteTopic, pb.DeleteTopicRequest(name=""))
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")
    code, reason, _ = refusal(client.admin.DescribeTopic, pb.DescribeTopicRequest(name=""))
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")
