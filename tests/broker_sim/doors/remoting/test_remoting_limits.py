"""The remoting door's per-client limits over real sockets: connections per address and in all
(refused with a remark, the room back once connections close), requests in flight per
connection (SYSTEM_BUSY at once), and a client that never reads its answers (disconnected,
with the broker's memory bounded). Each time another client goes on being served."""

from __future__ import annotations

import logging
import socket
import time

import grpc

from broker_sim.broker import Broker
from broker_sim.core.limits import ClientLimits
from broker_sim.doors.remoting import RemotingOptions
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from rmq_wire.remoting import RemotingCommand, RemotingConnection, RequestCode, ResponseCode, encode
from support.forwarder import Forwarder
from support.waits import wait_until

TIMEOUT_S = 10.0
MESSAGE_BYTES = 64 << 10
PULL_SUSPEND = 0x2


def start(tmp_path, **limits) -> Broker:
    broker = Broker(tmp_path / "data", remoting=RemotingOptions(port=0), limits=ClientLimits(**limits))
    broker.start()
    return broker


def fill_topic(broker: Broker, name: str, messages: int) -> None:
    """A one-queue topic of ``messages`` messages of MESSAGE_BYTES: a pull answers 256 KiB of them."""
    broker.core.create_topic(name, 1, "SimpleCQ")
    with grpc.insecure_channel(broker.endpoint) as channel:
        messaging = pb_grpc.MessagingStub(channel)
        for _ in range(messages):
            messaging.Send(pb.SendRequest(topic=name, single=pb.SingleMessage(body=b"x" * MESSAGE_BYTES)),
                           timeout=TIMEOUT_S)
    wait_until(lambda: broker.core.queue_offsets(broker.core.topic(name), 0)[1] == messages, "the topic is indexed")


def pull_fields(topic: str, offset: int = 0, suspend_ms: int = 0) -> dict:
    return {"consumerGroup": "g", "topic": topic, "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": PULL_SUSPEND if suspend_ms else 0, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
            "subVersion": 0, "expressionType": "TAG"}


def served(address: str, topic: str) -> bool:
    """A client on a connection of its own sends a message and pulls the topic."""
    with RemotingConnection(address) as conn:
        sent = conn.invoke(RequestCode.SEND_MESSAGE, {
            "producerGroup": "p", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": 0, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
            "properties": "WAIT\x01true\x02", "reconsumeTimes": 0}, b"still served")
        if sent.code != ResponseCode.SUCCESS:
            return False
        pulled = wait_until(lambda: (answer := conn.invoke(RequestCode.PULL_MESSAGE, pull_fields(topic))).code
                            == ResponseCode.SUCCESS and answer, "the message is indexed")  # pulls until then
    return bool(pulled.body)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


# --- connections ---------------------------------------------------------------------------

def refused_remark(address: str) -> str:
    """A connection past a limit: its first request's answer, then the broker closes it."""
    conn = RemotingConnection(address)
    try:
        answer = conn.invoke(RequestCode.GET_BROKER_RUNTIME_INFO, timeout_s=TIMEOUT_S)
        assert answer.code == ResponseCode.SYSTEM_BUSY
        wait_until(lambda: conn.closed, "the refused connection is closed")
        return answer.remark
    finally:
        conn.close()


def test_connections_past_the_limits_are_refused_and_the_room_comes_back(tmp_path, stopped):
    broker = start(tmp_path, max_connections_per_ip=2, max_connections=3)
    stopped.append(broker)
    fill_topic(broker, "orders", 1)
    address = broker.remoting.address
    held = [RemotingConnection(address) for _ in range(2)]
    forwarder = Forwarder(address)
    try:
        remark = refused_remark(address)
        assert "client 127.0.0.1 has 2 connections open" in remark and "--max-connections-per-ip" in remark

        # another address is served, on a connection of its own (the third of the broker's 3)
        other = RemotingConnection(forwarder.endpoint)
        assert other.invoke(RequestCode.PULL_MESSAGE, pull_fields("orders")).code == ResponseCode.SUCCESS
        remark = refused_remark(forwarder.endpoint)
        assert "this broker has 3 connections open from all clients" in remark and "--max-connections" in remark
        other.close()

        held.pop().close()  # the room comes back as connections close
        assert wait_until(lambda: served(address, "orders"), "a new connection is served")
        for conn in held:
            assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}).code \
                == ResponseCode.SUCCESS
    finally:
        for conn in held:
            conn.close()
        forwarder.close()


def test_a_connection_that_sends_nothing_is_closed_with_a_log_line(tmp_path, stopped, caplog, monkeypatch):
    monkeypatch.setattr("broker_sim.doors.remoting.server.REFUSAL_WAIT_S", 0.2)
    broker = start(tmp_path, max_connections_per_ip=1)
    stopped.append(broker)
    host, _, port = broker.remoting.address.rpartition(":")
    with RemotingConnection(broker.remoting.address), socket.create_connection((host, int(port))) as silent:
        silent.settimeout(TIMEOUT_S)
        with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"):
            assert silent.recv(1) == b""  # closed by the broker, no frame
        assert "without an answer: client 127.0.0.1 has 1 connections open" in caplog.text


