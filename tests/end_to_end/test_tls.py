"""TLS on the broker's ports, with our SDK and rmq-admin: the gRPC door and the remoting door
over TLS (round trips), mutual TLS (a client certificate accepted, none or a stranger's
refused), and each mismatch failing with a sentence that says what to change: a plain client
on a TLS port, a TLS client on a plain port, a broker certificate the client does not trust."""

from __future__ import annotations

import dataclasses
import json
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker_sim.acl import Guard
from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.doors.tls import TlsOptions
from rmq_spark import (
    Admin,
    AuthenticationError,
    BrokerUnavailableError,
    ConfigError,
    Credentials,
    OffsetRange,
    PermissionDeniedError,
    RangeReader,
    RmqError,
    TransportConfig,
)
from rmq_spark import cli as admin_cli
from rmq_spark.client.tls import ssl_context
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.tls import send


def send_and_read(address: dict, config: TransportConfig, count: int = 20) -> list[bytes]:
    """Create a topic, send ``count`` messages and read them back, all over ``config``."""
    topic, queue = send(address, config, count)
    with RangeReader(**address, transport=config) as reader:
        table = reader.read_table([OffsetRange(topic, 0, 0, queue.max_offset, queue.broker)])
    return table.column("body").to_pylist()


def grpc_door(broker) -> dict:
    return {"endpoint": broker.endpoint}


def remoting_door(broker) -> dict:
    return {"name_server": broker.remoting.address}


DOORS = [grpc_door, remoting_door]


@pytest.mark.parametrize("door", DOORS)
def test_messages_go_and_come_back_over_tls(tls_broker, tls_config, door):
    assert send_and_read(door(tls_broker), tls_config) == [f"m-{i}".encode() for i in range(20)]


@pytest.mark.parametrize("door", DOORS)
def test_mutual_tls_takes_a_client_certificate_of_its_ca(mtls_broker, tls_config, certs, door):
    config = TransportConfig(**{**tls_config.__dict__, "tls_cert_file": str(certs.client.cert),
                                "tls_key_file": str(certs.client.key)})
    assert len(send_and_read(door(mtls_broker), config, count=3)) == 3


@pytest.mark.parametrize("door", DOORS)
def test_mutual_tls_refuses_no_certificate_and_a_strangers(mtls_broker, tls_config, certs, door):
    with pytest.raises(ConfigError, match="requires a client certificate.*tls_cert_file"):
        Admin(**door(mtls_broker), transport=tls_config).list_topics()
    stranger = TransportConfig(**{**tls_config.__dict__, "tls_cert_file": str(certs.stranger_client.cert),
                                  "tls_key_file": str(certs.stranger_client.key)})
    with pytest.raises(ConfigError, match="refuses this client's certificate"):
        Admin(**door(mtls_broker), transport=stranger).list_topics()


@pytest.mark.parametrize("door", DOORS)
def test_a_plain_client_on_a_tls_port_is_told_to_use_tls(tls_broker, door):
    """gRPC: the SDK finds out why its calls fail; remoting: the broker answers why."""
    with pytest.raises(RmqError, match=r"TLS only: connect with TLS \(.*TransportConfig\(tls=True\)"):
        Admin(**door(tls_broker), transport=TransportConfig(timeout_ms=5_000, retries=1)).list_topics()


def test_a_plain_remoting_request_on_the_tls_port_is_answered_with_why(tls_broker):
    """What RocketMQ's own clients see without TLS: their first request's answer says it."""
    with RemotingConnection(tls_broker.remoting.address) as connection:
        answer = connection.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "any"}, timeout_s=5)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "TLS only" in answer.remark and "-Dtls.enable=true" in answer.remark


@pytest.mark.parametrize("door", DOORS)
def test_a_tls_client_on_a_plain_port_is_told_it_is_plain(plain_broker, tls_config, door):
    with pytest.raises(ConfigError, match="does not serve TLS: connect without TLS, or start the broker with "
                                          "--tls-cert and --tls-key"):
        Admin(**door(plain_broker), transport=tls_config).list_topics()


@pytest.mark.parametrize("door", DOORS)
def test_a_broker_certificate_of_an_unknown_ca_is_not_trusted(tls_broker, door):
    config = TransportConfig(tls=True, timeout_ms=5_000, retries=1)  # the system's CAs only
    with pytest.raises(ConfigError, match="is not trusted .*give tls_ca_file the CA that signed it"):
        Admin(**door(tls_broker), transport=config).list_topics()


