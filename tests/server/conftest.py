import pytest

from broker_sim.broker import Broker
from broker_sim.store import StoreConfig
from support.grpc_client import Client

# Small commitlog segments: reads and writes cross segment files.
CONFIG = StoreConfig(segment_bytes=16 << 20, simple_cq_units_per_file=64, batch_cq_units_per_file=16)


@pytest.fixture
def broker(tmp_path):
    """A real Broker on 127.0.0.1 and a free port, stopped at the end; it creates no topic on a
    first send (tests/sdk/test_auto_create_topics.py has that)."""
    broker = Broker(tmp_path / "data", "127.0.0.1", 0, CONFIG, auto_create_topics=None)
    broker.start()
    yield broker
    broker.stop(grace=1.0)


@pytest.fixture
def client(broker):
    client = Client(broker.endpoint)
    yield client
    client.close()


@pytest.fixture
def processes():
    """Broker processes a test starts (``BrokerProcess``), killed at its end whatever happened."""
    started = []
    yield started
    for process in started:
        process.kill()
