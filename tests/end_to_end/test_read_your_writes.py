"""Read-your-writes on every door (issue 29, point 5): once a send's answer has come back (a
blocking send, a batch, an AutoBatch future, a transaction's commit), a read started afterwards
sees its messages, max offsets and messages alike, while the dispatcher lags behind the writers
(``LaggingDispatch``: it indexes nothing until the read has started)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rmq_spark import (
    Admin,
    Message,
    OffsetRange,
    PopConsumer,
    Producer,
    RangeReader,
    Transactions,
    new_transaction_id,
)
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc
from support.lagging_dispatch import LaggingDispatch

QUEUES = 2


@pytest.fixture(params=["SimpleCQ", "BatchCQ"])
def topic(request, doors_broker):
    name = f"ryw-{request.param}-{uuid.uuid4().hex[:8]}"
    with Admin(doors_broker.endpoint) as admin:
        admin.create_topic(name, QUEUES, request.param)
    return name


def messages(topic: str, n: int, queue_id: int = 0) -> list[Message]:
    return [Message(topic, b"m%d" % i, queue_id=queue_id) for i in range(n)]


# --- what is read: max offsets, or the messages ------------------------------------------------

def max_offsets(doors: dict, topic: str) -> list[int]:
    """Each queue's max offset, through the door the test names."""
    if "v2" in doors:
        return [v2_query_end(doors["v2"], topic, q) for q in range(QUEUES)]
    with Admin(**doors) as admin:
        return [q.max_offset for q in admin.offsets([topic])[topic]]


def bodies(doors: dict, topic: str) -> list[bytes]:
    """Every message of the topic, read to the queues' ends at read time, through the door named."""
    if "v2" in doors:
        return [m.body for q in range(QUEUES) for m in v2_pull(doors["v2"], topic, q)]
    with RangeReader(**doors) as reader:
        return [body for batch in reader.read([OffsetRange(topic, q, 0, None) for q in range(QUEUES)])
                for body in batch.column("body").to_pylist()]


def popped(doors: dict, topic: str) -> int:
    """Messages one pop (no waiting for new ones) takes from the topic, through the door named."""
    with PopConsumer(**doors, group=f"g-{uuid.uuid4().hex[:8]}", topics=topic, max_messages=32, poll_ms=0) as pops:
        return sum(delivery.count for delivery in pops.receive())


READS = {"max offsets": lambda doors, topic: sum(max_offsets(doors, topic)),
         "messages": lambda doors, topic: len(bodies(doors, topic))}


def door_of(broker, name: str) -> dict:
    return {"grpc": {"endpoint": broker.endpoint}, "remoting": {"name_server": broker.remoting.address},
            "v2": {"v2": broker.endpoint}}[name]


# --- the v2 door, through its own stubs -------------------------------------------------------

def v2_call(endpoint: str, method: str, request):
    with grpc.insecure_channel(endpoint) as channel:
        stub = v2_grpc.MessagingServiceStub(channel)
        metadata = (("x-mq-client-id", f"ryw-{uuid.uuid4().hex[:8]}"), ("x-mq-protocol", "v2"))
        answer = getattr(stub, method)(request, metadata=metadata, timeout=60)
        return list(answer) if method == "PullMessage" else answer


def v2_query_end(endpoint: str, topic: str, queue_id: int) -> int:
    queue = v2.MessageQueue(topic=v2.Resource(name=topic), id=queue_id)
    answer = v2_call(endpoint, "QueryOffset", v2.QueryOffsetRequest(message_queue=queue, query_offset_policy=v2.END))
    assert answer.status.code == v2.OK, answer.status.message
    return answer.offset


def v2_pull(endpoint: str, topic: str, queue_id: int) -> list:
    queue = v2.MessageQueue(topic=v2.Resource(name=topic), id=queue_id)
    frames = v2_call(endpoint, "PullMessage", v2.PullMessageRequest(group=v2.Resource(name="ryw"), message_queue=queue,
                                                                    offset=0, batch_size=1000))
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


def v2_send(endpoint: str, topic: str, n: int) -> None:
    sent = [v2.Message(topic=v2.Resource(name=topic), body=b"v%d" % i, system_properties=v2.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), message_type=v2.NORMAL, body_encoding=v2.IDENTITY)) for i in range(n)]
    answer = v2_call(endpoint, "SendMessage", v2.SendMessageRequest(messages=sent))
    assert answer.status.code == v2.OK and len(answer.entries) == n, answer.status.message


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("read", READS)
@pytest.mark.parametrize("door", ["grpc", "remoting"])
def test_a_blocking_send_and_a_batch_are_read_once_answered(doors_broker, topic, door, read):
    doors = door_of(doors_broker, door)
    with Producer(**doors) as producer, LaggingDispatch(doors_broker.core.store) as lag:
        producer.send(Message(topic, b"single", queue_id=1))  # SEND_MESSAGE_V2 through name servers
        producer.send_batch(messages(topic, 20))  # SEND_BATCH_MESSAGE through name servers
        assert lag.read(lambda: READS[read](doors, topic)) == 21


