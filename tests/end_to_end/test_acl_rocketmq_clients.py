"""RocketMQ's own clients with credentials against a broker with ACLs, unchanged: Apache's C++ client
(PyPI rocketmq, set_session_credentials: the remoting signature) and the official Python 5.x
client (Credentials: the gRPC authorization header). Accepted with the right keys, refused with
wrong ones, and what they send is what the SDK reads."""

from __future__ import annotations

import uuid

import pytest

from peers import python_client
from rmq_spark import OffsetRange, RangeReader
from support.acl import config

cpp = pytest.importorskip("rocketmq.client", reason="the C++ client (PyPI rocketmq) is not installed")


def bodies(acl_broker, topic: str) -> list[bytes]:
    ranges = [OffsetRange(topic, q, 0, None) for q in range(4)]
    with RangeReader(acl_broker.endpoint, transport=config("reader")) as reader:
        return [body.as_py() for batch in reader.read(ranges) for body in batch.column("body")]


def cpp_producer(acl_broker, access_key: str, secret_key: str):
    producer = cpp.Producer(f"cpp-acl-{uuid.uuid4().hex[:6]}")
    producer.set_namesrv_addr(acl_broker.name_server)
    producer.set_session_credentials(access_key, secret_key, "ALIYUN")
    producer.set_timeout(3000)
    producer.start()
    return producer


def cpp_message(body: str):
    message = cpp.Message("orders")
    message.set_tags("TagA")
    message.set_body(body)
    return message


def test_cpp_client_with_session_credentials(acl_broker):
    body = f"cpp-{uuid.uuid4().hex[:6]}"
    producer = cpp_producer(acl_broker, "writer", "writer-secret")
    try:
        assert producer.send_sync(cpp_message(body)).status == cpp.SendStatus.OK
    finally:
        producer.shutdown()
    assert body.encode() in bodies(acl_broker, "orders")

    refused = f"cpp-refused-{uuid.uuid4().hex[:6]}"
    producer = cpp_producer(acl_broker, "writer", "wrong-secret")
    try:
        # The broker answers each attempt NO_PERMISSION; the C++ client, its retries spent,
        # reports "No route info of this topic".
        with pytest.raises(Exception, match="orders"):
            producer.send_sync(cpp_message(refused))
    finally:
        producer.shutdown()
    assert refused.encode() not in bodies(acl_broker, "orders")


def test_official_python_client_with_credentials(acl_broker, run_official):
    prefix = f"py-{uuid.uuid4().hex[:6]}"
    sent = run_official("send", acl_broker.endpoint, "orders", "--count", "3", "--prefix", prefix,
                        "--access-key", "writer", "--secret-key", "writer-secret")
    assert len(sent["ids"]) == 3
    assert sorted(b for b in bodies(acl_broker, "orders") if b.startswith(prefix.encode())) == \
        [f"{prefix}-{i}".encode() for i in range(3)]

    # Refused, the client says it could not fetch the route; its log has the broker's status.
    log = python_client.interpreter().parent.parent / "logs" / "rocketmq_python" / "rocketmq_client.log"
    logged = log.stat().st_size if log.exists() else 0
    with pytest.raises(RuntimeError, match="failed to fetch topic:orders route"):
        run_official("send", acl_broker.endpoint, "orders", "--count", "1", "--prefix", "refused",
                     "--access-key", "writer", "--secret-key", "wrong-secret", timeout_s=90)
    with log.open("rb") as lines:
        lines.seek(logged)
        assert b"40100, the call's Signature does not match access key 'writer'" in lines.read()
    assert not [b for b in bodies(acl_broker, "orders") if b.startswith(b"refused")]
