"""Brokers serving TLS (gRPC and remoting ports), with certificates made for the test run
(support.tls_certs): fixtures of every test, loaded by tests/conftest.py; and ``send``, which
fills a topic over a transport config."""

from __future__ import annotations

import itertools
import time

import pytest

from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.doors.tls import TlsOptions
from rmq_spark import Admin, Message, Producer, QueueOffsets, TransportConfig
from support.tls_certs import Certs, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _broker(directory, tls: TlsOptions | None):
    return Broker(directory, "127.0.0.1", 0, tls=tls, remoting=RemotingOptions(0))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, certs):
    """A broker whose gRPC and remoting ports serve TLS only (no client certificates asked)."""
    with _broker(tmp_path_factory.mktemp("tls-broker"), TlsOptions.load(certs.server.cert, certs.server.key)) as b:
        yield b


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, certs):
    """A broker that requires client certificates signed by the test CA (mutual TLS)."""
    tls = TlsOptions.load(certs.server.cert, certs.server.key, certs.ca)
    with _broker(tmp_path_factory.mktemp("mtls-broker"), tls) as b:
        yield b


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory):
    with _broker(tmp_path_factory.mktemp("plain-broker"), None) as b:
        yield b


@pytest.fixture
def tls_config(certs) -> TransportConfig:
    """TLS trusting the test CA; one retry, short deadlines: the failures here are not transient."""
    return TransportConfig(tls=True, tls_ca_file=str(certs.ca), timeout_ms=5_000, retries=1)


_names = itertools.count()


def send(address: dict, config: TransportConfig, count: int) -> tuple[str, QueueOffsets]:
    """Create a topic of one queue and send it ``count`` messages m-0, m-1, ... over ``config``;
    the topic and its queue, once they are indexed (a send returns before its messages are)."""
    topic = f"tls-{next(_names)}"
    with Admin(**address, transport=config) as admin:
        admin.create_topic(topic, 1)
        with Producer(**address, transport=config) as producer:
            producer.send_batch([Message(topic, f"m-{i}".encode()) for i in range(count)])
        deadline = time.monotonic() + 10
        while (queue := admin.offsets([topic])[topic][0]).max_offset < count:
            assert time.monotonic() < deadline, f"{topic}: {count} messages not indexed in 10 s"
            time.sleep(0.01)
    return topic, queue