@pytest.mark.parametrize("read", READS)
def test_autobatch_futures_are_read_once_their_results_came(doors_broker, topic, read):
    doors = door_of(doors_broker, "grpc")
    with Producer(**doors, batch_max_delay_ms=1) as producer, LaggingDispatch(doors_broker.core.store) as lag:
        futures = [producer.send_async(m) for m in messages(topic, 300)]
        assert all(f.result(60).queue_offset >= 0 for f in futures)
        assert lag.read(lambda: READS[read](doors, topic)) == 300


@pytest.mark.parametrize("read", READS)
def test_a_v2_send_is_read_once_answered(doors_broker, topic, read):
    doors = door_of(doors_broker, "v2")
    with LaggingDispatch(doors_broker.core.store) as lag:
        v2_send(doors_broker.endpoint, topic, 7)
        assert lag.read(lambda: READS[read](doors, topic)) == 7


@pytest.mark.parametrize("door", ["grpc", "remoting", "v2"])
def test_a_committed_transaction_is_read_once_the_commit_answered(doors_broker, door):
    topic = f"ryw-txn-{uuid.uuid4().hex[:8]}"
    with Admin(doors_broker.endpoint) as admin:
        admin.create_topic(topic, QUEUES, "BatchCQ")
    with Producer(doors_broker.endpoint, transaction_id=new_transaction_id(), codec="arrow") as writer:
        writer.send_batch(messages(topic, 40))
        writer.send_batch(messages(topic, 10, queue_id=1))
        prepared = writer.prepared()
    doors = door_of(doors_broker, door)
    with Transactions(doors_broker.endpoint) as txns, LaggingDispatch(doors_broker.core.store) as lag:
        assert txns.commit([prepared]).messages_made_visible == 50
        assert lag.read(lambda: max_offsets(doors, topic)) == [40, 10]


@pytest.mark.parametrize("door", ["grpc", "remoting"])
def test_a_pop_is_served_once_the_send_answered(doors_broker, topic, door):
    doors = door_of(doors_broker, door)
    with Producer(**doors) as producer, LaggingDispatch(doors_broker.core.store) as lag:
        producer.send_batch(messages(topic, 5, queue_id=1))
        assert lag.read(lambda: popped(doors, topic)) == 5


@pytest.mark.parametrize("door, read", [("remoting", max_offsets), ("grpc", popped)])
def test_a_read_waiting_for_the_index_leaves_the_door_s_event_loop_free(doors_broker, door, read):
    """Reads the remoting door runs on its event loop, and pops on ours, run in the door's
    pool instead while they may wait for the index: a send is answered meanwhile."""
    topic = f"ryw-loop-{uuid.uuid4().hex[:8]}"
    with Admin(doors_broker.endpoint) as admin:
        admin.create_topic(topic, QUEUES, "SimpleCQ")
    doors, store = door_of(doors_broker, door), doors_broker.core.store
    pool = ThreadPoolExecutor(1)
    try:
        with Producer(**doors) as producer, LaggingDispatch(store):
            producer.send(Message(topic, b"first", queue_id=0))
            waits = store.reads_waited_for_index
            reading = pool.submit(read, doors, topic)
            deadline = time.monotonic() + 60
            while store.reads_waited_for_index == waits:  # the read waits for the index
                assert not reading.done() and time.monotonic() < deadline, "the read did not wait for the index"
                time.sleep(0.001)
            producer.send(Message(topic, b"second", queue_id=1))
            assert not reading.done()  # answered while the read still waits
        seen = reading.result(60)
        assert (seen[0] if isinstance(seen, list) else seen) >= 1  # "first", at least
    finally:
        pool.shutdown()


def test_a_topic_description_never_waits_for_the_index(doors_broker, topic):
    """Producers route by a topic's description and the Spark sink checks its topic with it: a
    write must not wait for the dispatcher (a Spark task's describe_topic waited index_wait_ms
    behind its own task's rows and hit its deadline). Offsets are what reads plan from."""
    with LaggingDispatch(doors_broker.core.store) as lag, Producer(doors_broker.endpoint) as producer, \
            Admin(doors_broker.endpoint) as admin:
        producer.send(Message(topic, b"stored, not indexed", queue_id=0))
        waits = doors_broker.core.store.reads_waited_for_index
        _info, queues = admin.describe_topic(topic)
        assert doors_broker.core.store.reads_waited_for_index == waits
        assert lag.read(lambda: admin.offsets([topic])[topic][0].max_offset) >= 1
