"""Topics and queues created: per client (its address, on every door) and on the whole broker.
Past a limit a creation is refused with a sentence naming the limit, nothing is created, and
another client goes on creating, sending and reading; deleting a topic gives its room back."""

from __future__ import annotations

import grpc
import orjson
import pytest

from broker_sim.broker import Broker
from broker_sim.core.limits import ClientLimits
from broker_sim.doors.remoting import RemotingOptions
from forwarder import Forwarder
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode

TIMEOUT_S = 10.0


class Client:
    def __init__(self, endpoint: str):
        self.channel = grpc.insecure_channel(endpoint)
        self.admin = pb_grpc.AdminStub(self.channel)
        self.messaging = pb_grpc.MessagingStub(self.channel)

    def create(self, name: str, queues: int = 1):
        topic = pb.Topic(name=name, queue_count=queues, queue_type=pb.SIMPLE_CQ)
        return self.admin.CreateTopic(pb.CreateTopicRequest(topic=topic), timeout=TIMEOUT_S)

    def refusal(self, name: str, queues: int = 1) -> tuple:
        try:
            self.create(name, queues)
        except grpc.RpcError as err:
            return err.code(), dict(err.trailing_metadata() or ()).get("rmq-reason"), err.details()
        raise AssertionError(f"topic {name} was created")

    def send_and_read(self, topic: str) -> bool:
        self.messaging.Send(pb.SendRequest(topic=topic, single=pb.SingleMessage(body=b"hi")), timeout=TIMEOUT_S)
        for _ in range(500):  # until the dispatcher indexed it
            answers = self.messaging.ReadRanges(pb.ReadRangesRequest(
                ranges=[pb.ReadRange(topic=topic, queue_id=0, start_offset=0)]), timeout=TIMEOUT_S)
            if any(answer.record_count for answer in answers):
                return True
        return False

    def close(self):
        self.channel.close()


@pytest.fixture
def broker(tmp_path):
    limits = ClientLimits(max_topics_created_per_client=2, max_queues_created_per_client=10)
    with Broker(tmp_path / "data", remoting=RemotingOptions(port=0), limits=limits) as started:
        yield started


@pytest.fixture
def clients(broker):
    """A client on 127.0.0.1 and one on 127.0.0.2 (through a forwarder)."""
    forwarder = Forwarder(broker.endpoint)
    local, other = Client(broker.endpoint), Client(forwarder.endpoint)
    yield local, other
    local.close()
    other.close()
    forwarder.close()


def test_a_client_past_its_topics_is_refused_and_another_creates_sends_and_reads(broker, clients):
    local, other = clients
    assert local.create("a").created and local.create("b").created
    assert not local.create("a").created  # the same topic again: no room taken
    code, reason, details = local.refusal("c")
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
    assert "client 127.0.0.1 has created 2 topics" in details and "--max-topics-created-per-client" in details
    assert broker.core.store.find_topic("c") is None

    assert other.create("c").created and other.send_and_read("c")

    local.admin.DeleteTopic(pb.DeleteTopicRequest(name="a"), timeout=TIMEOUT_S)  # its room comes back
    assert local.create("d").created


def test_a_client_past_its_queues_is_refused(clients):
    local, other = clients
    assert local.create("eight", 8).created
    code, reason, details = local.refusal("three", 3)
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
    assert "queues created by client 127.0.0.1 to 11, over its limit of 10" in details
    assert local.create("two", 2).created and other.create("three", 3).created


def test_the_remoting_door_counts_creations_and_heartbeat_retry_topics_for_the_same_address(broker, clients):
    local, _other = clients
    assert local.create("a").created  # through our door: the address's first of 2
    with RemotingConnection(broker.remoting.address) as conn:
        heartbeat = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
            "groupName": "group-1", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": []}]}
        assert conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)).code == ResponseCode.SUCCESS
        assert broker.core.store.find_topic("%RETRY%group-1") is not None  # its second

        refused = conn.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "b", "readQueueNums": 1,
                                                                    "writeQueueNums": 1, "perm": 6})
        assert refused.code == ResponseCode.INVALID_PARAMETER
        assert "client 127.0.0.1 has created 2 topics" in refused.remark
        heartbeat["consumerDataSet"][0]["groupName"] = "group-2"
        refused = conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat))
        assert refused.code == ResponseCode.INVALID_PARAMETER and "%RETRY%group-2" in refused.remark


def test_the_broker_wide_limits_refuse_every_client(tmp_path):
    with Broker(tmp_path / "data") as probe:
        own = probe.core.list_topics()  # the broker's own topics count too
        own, own_queues = len(own), sum(topic.queue_count for topic in own)
    limits = ClientLimits(max_topics=own + 2, max_queues=own_queues + 100)
    with Broker(tmp_path / "data", limits=limits) as broker, Forwarder(broker.endpoint) as forwarder:
        local, other = Client(broker.endpoint), Client(forwarder.endpoint)
        try:
            assert local.create("a").created and other.create("b").created
            code, reason, details = other.refusal("c")
            assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
            assert f"this broker holds {own + 2} topics, its limit (--max-topics)" in details
            local.admin.DeleteTopic(pb.DeleteTopicRequest(name="a"), timeout=TIMEOUT_S)
            _code, _reason, details = other.refusal("c", 100)  # with b's queue: one too many
            assert f"over its limit of {own_queues + 100} (--max-queues)" in details
            assert other.create("c", 8).created and other.send_and_read("c")
        finally:
            local.close()
            other.close()
