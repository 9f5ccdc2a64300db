"""One client can never starve the others: ReadRanges streams whose clients never read hold no
RPC thread (the broker serves everyone else meanwhile) and are ended after the broker's stream
write timeout; long-polling pops cannot take every thread. Real streams stalled on HTTP/2 flow
control; bounded waits, no timing assertions."""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import grpc
import pytest

from broker_sim.broker import Broker
from broker_sim.core.limits import ClientLimits
from broker_sim.pop import PopConfig
from broker_sim.store import StoreConfig
from broker_sim.store.paths import StorePaths
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import pop_pb2, pop_pb2_grpc
from support import waits
from support.grpc_client import CALL_TIMEOUT_S, CHANNEL_OPTIONS, Client

# No BDP probing: the client's window stays at its initial 64 KiB, so a stream that is not read
# stops a 1 MiB response on the broker's side.
STALLED_OPTIONS = CHANNEL_OPTIONS + [("grpc.http2.bdp_probe", 0)]
STALLED_DEADLINE_S = 300.0  # the stalled calls end by then whatever happens: no test can hang on them
WAIT_S = 60.0
wait_until = functools.partial(waits.wait_until, timeout_s=WAIT_S)  # a loaded broker: each wait gets a minute
BIG_MESSAGES = 4
CONFIG = StoreConfig(segment_bytes=16 << 20)


@contextlib.contextmanager
def running(tmp_path, **options):
    broker = Broker(tmp_path / "data", "127.0.0.1", 0, CONFIG, **options)
    broker.start()
    client = Client(broker.endpoint)
    try:
        yield broker, client
    finally:
        client.close()
        broker.stop(grace=1.0)


def write_big_topic(client: Client) -> None:
    """A queue holding one stored batch of about 1 MiB: a single ReadRanges response."""
    client.create("big", 1, pb.BATCH_CQ)
    client.send_inner("big", 0, [(os.urandom(256 << 10), {}, 0)] * BIG_MESSAGES)
    client.wait_readable("big", 0, BIG_MESSAGES)


@contextlib.contextmanager
def stalled_streams(endpoint: str, count: int, channels: int = 4):
    """``count`` ReadRanges streams of the big queue that their clients never read."""
    opened = [grpc.insecure_channel(endpoint, options=STALLED_OPTIONS) for _ in range(channels)]
    request = pb.ReadRangesRequest(ranges=[pb.ReadRange(topic="big")])
    streams = [opened[i % channels].unary_stream("/rmq_spark.protocol.v1.Messaging/ReadRanges",
                                                 request_serializer=pb.ReadRangesRequest.SerializeToString,
                                                 response_deserializer=pb.ReadRangesResponse.FromString)(
        request, timeout=STALLED_DEADLINE_S) for i in range(count)]
    try:
        yield streams
    finally:
        for stream in streams:
            stream.cancel()
        for channel in opened:
            channel.close()


def ended_how(streams) -> str:
    """How the first of ``streams`` to end ended: ", the first: CODE details"."""
    for stream in streams:
        if stream.done():
            try:
                stream.result()
            except grpc.RpcError as err:
                return f", the first: {err.code().name} {err.details()}"
            except Exception as err:  # noqa: BLE001 - any end is worth naming
                return f", the first: {err!r}"
            return ", the first: with OK"
    return ""


