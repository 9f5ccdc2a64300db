"""Calls in flight per client address on the gRPC port (our contract and RocketMQ 5's): a client
past the limit is refused at once with a sentence naming the limit, while a client of another
address is served; the room comes back as its calls end. Real broker, real channels; the other
address is 127.0.0.2 through a forwarder."""

from __future__ import annotations

import grpc
import pytest

from broker_sim.broker import Broker
from broker_sim.core.limits import ClientLimits
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import pop_pb2
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc
from support.forwarder import OTHER_CLIENT_IP, Forwarder
from support.grpc_client import Client
from support.waits import wait_until

LIMIT = 2
TIMEOUT_S = 20.0


def list_topics(client: Client):
    return client.admin.ListTopics(pb.ListTopicsRequest(), timeout=TIMEOUT_S)


def long_poll(client: Client, topic: str):
    """A pop that waits (nothing to pop): a call held in flight."""
    return client.pop.Pop.future(pop_pb2.PopRequest(group="g", topic=topic, queue_id=-1, max_messages=1,
                                                    invisible_time_ms=60_000, poll_time_ms=15_000), timeout=TIMEOUT_S)


def v2_stub(client: Client) -> v2_grpc.MessagingServiceStub:
    return v2_grpc.MessagingServiceStub(client.channel)

@pytest.fixture
def broker(new_broker):
    return new_broker(limits=ClientLimits(max_requests_in_flight_per_ip=LIMIT))


def refused(call):
    try:
        call()
    except grpc.RpcError as err:
        return err.code(), dict(err.trailing_metadata() or ()).get("rmq-reason"), err.details()
    return None


def test_a_client_past_its_calls_in_flight_is_refused_and_another_is_served(broker):
    local = Client(broker.endpoint)
    forwarder = Forwarder(broker.endpoint)
    other = Client(forwarder.endpoint)
    try:
        for name in ("idle", "orders"):
            local.admin.CreateTopic(pb.CreateTopicRequest(topic=pb.Topic(name=name, queue_count=1,
                                                                         queue_type=pb.SIMPLE_CQ)), timeout=TIMEOUT_S)
        polls = [long_poll(local, "idle") for _ in range(LIMIT)]
        code, reason, details = wait_until(lambda: refused(lambda: list_topics(local)), "the third call is refused")
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS")
        assert "client 127.0.0.1 has 2 requests being served" in details
        assert "--max-requests-in-flight-per-ip" in details and "retry later" in details

        # RocketMQ 5's door answers in the response's status, as its proxy's flow control does
        route = v2_stub(local).QueryRoute(v2.QueryRouteRequest(topic=v2.Resource(name="orders")), timeout=TIMEOUT_S)
        assert route.status.code == v2.TOO_MANY_REQUESTS and "max-requests-in-flight-per-ip" in route.status.message

        # another address: served, sends and reads, on both contracts
        sent = other.messaging.Send(pb.SendRequest(topic="orders", single=pb.SingleMessage(body=b"hello")),
                                    timeout=TIMEOUT_S)
        assert sent.count == 1
        read = wait_until(lambda: [r for r in other.messaging.ReadRanges(pb.ReadRangesRequest(
            ranges=[pb.ReadRange(topic="orders", queue_id=0, start_offset=0)]), timeout=TIMEOUT_S) if r.record_count],
            "the message is readable")
        assert read[0].record_count == 1
        assert v2_stub(other).QueryRoute(v2.QueryRouteRequest(topic=v2.Resource(name="orders")),
                                   timeout=TIMEOUT_S).status.code == v2.OK
        assert broker.calls_in_flight.calls == {"127.0.0.1": LIMIT}
        assert OTHER_CLIENT_IP not in broker.calls_in_flight.calls

        for poll in polls:  # the held calls end: their room comes back
            poll.cancel()
        wait_until(lambda: refused(lambda: list_topics(local)) is None, "the client is served again")
        assert broker.calls_in_flight.calls == {}
    finally:
        local.close()
        other.close()
        forwarder.close()


def test_refusals_of_handlers_still_reach_the_client_through_the_limit(broker):
    client = Client(broker.endpoint)
    try:
        code, reason, details = refused(lambda: client.admin.DescribeTopic(pb.DescribeTopicRequest(name="nowhere"),
                                                                          timeout=TIMEOUT_S))
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "TOPIC_NOT_FOUND") and "nowhere" in details
        wait_until(lambda: broker.calls_in_flight.calls == {}, "the refused call leaves the count")
    finally:
        client.close()


def test_a_read_names_so_many_ranges_and_returns_so_many_bytes_at_most(tmp_path):
    """Issue 44: one ReadRanges of 50,000 ranges streamed 1 GiB with no bound per call. Now the
    ranges of a call are bounded (refused past it, saying so), and so are its bytes, whatever
    budget it asks: the rest is left for the reader's next call."""
    from rmq_spark import Admin, Message, Producer

    limits = ClientLimits(max_ranges_per_read=8, max_read_bytes_per_call=64 << 10)
    with Broker(tmp_path / "data", limits=limits) as broker:
        with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
            admin.create_topic("wide", 1, "SimpleCQ")
            producer.send_batch([Message("wide", b"x" * 1024, queue_id=0) for _ in range(256)])
        assert broker.core.store.wait_dispatched(10.0)
        client = Client(broker.endpoint)
        try:
            def read(count: int, max_bytes: int):
                ranges = [pb.ReadRange(topic="wide", queue_id=0, start_offset=i, end_offset=i + 1)
                          for i in range(count)]
                return list(client.messaging.ReadRanges(pb.ReadRangesRequest(ranges=ranges, max_bytes=max_bytes),
                                                        timeout=TIMEOUT_S))

            code, _reason, details = refused(lambda: read(9, 0))
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert "the call names 9 ranges, the broker's limit is 8 (--max-ranges-per-read)" in details
            assert sum(r.record_count for r in read(8, 0)) == 8
            ranges = [pb.ReadRange(topic="wide", queue_id=0, start_offset=0, end_offset=256)]
            answers = list(client.messaging.ReadRanges(pb.ReadRangesRequest(ranges=ranges, max_bytes=1 << 30),
                                                       timeout=TIMEOUT_S))
            served = sum(r.record_count for r in answers)
            assert 0 < served < 256 and sum(len(r.records) for r in answers) <= (64 << 10) + 2048
            assert answers[-1].done and answers[-1].next_offset == served  # where the reader asks again
        finally:
            client.close()