def test_a_refused_connection_may_not_send_a_large_first_request(tmp_path, stopped):
    broker = start(tmp_path, max_connections_per_ip=1)
    stopped.append(broker)
    host, _, port = broker.remoting.address.rpartition(":")
    with RemotingConnection(broker.remoting.address), socket.create_connection((host, int(port))) as refused:
        refused.settimeout(TIMEOUT_S)
        refused.sendall((1 << 20).to_bytes(4, "big") + bytes(1 << 16))  # a frame of 1 MiB announced
        assert refused.recv(1) == b""  # closed before it is read whole


# --- requests in flight ----------------------------------------------------------------------

def test_requests_past_the_limit_of_a_connection_are_answered_busy_at_once(tmp_path, stopped):
    broker = start(tmp_path, max_requests_in_flight_per_connection=2)
    stopped.append(broker)
    broker.core.create_topic("idle", 1, "SimpleCQ")
    fill_topic(broker, "orders", 1)
    with RemotingConnection(broker.remoting.address) as conn:
        held = [conn.request(RequestCode.PULL_MESSAGE, pull_fields("idle", suspend_ms=8000)) for _ in range(2)]
        busy = conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0})
        assert busy.code == ResponseCode.SYSTEM_BUSY
        assert busy.remark.startswith("[TOO_MANY_REQUESTS] connection 127.0.0.1:")
        assert "has 2 requests being served" in busy.remark and "--max-requests-in-flight-per-connection" in busy.remark
        assert not any(pull.done() for pull in held)

        assert served(broker.remoting.address, "orders")  # another connection is served meanwhile

        assert served(broker.remoting.address, "idle")  # a message arrives: the held pulls answer
        assert all(pull.result(TIMEOUT_S).code == ResponseCode.SUCCESS for pull in held)
        assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}).code == ResponseCode.SUCCESS


# --- a client that never reads ---------------------------------------------------------------

def flood_without_reading(address: str, topic: str, pulls: int) -> socket.socket:
    """A client asking ``pulls`` pulls of 256 KiB and reading none of the answers."""
    host, _, port = address.rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.settimeout(2.0)
    frames = b"".join(encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque, 0,
                                             {k: str(v) for k, v in pull_fields(topic).items()}))
                      for opaque in range(1, pulls + 1))
    try:
        sock.sendall(frames)
    except OSError:  # the broker stopped reading (TimeoutError), or closed the connection
        pass
    return sock


def is_closed(sock: socket.socket) -> bool:
    """Whether the broker closed the socket (reading on drains what it had sent)."""
    sock.settimeout(0.2)
    try:
        for _ in range(64):
            if not sock.recv(1 << 20):
                return True
    except TimeoutError:
        return False
    except OSError:  # reset: the broker dropped the answers waiting
        return True
    return False


def test_a_client_that_never_reads_is_disconnected_past_the_bytes_a_connection_may_hold(tmp_path, stopped, caplog):
    broker = start(tmp_path, write_buffer_high_bytes=256 << 10, write_buffer_low_bytes=64 << 10,
                   max_buffered_bytes_per_connection=2 << 20, slow_reader_timeout_s=60)
    stopped.append(broker)
    fill_topic(broker, "big", 8)
    before = resident_bytes()
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"):
        sockets = [flood_without_reading(broker.remoting.address, "big", pulls=2000) for _ in range(4)]  # 2 GiB asked
        wait_until(lambda: caplog.text.count("--max-buffered-bytes-per-connection") == len(sockets),
                   "every flooding client is disconnected")
    grown = resident_bytes() - before
    assert grown < 128 << 20, f"the broker grew by {grown >> 20} MiB for clients that read nothing"
    assert "bytes of answers wait for it" in caplog.text
    assert served(broker.remoting.address, "big")
    for sock in sockets:
        assert wait_until(lambda s=sock: is_closed(s), "the socket is closed")
        sock.close()


def test_a_client_that_reads_nothing_for_the_timeout_is_disconnected(tmp_path, stopped, caplog):
    broker = start(tmp_path, write_buffer_high_bytes=256 << 10, write_buffer_low_bytes=64 << 10,
                   max_buffered_bytes_per_connection=256 << 20, slow_reader_timeout_s=1.0)
    stopped.append(broker)
    fill_topic(broker, "big", 8)
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"):
        sock = flood_without_reading(broker.remoting.address, "big", pulls=100)  # 25 MiB asked
        assert served(broker.remoting.address, "big")
        wait_until(lambda: "--slow-reader-timeout-s" in caplog.text, "the slow reader is disconnected")
    assert "its answers waited over 262144 bytes for 1 s" in caplog.text
    assert wait_until(lambda: is_closed(sock), "the socket is closed")
    sock.close()
