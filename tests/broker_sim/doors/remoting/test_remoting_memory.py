"""The remoting door under hostile clients, over real sockets: unfinished frames count in the
broker's memory budget (a client past its share is disconnected), idle and half-sent
connections are closed after their timeouts, parked pulls are bounded and woken a batch at a
time, and refused connections are logged at a bounded rate. Each time another client goes on
being served."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading

from broker_sim.doors.hold import WAKE_BATCH, PullHold
from broker_sim.doors.remoting.server import Connection
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from test_remoting_limits import TIMEOUT_S, is_closed, pull_fields, served, start, wait_until

MiB = 1 << 20


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=TIMEOUT_S)


def send_part_of_a_frame(address: str, announced: int, sent: int) -> socket.socket:
    """A client announcing a frame of ``announced`` bytes and sending ``sent`` of them, no more."""
    sock = connect(address)
    try:
        sock.sendall(struct.pack(">I", announced) + b"\0" * (sent - 4))
    except OSError:  # the broker closed the connection while it was sent
        pass
    return sock


def test_unfinished_frames_past_a_clients_share_of_the_memory_budget_close_its_connection(tmp_path, stopped, caplog):
    broker = start(tmp_path, memory_budget_bytes=8 * MiB, memory_budget_per_client_bytes=5 * MiB)
    stopped.append(broker)
    broker.core.create_topic("orders", 1, "SimpleCQ")
    memory = broker.core.memory
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"):
        first = send_part_of_a_frame(broker.remoting.address, 15 * MiB, 3 * MiB)
        wait_until(lambda: memory.clients.get("127.0.0.1", 0) >= 3 * MiB - 4, "the first frame's bytes are held")
        second = send_part_of_a_frame(broker.remoting.address, 15 * MiB, 3 * MiB)  # 6 MiB: past the share
        wait_until(lambda: is_closed(second), "the connection past the client's share is closed")
    assert "--memory-budget-per-client-bytes" in caplog.text and "its unfinished request of" in caplog.text
    assert memory.held <= 5 * MiB and not is_closed(first)
    assert served(broker.remoting.address, "orders")  # a connection sending whole requests is served
    first.close()
    wait_until(lambda: memory.held == 0, "the closed connection's bytes are free")
    second.close()


def test_idle_and_half_sent_connections_are_closed_after_their_timeouts(tmp_path, stopped, caplog):
    broker = start(tmp_path, idle_connection_timeout_s=1.0, unfinished_frame_timeout_s=1.0)
    stopped.append(broker)
    broker.core.create_topic("orders", 1, "SimpleCQ")
    address = broker.remoting.address
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"), \
            RemotingConnection(address) as waiting:
        # a pull waiting for messages (in flight) keeps its connection open past the idle timeout
        parked = waiting.request(RequestCode.PULL_MESSAGE, pull_fields("orders", suspend_ms=3000))
        idle = connect(address)
        half_header = connect(address)
        half_header.sendall(b"\0\0")  # two bytes of a frame's length
        half_frame = send_part_of_a_frame(address, 1024, 100)
        for sock in (idle, half_header, half_frame):
            assert wait_until(lambda s=sock: is_closed(s), "the connection is closed", timeout_s=15)
            sock.close()
        assert parked.result(TIMEOUT_S).code == ResponseCode.PULL_NOT_FOUND  # answered at its suspend timeout
    assert "--idle-connection-timeout-s" in caplog.text and "--unfinished-frame-timeout-s" in caplog.text
    assert served(address, "orders")


def test_a_sweep_that_fails_is_logged_and_the_next_one_closes_the_idle_connection(tmp_path, stopped, caplog,
                                                                                   monkeypatch):
    """The sweep is a ServiceTask: a fault in one pass (here injected, once) is logged, and the
    sweeps go on (a callback that rescheduled itself stopped for good)."""
    broker = start(tmp_path, idle_connection_timeout_s=1.0)
    stopped.append(broker)
    faults = []
    timed_out = Connection.timed_out

    def fails_once(connection, now):
        if not faults:
            faults.append(now)
            raise RuntimeError("an injected fault in the sweep")
        return timed_out(connection, now)

    monkeypatch.setattr(Connection, "timed_out", fails_once)
    with caplog.at_level(logging.ERROR, logger="broker_sim.common.service_thread"):
        idle = connect(broker.remoting.address)
        wait_until(lambda: faults, "a sweep ran into the fault")
        assert wait_until(lambda: is_closed(idle), "the idle connection is closed", timeout_s=15)
        idle.close()
    assert "closing the connections past their timeouts failed" in caplog.text
    assert "an injected fault in the sweep" in caplog.text


def test_parked_pulls_past_the_limit_are_answered_busy_at_once(tmp_path, stopped):
    broker = start(tmp_path, max_parked_pulls=3)
    stopped.append(broker)
    broker.core.create_topic("orders", 1, "SimpleCQ")
    with RemotingConnection(broker.remoting.address) as conn:
        parked = [conn.request(RequestCode.PULL_MESSAGE, pull_fields("orders", suspend_ms=15_000)) for _ in range(3)]
        wait_until(lambda: broker.remoting.hold.parked == 3, "three pulls wait")
        busy = conn.invoke(RequestCode.PULL_MESSAGE, pull_fields("orders", suspend_ms=15_000))
        assert busy.code == ResponseCode.SYSTEM_BUSY and "--max-parked-pulls" in busy.remark
        assert not any(pull.done() for pull in parked)
        assert served(broker.remoting.address, "orders")  # a message arrives: the parked pulls answer
        assert all(pull.result(TIMEOUT_S).code == ResponseCode.SUCCESS for pull in parked)


def test_an_arrival_wakes_the_parked_pulls_a_batch_per_turn_of_the_loop():
    async def scenario():
        hold = PullHold(asyncio.get_running_loop(), max_parked=10_000)
        waits = [asyncio.ensure_future(hold.arrival(30.0)) for _ in range(3 * WAKE_BATCH)]
        await asyncio.sleep(0)  # each waits
        assert hold.parked == 3 * WAKE_BATCH
        threading.Thread(target=hold.arrived).start()  # the dispatcher's thread
        woken = []
        while len(woken) < 4 and not all(w.done() for w in waits):
            await asyncio.sleep(0)
            woken.append(sum(w.done() for w in waits))
        await asyncio.gather(*waits)
        return woken

    woken = asyncio.run(scenario())
    assert all(b - a <= WAKE_BATCH for a, b in zip([0, *woken], woken)), woken


def test_refused_connections_are_logged_at_a_bounded_rate(tmp_path, stopped, caplog):
    broker = start(tmp_path, max_connections_per_ip=1)
    stopped.append(broker)
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"), \
            RemotingConnection(broker.remoting.address) as holder:
        holder.invoke(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        refused = []
        for _ in range(200):
            refused.append(connect(broker.remoting.address))
        for sock in refused:
            assert wait_until(lambda s=sock: is_closed(s), "the refused connection is closed")
            sock.close()
    lines = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) <= 10, f"{len(lines)} lines for 200 refused connections"


def test_an_arrival_wakes_only_the_pulls_of_queues_that_end_past_their_offset():
    ends = {("orders", 0): 5, ("quiet", 0): 0}

    async def scenario():
        hold = PullHold(asyncio.get_running_loop(), max_parked=10_000, end_offset=lambda t, q: ends[(t, q)])
        quiet = [asyncio.ensure_future(hold.arrival(30.0, ("quiet", 0, 0))) for _ in range(1000)]
        orders = asyncio.ensure_future(hold.arrival(30.0, ("orders", 0, 5)))
        await asyncio.sleep(0)
        ends[("orders", 0)] = 6  # a message arrives on orders
        hold.arrived()
        await asyncio.wait_for(orders, TIMEOUT_S)
        woken = sum(w.done() for w in quiet)
        for waiter in quiet:
            waiter.cancel()
        return woken, hold.parked

    assert asyncio.run(scenario()) == (0, 1000)  # the 1,000 pulls of the quiet queue slept on
