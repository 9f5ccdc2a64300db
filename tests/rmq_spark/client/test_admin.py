import threading
import time

import pytest

import broker_sim
from rmq_spark import (
    Admin,
    BrokerUnavailableError,
    ConfigError,
    Message,
    Producer,
    QueueType,
    TopicConflictError,
    TopicNotFoundError,
    TransportConfig,
)
from support.sdk import wait_indexed


@pytest.fixture
def admin(endpoint):
    with Admin(endpoint) as admin:
        yield admin


def test_topics(admin, topic_name):
    created = admin.create_topic(topic_name, 4, "SimpleCQ")
    assert (created.name, created.queue_count, created.queue_type) == (topic_name, 4, QueueType.SIMPLE_CQ)
    assert admin.create_topic(topic_name, 4, QueueType.SIMPLE_CQ) == created  # the same again: no error
    assert topic_name in [t.name for t in admin.list_topics()]
    info, queues = admin.describe_topic(topic_name)
    assert info == created and [(q.queue_id, q.min_offset, q.max_offset) for q in queues] == [
        (i, 0, 0) for i in range(4)]
    assert admin.delete_topic(topic_name) is True
    assert topic_name not in [t.name for t in admin.list_topics()]


def test_topic_errors_say_what_to_do(admin, topic_name):
    admin.create_topic(topic_name, 2, "BatchCQ")
    with pytest.raises(TopicConflictError, match="2 queues of type BatchCQ"):
        admin.create_topic(topic_name, 3, "BatchCQ")
    with pytest.raises(TopicNotFoundError, match=f"'{topic_name}x' does not exist.*{topic_name}"):
        admin.describe_topic(topic_name + "x")
    with pytest.raises(ConfigError, match="BatchCQ or SimpleCQ"):
        admin.create_topic(topic_name, 2, "Kafka")
    with pytest.raises(ConfigError, match="at least one queue"):
        admin.create_topic(topic_name, 0)


def test_offsets_of_many_topics_and_by_time(admin, endpoint, topic_name):
    a, b = topic_name + "a", topic_name + "b"
    admin.create_topic(a, 2, "BatchCQ")
    admin.create_topic(b, 3, "SimpleCQ")
    with Producer(endpoint) as producer:
        first = producer.send_batch([Message(a, b"m", queue_id=1)] * 5)
        producer.send(Message(b, b"m", queue_id=2))
    wait_indexed(endpoint, a, 5)
    wait_indexed(endpoint, b, 1)
    offsets = admin.offsets([a, b])
    assert [(q.queue_id, q.max_offset) for q in offsets[a]] == [(0, 0), (1, 5)]
    assert [(q.queue_id, q.max_offset) for q in offsets[b]] == [(0, 0), (1, 0), (2, 1)]
    stored_at = first[0].store_timestamp_ms
    assert admin.offsets_for_timestamp(a, stored_at) == {0: 0, 1: 0}
    assert admin.offsets_for_timestamp(a, stored_at + 1, queue_ids=[1]) == {1: 5}


def test_offsets_wait_at_the_broker_until_a_message_lands(admin, endpoint, topic_name):
    """A long poll: the broker answers once a queue ends past what the reader has, woken by the
    store (20 s would be the wait: it answers long before); with nothing stored, after the wait."""
    admin.create_topic(topic_name, 2, "BatchCQ")
    past = {(q.topic, q.broker, q.queue_id): q.max_offset for q in admin.offsets([topic_name])[topic_name]}
    started = time.monotonic()
    assert [q.max_offset for q in admin.offsets([topic_name], past=past, wait_ms=200)[topic_name]] == [0, 0]
    assert time.monotonic() - started >= 0.2  # nothing came: it waited it out
    with Producer(endpoint) as producer:
        sender = threading.Thread(target=producer.send, args=(Message(topic_name, b"m", queue_id=1),))
        sender.start()
        started = time.monotonic()
        offsets = admin.offsets([topic_name], past=past, wait_ms=20_000)[topic_name]
        waited_s = time.monotonic() - started
        sender.join()
    assert [q.max_offset for q in offsets] == [0, 1] and waited_s < 15  # woken by the send, not timed out
    admin.delete_topic(topic_name)  # a queue that is gone answers at once too
    assert admin.offsets([], past=past, wait_ms=20_000).get(topic_name) is None
    with pytest.raises(ConfigError, match="wait_ms=40000: give 0"):
        admin.offsets([topic_name], past=past, wait_ms=40_000)


def test_offsets_follow_the_brokers_pages(tmp_path):
    """The broker answers 16,384 queues at most at a time: 20,002 queues come in two pages."""
    with broker_sim.embedded(tmp_path / "data", auto_create_topics=None) as endpoint, Admin(endpoint) as admin:
        for name, queues in (("w1", 10_000), ("w2", 10_000), ("x", 2)):
            admin.create_topic(name, queues)
        with Producer(endpoint) as producer:
            producer.send(Message("w2", b"m", queue_id=9_999))
        wait_indexed(endpoint, "w2", 1)
        for asked in ([], ["x", "w2", "w1"]):  # every topic, and named ones
            offsets = admin.offsets(asked)
            assert {topic: len(queues) for topic, queues in offsets.items()} == {"w1": 10_000, "w2": 10_000, "x": 2}
            assert offsets["w2"][9_999].max_offset == 1


def test_group_offsets(admin, endpoint, topic_name):
    admin.create_topic(topic_name, 2)
    with Producer(endpoint) as producer:  # offsets are committed up to the queue's end
        for queue_id, count in ((0, 7), (1, 3)):
            for _ in range(count):
                producer.send(Message(topic_name, b"x", queue_id=queue_id))
    admin.commit_group_offsets("g1", {(topic_name, 0): 7, (topic_name, 1): 3})
    got = {(o.topic, o.queue_id): o.offset for o in admin.group_offsets("g1", [topic_name])}
    assert got == {(topic_name, 0): 7, (topic_name, 1): 3}
    assert admin.group_offsets("nobody") == []


def test_broker_stats(admin, endpoint, topic_name):
    admin.create_topic(topic_name, 1)
    with Producer(endpoint) as producer:
        producer.send(Message(topic_name, b"x" * 100))
    wait_indexed(endpoint, topic_name, 1)
    stats = admin.broker_stats()
    assert stats.topics >= 1 and stats.messages_put >= 1
    assert stats.commitlog_max_offset >= stats.dispatched_offset > 0
    assert stats.resident_memory_bytes > 0 and stats.flush_mode == "async"


def test_bad_endpoint_and_unreachable_broker():
    with pytest.raises(ConfigError, match="HOST:PORT"):
        Admin("localhost")
    unreachable = Admin("127.0.0.1:1", TransportConfig(retries=1, timeout_ms=500, retry_backoff_ms=10))
    with pytest.raises(BrokerUnavailableError, match="127.0.0.1:1") as caught:
        unreachable.list_topics()
    assert caught.value.retriable
    unreachable.close()
