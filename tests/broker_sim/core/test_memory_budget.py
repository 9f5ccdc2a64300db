"""The broker's memory budget (core/limits.py MemoryBudget): one budget for what every door
buffers for clients, a share per client. Past its share a client's next buffer is refused with
a sentence naming the flag; when the budget is full the client holding the most is cut off and
the others go on. Real broker, real channels; a second client address through a forwarder."""

from __future__ import annotations

import os

import grpc
import pytest

from broker_sim.broker import Broker
from broker_sim.core.errors import BrokerFault, Reason
from broker_sim.core.limits import ClientLimits, MemoryBudget
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from support.forwarder import Forwarder
from support.waits import wait_until

TIMEOUT_S = 20.0  # a bound on waits, as the gRPC limits' tests

MiB = 1 << 20
STALLED_STREAMS = 6
STALLED_S = 180.0  # a stalled stream's deadline: it must outlive the test, however busy the machine


def test_a_client_past_its_share_is_refused_and_the_greediest_is_cut_for_another():
    budget = MemoryBudget(total_bytes=100, per_client_bytes=50)  # the cut line: 100 - 50
    cuts = []
    greedy = budget.holding("a", "a stream", cut=cuts.append)
    greedy.reserve(45)
    with pytest.raises(BrokerFault) as refused:
        greedy.reserve(10)
    assert refused.value.reason is Reason.TOO_MANY_REQUESTS
    message = refused.value.message
    assert "client a holds 45 bytes" in message and "--memory-budget-per-client-bytes" in message
    other = budget.holding("b", "a stream", cut=cuts.append)
    other.reserve(4)
    assert budget.held == 49 and cuts == []
    third = budget.holding("c", "a connection", cut=cuts.append)
    third.reserve(30)  # past the cut line: "a", holding the most, is cut; "c" goes on
    assert len(cuts) == 1 and "client a held the most" in cuts[0] and "--memory-budget-bytes" in cuts[0]
    assert budget.held == 34 and budget.clients == {"b": 4, "c": 30}
    with pytest.raises(BrokerFault, match="was ended"):
        greedy.reserve(1)
    for holding in (greedy, other, third):
        holding.close()
    assert budget.held == 0 and budget.clients == {}

    x, y, z = (budget.holding(name, "a stream", cut=cuts.append) for name in "xyz")
    for holding in (x, y, z):
        holding.reserve(30)  # past the cut line, but nobody holds more than the asking one would: no cut
    with pytest.raises(BrokerFault, match="client x, the one holding the most"):  # the greediest asks: refused
        x.reserve(11)
    assert len(cuts) == 1 and budget.held == 90


@pytest.fixture
def broker(new_broker):
    return new_broker(limits=ClientLimits(memory_budget_bytes=25 * MiB, memory_budget_per_client_bytes=21 * MiB))


def channel(endpoint: str) -> grpc.Channel:
    """A client that reads nothing stalls its streams by HTTP/2's flow control: its window stays
    at 64 KiB (no bandwidth probe: under load the probe grew it until whole streams were sent,
    and they never stalled)."""
    return grpc.insecure_channel(endpoint, options=[("grpc.max_receive_message_length", 64 * MiB),
                                                    ("grpc.http2.bdp_probe", 0)])


def read_all(endpoint: str) -> int:
    with channel(endpoint) as ch:
        responses = pb_grpc.MessagingStub(ch).ReadRanges(pb.ReadRangesRequest(
            ranges=[pb.ReadRange(topic="big", queue_id=0, start_offset=0)]), timeout=TIMEOUT_S)
        return sum(r.record_count for r in responses)


def outcome(call) -> tuple:
    """Read what a stalled stream got, to its end: (status, reason, details)."""
    try:
        for _ in call:
            pass
    except grpc.RpcError as err:
        return err.code(), dict(err.trailing_metadata() or ()).get("rmq-reason"), err.details()
    return grpc.StatusCode.OK, None, ""


