"""A client at the wrong port of a broker is told the right one in one sentence: a gRPC client
at the remoting port (answered in HTTP/2, and logged), a remoting client at the gRPC port."""

import logging

import grpc
import pytest

from rmq_spark import Admin, BrokerUnavailableError, TransportConfig
from rmq_wire.remoting import HTTP2_PREFACE, http2_peer


def test_a_grpc_client_at_the_remoting_port_is_told_where_grpc_is(doors_broker, caplog):
    remoting_port = doors_broker.remoting.server.port
    with grpc.insecure_channel(f"127.0.0.1:{remoting_port}") as channel:
        call = channel.unary_unary("/rmq_spark.protocol.v1.Admin/ListTopics")
        with caplog.at_level(logging.WARNING), pytest.raises(grpc.RpcError) as refused:
            call(b"", timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.value.details() == (
        f"broker_sim: port {remoting_port} serves RocketMQ's remoting protocol (the option nameServer, RocketMQ's "
        f"remoting clients and mqadmin); gRPC (the option endpoint, RocketMQ 5's gRPC clients) is served on port "
        f"{doors_broker.port}")
    [line] = [r for r in caplog.records if "it was told: gRPC is served" in r.getMessage()]
    assert f"reached the remoting port {remoting_port}; it was told: gRPC is served on port {doors_broker.port}" in \
        line.getMessage()
    assert line.client.startswith("127.0.0.1:")  # the subject of the line (--log-format json: its field)


def test_a_remoting_client_at_the_grpc_port_is_told_what_to_give(doors_broker):
    with pytest.raises(BrokerUnavailableError, match=(
            f"127.0.0.1:{doors_broker.port} speaks HTTP/2 \\(gRPC\\), not RocketMQ's remoting protocol: "
            r"it is a gRPC port \(broker_sim's --port, for the option endpoint")):
        with Admin(name_server=doors_broker.endpoint, transport=TransportConfig(timeout_ms=5_000, retries=0)) as admin:
            admin.list_topics()


def test_http2_is_told_from_remoting_frames():
    assert http2_peer(HTTP2_PREFACE) is True
    assert http2_peer(bytes.fromhex("00001e040000000000")) is False  # a gRPC server's first SETTINGS
    remoting = (90).to_bytes(4, "big") + (1 << 24 | 30).to_bytes(4, "big") + b"\x00" * 30
    assert http2_peer(remoting) is None and http2_peer(b"PRI") is None
