"""Brokers serving TLS (gRPC and remoting ports), with certificates made for the test run."""

from __future__ import annotations

import pytest

from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.doors.tls import TlsOptions
from rmq_spark import TransportConfig
from tls_certs import Certs, make_certs


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
