import itertools

import pytest

import broker_sim


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real broker in this process on 127.0.0.1, one per test module."""
    with broker_sim.embedded(tmp_path_factory.mktemp("broker")) as endpoint:
        yield endpoint


_names = itertools.count()


@pytest.fixture
def topic_name():
    """A fresh topic name for each test."""
    return f"st{next(_names)}"