def waiting_pops(endpoint: str, count: int) -> list[threading.Thread]:
    """``count`` pops long-polling an empty topic, each in a thread of its own (and of the broker's)."""
    def pop():
        with grpc.insecure_channel(endpoint) as channel:
            pop_pb2_grpc.PopStub(channel).Pop(pop_pb2.PopRequest(
                group="g", topic="quiet", queue_id=-1, max_messages=1, invisible_time_ms=60_000,
                poll_time_ms=60_000), timeout=STALLED_DEADLINE_S)

    threads = [threading.Thread(target=pop, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_stalled_streams_and_waiting_pops_leave_other_clients_served(tmp_path):
    # One client's 100 stalled streams hold some 2.6 MB each in the broker's memory budget (a
    # response twice), and a step reserves up to 12 MiB before it runs: past the default share
    # of 256 MiB when a few steps run at once. The budget itself is the subject of
    # tests/broker_sim/core/test_memory_budget.py.
    roomy = ClientLimits(memory_budget_bytes=2 << 30, memory_budget_per_client_bytes=1 << 30)
    with running(tmp_path, stream_write_timeout_s=STALLED_DEADLINE_S, limits=roomy) as (broker, client):
        write_big_topic(client)
        client.create("quiet", 1)
        with stalled_streams(broker.endpoint, 100) as streams:
            # Each stream's response is on its way, held by flow control: the broker waits for them all.
            wait_until(lambda: broker.core.counters.responses_waiting == 100, "100 responses waiting for their clients",
                       state=lambda: f"({broker.core.counters.responses_waiting} waiting, "
                               f"{sum(stream.done() for stream in streams)} streams ended"
                               f"{ended_how(streams)})")
            pops = waiting_pops(broker.endpoint, broker.pop_config.max_waiting_pops)
            most = broker.pop_config.max_waiting_pops
            wait_until(lambda: broker.core.pop_service._waiting == most, "every pop waiting")

            client.create("live", 2)
            for i in range(20):
                answer = client.send_single("live", i % 2, b"live-%d" % i)
                assert answer.base_offset == i // 2
                assert "live" in [t.name for t in client.admin.ListTopics(pb.ListTopicsRequest(),
                                                                          timeout=CALL_TIMEOUT_S).topics]
            client.wait_readable("live", 0, 10)
            client.wait_readable("live", 1, 10)
            reads = client.read([("live", 0, 0, 0), ("live", 1, 0, 0)])
            assert [bytes(r.body) for r in reads[0].records] == [b"live-%d" % i for i in range(0, 20, 2)]
            assert [bytes(r.body) for r in reads[1].records] == [b"live-%d" % i for i in range(1, 20, 2)]
            assert broker.core.counters.responses_waiting == 100  # still stalled: nothing was waited out

            # A stalled client that reads at last gets everything.
            responses = list(streams[0])
            assert responses[-1].done and responses[-1].next_offset == BIG_MESSAGES
        broker.core.pop_service.stop_waiting()
        for thread in pops:
            thread.join(WAIT_S)
            assert not thread.is_alive()


def test_a_stalled_stream_is_ended_after_the_write_timeout(tmp_path):
    with running(tmp_path, stream_write_timeout_s=1.0) as (broker, client):
        write_big_topic(client)
        with stalled_streams(broker.endpoint, 5) as streams:
            wait_until(lambda: broker.core.counters.responses_waiting == 5, "5 responses waiting for their clients")
            wait_until(lambda: broker.core.counters.responses_waiting == 0, "the stalled streams ended by the broker")
            # Their reads are over (counted as the reads let go of the store), with nothing left in the store.
            wait_until(lambda: broker.core.counters.messages_read == 5 * BIG_MESSAGES, "the ended reads counted")
            for stream in streams:
                received = []
                with pytest.raises(grpc.RpcError) as failure:
                    for response in stream:  # what was on its way still arrives, then the status
                        received.append(response)
                assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                assert ("rmq-reason", "STREAM_STALLED") in failure.value.trailing_metadata()
                assert "took no response of this stream for 1 s" in failure.value.details()
                assert sum(r.record_count for r in received) <= 1
        # The broker serves on, and stops cleanly.
        client.create("after", 1)
        assert client.send_single("after", 0, b"x").base_offset == 0
    assert not StorePaths(tmp_path / "data").abort.exists()


def test_stop_ends_stalled_streams(tmp_path):
    broker = Broker(tmp_path / "data", "127.0.0.1", 0, CONFIG)
    broker.start()
    client = Client(broker.endpoint)
    try:
        write_big_topic(client)
        with stalled_streams(broker.endpoint, 10) as streams:
            wait_until(lambda: broker.core.counters.responses_waiting == 10, "10 responses waiting for their clients")
            broker.stop(grace=0.5)
            assert broker.wait(0)
            with pytest.raises(grpc.RpcError):
                for _ in streams[0]:
                    pass
    finally:
        client.close()
        broker.stop()
    assert not StorePaths(tmp_path / "data").abort.exists()


def test_waiting_pops_may_not_take_every_rpc_thread(tmp_path):
    with pytest.raises(ValueError, match="max_waiting_pops=4 would let long-polling pops hold all 4 RPC threads"):
        Broker(tmp_path / "data", max_workers=4, pop_config=PopConfig(max_waiting_pops=4))
