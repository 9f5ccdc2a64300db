"""The Spark connector's tests: their broker has broker_sim's defaults (tests/rmq_spark/conftest.py
has the fresh topic names)."""

import pytest

import broker_sim


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real broker in this process on 127.0.0.1, one per test module, with broker_sim's defaults
    (a first send creates its topic)."""
    with broker_sim.embedded(tmp_path_factory.mktemp("broker")) as endpoint:
        yield endpoint
