"""The brokers tests run against, in this process (``broker_sim.broker.Broker`` on 127.0.0.1 and
free ports): fixtures of every test, loaded by tests/conftest.py. A broker as a process of its
own is ``broker_sim.testing.broker_process``; the ACL and TLS brokers are support.acl's and
support.tls's; the remoting targets (broker_sim's remoting door as a process, a two-broker
cluster, the real RocketMQ) are tests/conftest.py's ``target``.

- ``new_broker(**options)``: a Broker with any of its options, stopped at the test's end: for a
  module whose broker has options of its own (limits, a pop clock, a store filled first), through
  a one-line fixture of the module.
- ``broker`` and ``client``: the broker most tests of our gRPC contract use, and a client of it.
- ``doors_broker``: one broker for a whole module, with every door (gRPC and remoting).
"""

from __future__ import annotations

import itertools

import pytest

from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.store import StoreConfig
from support.grpc_client import Client

# Small commitlog segments: reads and writes cross segment files.
SMALL_SEGMENTS = StoreConfig(segment_bytes=16 << 20, simple_cq_units_per_file=64, batch_cq_units_per_file=16)


@pytest.fixture
def new_broker(tmp_path):
    """Start a Broker on 127.0.0.1 and a free port, in a data directory of the test's own
    (``tmp_path / "data"``, then "data-1", ... for more), with ``Broker``'s keyword options
    (``store_config``, ``limits``, ``remoting``, ``pop_config``, ``pop_now_ms``, ...); each is
    stopped at the end of the test (1 s grace)."""
    started = []
    names = itertools.chain(["data"], (f"data-{n}" for n in itertools.count(1)))

    def start(data_dir=None, **options) -> Broker:
        broker = Broker(data_dir or tmp_path / next(names), "127.0.0.1", 0, **options)
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop(grace=1.0)


@pytest.fixture
def broker(new_broker):
    """A Broker in this process, one per test: our gRPC contract (and RocketMQ 5's v2) on a free
    port, no remoting door, small commitlog segments (``SMALL_SEGMENTS``); it creates no topic on a
    first send (tests/broker_sim/core/test_auto_create_topics.py has that)."""
    return new_broker(store_config=SMALL_SEGMENTS, auto_create_topics=None)


@pytest.fixture
def client(broker):
    """A client of our gRPC contract (support.grpc_client.Client) on ``broker``."""
    client = Client(broker.endpoint)
    yield client
    client.close()


@pytest.fixture(scope="module")
def doors_broker(tmp_path_factory):
    """A Broker in this process, one per test module, with every door: our gRPC contract and
    RocketMQ 5's v2 on one port, RocketMQ's remoting protocol on another (``remoting_port``);
    broker_sim's defaults otherwise (a first send creates its topic)."""
    with Broker(tmp_path_factory.mktemp("broker"), "127.0.0.1", 0, remoting=RemotingOptions(port=0)) as started:
        yield started