def test_stalled_streams_hold_no_more_than_the_budget_and_another_client_reads(broker):
    with channel(broker.endpoint) as ch:
        stub = pb_grpc.MessagingStub(ch)
        pb_grpc.AdminStub(ch).CreateTopic(pb.CreateTopicRequest(topic=pb.Topic(name="big", queue_count=1,
                                                                               queue_type=pb.SIMPLE_CQ)))
        body = os.urandom(512 << 10)
        for _ in range(48):  # 24 MiB: each stream has many responses of 4 MiB to make
            stub.Send(pb.SendRequest(topic="big", queue_id=0, single=pb.SingleMessage(body=body)), timeout=TIMEOUT_S)
        wait_until(lambda: read_all(broker.endpoint) == 48, "the messages are readable", timeout_s=30)

    memory, counters = broker.core.memory, broker.core.counters
    stalled = [channel(broker.endpoint) for _ in range(STALLED_STREAMS)]  # a channel each: no shared window
    forwarder = Forwarder(broker.endpoint)
    calls = []
    try:
        for ch in stalled:  # one at a time: each stalls (a response waits for the client) or is refused
            calls.append(pb_grpc.MessagingStub(ch).ReadRanges(pb.ReadRangesRequest(
                ranges=[pb.ReadRange(topic="big", queue_id=0, start_offset=0)]), timeout=STALLED_S))
            wait_until(lambda: counters.responses_waiting + sum(c.done() for c in calls) == len(calls),
                       "the stream stalls or is refused", timeout_s=30,
                       state=lambda: f"({counters.responses_waiting} waiting, {sum(c.done() for c in calls)} of "
                                     f"{len(calls)} ended)")
        # each stalled stream holds a response twice (ours, gRPC's copy): the client's share fills
        assert memory.held <= memory.total_bytes and memory.clients["127.0.0.1"] <= memory.per_client_bytes
        ended = [c for c in calls if c.done()]
        refused = [outcome(c) for c in ended]
        assert refused, "a stream past the client's share is refused"
        for code, reason, details in refused:
            assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_MANY_REQUESTS")
            assert "--memory-budget-per-client-bytes" in details

        # another client reads all: the budget is full, so the greediest (the stalled one) is cut
        assert read_all(forwarder.endpoint) == 48
        cut = [outcome(c) for c in calls if c not in ended]
        assert any(reason == "TOO_MANY_REQUESTS" and "held the most" in details and "--memory-budget-bytes" in details
                   for _code, reason, details in cut)
        wait_until(lambda: memory.held == 0 and memory.clients == {}, "every stream's memory is released")
    finally:
        for c in stalled:
            c.close()
        forwarder.close()


def resident_bytes() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_memory_of_cancelled_streams_goes_back_to_the_system(tmp_path):
    """glibc keeps freed buffers in its arenas: without a trim the broker stayed at its peak."""
    with Broker(tmp_path / "data") as broker, channel(broker.endpoint) as ch:
        pb_grpc.AdminStub(ch).CreateTopic(pb.CreateTopicRequest(topic=pb.Topic(name="big", queue_count=1,
                                                                               queue_type=pb.SIMPLE_CQ)))
        body = os.urandom(512 << 10)
        for _ in range(32):
            pb_grpc.MessagingStub(ch).Send(pb.SendRequest(topic="big", queue_id=0, single=pb.SingleMessage(body=body)),
                                           timeout=TIMEOUT_S)
        wait_until(lambda: read_all(broker.endpoint) == 32, "the messages are readable", timeout_s=30)
        before = resident_bytes()
        stalled = [channel(broker.endpoint) for _ in range(STALLED_STREAMS * 3)]
        calls = [pb_grpc.MessagingStub(c).ReadRanges(pb.ReadRangesRequest(
            ranges=[pb.ReadRange(topic="big", queue_id=0, start_offset=0)]), timeout=STALLED_S) for c in stalled]
        wait_until(lambda: broker.core.counters.responses_waiting == len(calls), "every stream stalls", timeout_s=30,
                   state=lambda: f"({broker.core.counters.responses_waiting} waiting, {sum(c.done() for c in calls)} "
                                 "ended)")
        grown = resident_bytes() - before
        assert grown > 64 * MiB  # each holds a response or two of 4 MiB
        for call, c in zip(calls, stalled):
            call.cancel()
            c.close()
        wait_until(lambda: broker.core.counters.responses_waiting == 0, "the streams end")
        wait_until(lambda: resident_bytes() - before < grown / 2, "most of the streams' memory is given back",
                   timeout_s=15,
                   state=lambda: f"(grown {grown >> 20} MiB, now {(resident_bytes() - before) >> 20} MiB)")
