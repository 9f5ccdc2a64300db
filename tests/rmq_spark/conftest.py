"""The SDK's tests (tests/rmq_spark/): a broker per test module, and fresh topic names."""

import itertools

import pytest

import broker_sim


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real broker in this process on 127.0.0.1, one per test module. Its topics are created
    first, as the real RocketMQ peers run them (autoCreateTopicEnable=false): the topics a first
    send creates, the broker's default, are tests/broker_sim/core/test_auto_create_topics.py's
    (tests/rmq_spark/spark/ has the default)."""
    with broker_sim.embedded(tmp_path_factory.mktemp("broker"), auto_create_topics=None) as endpoint:
        yield endpoint


_names = itertools.count()


@pytest.fixture
def topic_name():
    """A fresh topic name for each test."""
    return f"t{next(_names)}"
