"""DeleteTopic is durable once acknowledged (issue 15): a broker killed with SIGKILL right
after it comes back without the topic's group offsets or pop state, so the topic created
again is consumed from its start, nothing skipped."""

import signal

from broker_sim.store import MessageStore
from broker_sim.testing import broker_process
from rmq_spark import Admin, Message, PopConsumer, Producer


def send(endpoint: str, bodies: list[bytes]) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic("gone", 1, "SimpleCQ")
    with Producer(endpoint) as producer:
        for body in bodies:
            producer.send(Message("gone", body))


def test_a_deleted_topics_offsets_do_not_come_back_after_sigkill(tmp_path):
    data = tmp_path / "data"
    with broker_process(data) as (endpoint, _process):  # stopped cleanly: the offsets are on disk
        send(endpoint, [b"old%d" % i for i in range(6)])
        with PopConsumer(endpoint, "g", "gone", max_messages=6, poll_ms=2_000) as consumer:
            consumer.ack(consumer.receive())
        with Admin(endpoint) as admin:
            admin.commit_group_offsets("c", {("gone", 0): 6})
    with broker_process(data) as (endpoint, process):
        with Admin(endpoint) as admin:
            assert admin.delete_topic("gone")
        process.send_signal(signal.SIGKILL)  # at once: the offsets' 5 s flush never ran
        process.wait(30)
    with broker_process(data) as (endpoint, _process):
        with Admin(endpoint) as admin:
            assert [o.group for o in admin.group_offsets("c")] == []
        send(endpoint, [b"new%d" % i for i in range(3)])
        with PopConsumer(endpoint, "g", "gone", max_messages=10, poll_ms=2_000) as consumer:
            fresh = consumer.receive()
            assert [m.body for d in fresh for m in d.messages()] == [b"new0", b"new1", b"new2"]


def test_offsets_of_a_topic_deleted_before_a_crash_are_forgotten_at_start(tmp_path):
    """A crash between deleting the topic and writing its offsets' removal (the delete was never
    acknowledged) leaves offsets of a topic that no longer exists: the broker drops them at start."""
    data = tmp_path / "data"
    with broker_process(data) as (endpoint, _process):
        send(endpoint, [b"old%d" % i for i in range(4)])
        with Admin(endpoint) as admin:
            admin.commit_group_offsets("c", {("gone", 0): 4})
    with MessageStore(data) as store:  # the topic's half of the delete, as the crash left it
        assert store.delete_topic("gone")
    with broker_process(data) as (endpoint, _process):
        with Admin(endpoint) as admin:
            assert [o.group for o in admin.group_offsets("c")] == []
