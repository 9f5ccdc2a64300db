"""RocketMQ's official clients, unchanged, over TLS to broker_sim: the Java 5.x gRPC client
(enableSsl) and the Java remoting clients (-Dtls.enable=true; with mutual TLS, checking the
broker's certificate against the test CA) and the Python 5.x gRPC client (tls_enable)."""

from __future__ import annotations

import itertools

import pytest

from peers import rocketmq as peer
from rmq_spark import Admin

_names = itertools.count()


def new_topic(broker, tls_config, queue_type: str = "SimpleCQ") -> str:
    topic = f"tls-official-{next(_names)}"
    Admin(broker.endpoint, tls_config).create_topic(topic, 2, queue_type)
    return topic


def test_java_grpc_client_over_tls(tls_broker, tls_config, require_java_peers):
    topic = new_topic(tls_broker, tls_config)
    assert peer.grpc_produce(tls_broker.endpoint, topic, 20, body_bytes=128, tls=True)["sent"] == 20
    got = peer.grpc_consume(tls_broker.endpoint, topic, "g-tls", expect=20, timeout_s=60, tls=True)
    assert (got["received"], got["digest"]) == (20, peer.digest(peer.body(i, 128) for i in range(20)))


def test_java_remoting_clients_over_tls(tls_broker, tls_config, require_java_peers):
    topic = new_topic(tls_broker, tls_config, "BatchCQ")
    namesrv, tls = tls_broker.remoting.address, peer.remoting_tls()
    assert peer.java_produce(namesrv, topic, 50, threads=2, body_bytes=100, jvm=tls)["sent"] == 50
    got = peer.java_pull(namesrv, topic, expect=50, timeout_s=60, jvm=tls)
    assert (got["received"], got["digest"]) == (50, peer.digest(peer.body(i, 100) for i in range(50)))


def test_java_remoting_clients_over_mutual_tls(mtls_broker, tls_config, certs, require_java_peers):
    client = tls_config.__class__(**{**tls_config.__dict__, "tls_cert_file": str(certs.client.cert),
                                     "tls_key_file": str(certs.client.key)})
    topic = new_topic(mtls_broker, client, "BatchCQ")
    tls = peer.remoting_tls(str(certs.ca), str(certs.client.cert), str(certs.client.key))
    assert peer.java_produce(mtls_broker.remoting.address, topic, 10, threads=1, jvm=tls)["sent"] == 10
    assert peer.java_pull(mtls_broker.remoting.address, topic, expect=10, timeout_s=60, jvm=tls)["received"] == 10


def test_a_plain_mqadmin_is_told_to_use_tls(tls_broker, require_java_peers):
    """mqadmin shows the broker's answer (a Java producer reports only "No route info of this topic")."""
    (output,) = peer.mqadmin(tls_broker.remoting.address, ("topicList",))
    assert "TLS only: connect with TLS (RocketMQ's Java clients: -Dtls.enable=true" in output, output


def test_python_grpc_client_over_tls(tls_broker, tls_config, certs):
    from peers import python_client

    try:
        python_client.interpreter()
    except RuntimeError as failed:
        pytest.fail(str(failed))
    topic = new_topic(tls_broker, tls_config)
    trust = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)}  # the client trusts gRPC's roots only
    sent = python_client.run("send", tls_broker.endpoint, topic, "--count", "5", "--tls", env=trust)
    got = python_client.run("receive", tls_broker.endpoint, topic, "--group", "g-tls-py", "--count", "5", "--tls",
                            env=trust)
    assert sorted(m["id"] for m in got["messages"]) == sorted(sent["ids"]) and got["acked"] == 5
