"""A topic's perm through RocketMQ 5's gRPC door: QueryRoute's queue permission (READ_WRITE, READ,
WRITE as the proxy makes them from the route's perm), QueryAssignment's FORBIDDEN for a topic with
no readable queue, and sends and receives refused FORBIDDEN with RocketMQ's sentences."""

from __future__ import annotations

import uuid

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from broker_sim.broker import Broker
from broker_sim.store import QueueType
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with Broker(tmp_path_factory.mktemp("v2-perm"), "127.0.0.1", 0, auto_create_topics=None) as started:
        yield started


@pytest.fixture
def call(broker):
    channel = grpc.insecure_channel(broker.endpoint)
    stub = v2_grpc.MessagingServiceStub(channel)
    metadata = (("x-mq-client-id", f"raw-{uuid.uuid4().hex[:8]}"), ("x-mq-language", "PYTHON"))
    yield lambda method, request: getattr(stub, method)(request, metadata=metadata, timeout=30)
    channel.close()


def topic_with(broker, perm: int, queues: int = 2) -> str:
    name = f"perm{perm}-{uuid.uuid4().hex[:6]}"
    broker.core.create_topic(name, queues, QueueType.SIMPLE_CQ)
    broker.core.update_topic(name, perm=perm)
    return name


def send(call, topic: str) -> v2.Status:
    props = v2.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=v2.NORMAL, body_encoding=v2.IDENTITY)
    message = v2.Message(topic=v2.Resource(name=topic), system_properties=props, body=b"x")
    return call("SendMessage", v2.SendMessageRequest(messages=[message])).status


def receive(call, topic: str) -> v2.Status:
    wait = Duration()
    wait.FromMilliseconds(5000)
    invisible = Duration()
    invisible.FromMilliseconds(30_000)
    request = v2.ReceiveMessageRequest(
        group=v2.Resource(name="g"), message_queue=v2.MessageQueue(topic=v2.Resource(name=topic), id=-1),
        filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"), batch_size=1,
        invisible_duration=invisible, long_polling_timeout=wait)
    return list(call("ReceiveMessage", request))[0].status


@pytest.mark.parametrize(("perm", "permission"), [(6, v2.READ_WRITE), (4, v2.READ), (2, v2.WRITE)])
def test_routes_give_every_queue_the_topics_permission(broker, call, perm, permission):
    topic = topic_with(broker, perm, queues=3)
    answer = call("QueryRoute", v2.QueryRouteRequest(topic=v2.Resource(name=topic)))
    assert answer.status.code == v2.OK
    assert [(q.id, q.permission) for q in answer.message_queues] == [(i, permission) for i in range(3)]


def test_a_topic_with_no_readable_queue_gets_no_assignment(broker, call):
    request = lambda topic: v2.QueryAssignmentRequest(topic=v2.Resource(name=topic),  # noqa: E731
                                                      group=v2.Resource(name="g"))
    refused = call("QueryAssignment", request(topic_with(broker, 2)))
    assert (refused.status.code, refused.status.message) == (v2.FORBIDDEN, "no readable queue")
    read_only = call("QueryAssignment", request(topic_with(broker, 4)))
    assert read_only.status.code == v2.OK
    assert [a.message_queue.permission for a in read_only.assignments] == [v2.READ]


def test_sends_and_receives_refused_by_the_topics_perm(broker, call):
    read_only, write_only = topic_with(broker, 4), topic_with(broker, 2)
    refused = send(call, read_only)
    assert refused.code == v2.FORBIDDEN and refused.message.startswith(
        f"the topic[{read_only}] sending message is forbidden")
    assert send(call, write_only).code == v2.OK
    refused = receive(call, write_only)
    assert refused.code == v2.FORBIDDEN and refused.message.startswith(
        f"the topic[{write_only}] peeking message is forbidden")
    assert receive(call, read_only).code == v2.MESSAGE_NOT_FOUND  # readable, and empty