def test_tls_settings_are_checked_before_connecting(certs, tmp_path):
    with pytest.raises(ConfigError, match="set tls=True too"):
        TransportConfig(tls_ca_file=str(certs.ca))
    with pytest.raises(ConfigError, match="both tls_cert_file and tls_key_file"):
        TransportConfig(tls=True, tls_cert_file=str(certs.client.cert))
    (tmp_path / "not.pem").write_text("hello")
    for field, path, expected in [("tls_ca_file", tmp_path / "missing.pem", "cannot read it"),
                                  ("tls_ca_file", tmp_path / "not.pem", "no PEM certificate")]:
        with pytest.raises(ConfigError, match=f"{field} .*{expected}"):
            Admin("127.0.0.1:1", TransportConfig(tls=True, **{field: str(path)}))


def test_rmq_admin_over_tls(mtls_broker, certs, capsys):
    tls = ["--tls", "--tls-ca", str(certs.ca), "--tls-cert", str(certs.client.cert), "--tls-key",
           str(certs.client.key)]
    assert admin_cli.main(["--endpoint", mtls_broker.endpoint, *tls, "topic", "create", "cli-tls", "--queues",
                           "2"]) == 0
    capsys.readouterr()
    assert admin_cli.main(["--name-server", mtls_broker.remoting.address, *tls, "topic", "list", "--json"]) == 0
    assert "cli-tls" in {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert admin_cli.main(["--endpoint", mtls_broker.endpoint, "topic", "list"]) == 1
    assert "serves TLS only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        admin_cli.main(["--endpoint", mtls_broker.endpoint, "--tls-ca", str(certs.ca), "topic", "list"])
    assert exited.value.code == 2 and "give --tls too" in capsys.readouterr().err


def test_the_plain_remoting_port_says_why_it_closes_a_tls_connection(plain_broker, tls_config, caplog):
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"), pytest.raises(ConfigError):
        Admin(name_server=plain_broker.remoting.address, transport=tls_config).list_topics()
    assert "it opened with a TLS handshake, and this port serves plain remoting: connect without TLS, or start " \
           "the broker with --tls-cert and --tls-key" in caplog.text


def test_one_tls_remoting_connection_carries_many_threads_requests(tls_broker, tls_config):
    """Requests from 8 threads at once, answers read by the connection's own thread: TLS state is
    shared by the two directions (tls_stream.py), and every answer comes back to its request."""
    with RemotingConnection(tls_broker.remoting.address, tls=ssl_context(tls_config)) as connection:
        def ask(i: int) -> bool:
            answer = connection.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"none-{i}"}, timeout_s=10)
            return answer.code == ResponseCode.TOPIC_NOT_EXIST and f"none-{i}" in answer.remark

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(ask, range(2000)))


@pytest.mark.parametrize("door", DOORS)
def test_tls_and_acls_together(tmp_path, certs, tls_config, door):
    """A broker with both: the account's signature travels inside TLS on either port."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    tls = TlsOptions.load(certs.server.cert, certs.server.key)
    with Broker(tmp_path / "data", "127.0.0.1", 0, tls=tls, acl=Guard(acl_file), remoting=RemotingOptions(0)) as b:
        signed = dataclasses.replace(tls_config, credentials=Credentials("ops", "ops-secret"))
        assert send_and_read(door(b), signed) == [f"m-{i}".encode() for i in range(20)]
        with pytest.raises(AuthenticationError if door is grpc_door else PermissionDeniedError):
            send_and_read(door(b), tls_config)


def test_a_plain_client_that_spoke_with_a_broker_before_does_not_probe_it_with_tls(tmp_path, caplog):
    """Issue 44: after a broker restart, the SDK's check of whether TLS failed its connection
    (tls.py) handshook with the plain broker, which logged a TLS client at its plain port."""
    from peers.process import free_port

    port = free_port()
    admin = Admin(name_server=f"127.0.0.1:{port}", transport=TransportConfig(retries=0, timeout_ms=3_000))
    with Broker(tmp_path / "data", "127.0.0.1", 0, remoting=RemotingOptions(port)):
        admin.list_topics()  # it answered: a plain broker for a plain client
    with caplog.at_level(logging.WARNING, logger="broker_sim.doors.remoting.server"), \
            Broker(tmp_path / "data", "127.0.0.1", 0, remoting=RemotingOptions(port)):
        try:
            admin.list_topics()  # on the connection the restart broke, or a new one
        except BrokerUnavailableError:
            pass
        admin.list_topics()
    admin.close()
    assert "TLS handshake" not in caplog.text
