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
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.forwarder import Forwarder
from support.grpc_client import Client, refusal

TIMEOUT_S = 10.0


def send_and_read(client: Client, topic: str) -> bool:
    """A message sent to queue 0 of a new topic is stored and read back."""
    client.send_single(topic)
    client.wait_readable(topic, 0, 1)
    return True

@pytest.fixture
def broker(new_broker):
    limits = ClientLimits(max_topics_created_per_client=2, max_queues_created_per_client=10)
    return new_broker(remoting=RemotingOptions(port=0), limits=limits)


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
    code, reason, details = refusal(local.create, "c")
    assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
    assert "client 127.0.0.1 has created 2 topics" in details and "--max-topics-created-per-client" in details
    assert broker.core.store.find_topic("c") is None

    assert other.create("c").created and send_and_read(other, "c")

    local.admin.DeleteTopic(pb.DeleteTopicRequest(name="a"), timeout=TIMEOUT_S)  # its room comes back
    assert local.create("d").created


def test_a_client_past_its_queues_is_refused(clients):
    local, other = clients
    assert local.create("eight", 8).created
    code, reason, details = refusal(local.create, "three", 3)
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
            code, reason, details = refusal(other.create, "c")
            assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED")
            assert f"this broker holds {own + 2} topics, its limit (--max-topics)" in details
            local.admin.DeleteTopic(pb.DeleteTopicRequest(name="a"), timeout=TIMEOUT_S)
            _code, _reason, details = refusal(other.create, "c", 100)  # with b's queue: one too many
            assert f"over its limit of {own_queues + 100} (--max-queues)" in details
            assert other.create("c", 8).created and send_and_read(other, "c")
        finally:
            local.close()
            other.close()
