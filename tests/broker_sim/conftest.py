"""The broker's tests as processes (tests/broker_sim/: the CLI, its start and stop)."""

import pytest


@pytest.fixture
def processes():
    """Broker processes a test starts (``BrokerProcess``), killed at its end whatever happened."""
    started = []
    yield started
    for process in started:
        process.kill()
