import pytest

import broker_sim


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real broker in this process on 127.0.0.1, one per test module. Its topics are created
    first, as the real RocketMQ peers run them (autoCreateTopicEnable=false): the topics a first
    send creates, the broker's default, are test_auto_create_topics.py's."""
    with broker_sim.embedded(tmp_path_factory.mktemp("broker"), auto_create_topics=None) as endpoint:
        yield endpoint


_names = iter(range(1_000_000))


@pytest.fixture
def topic_name():
    """A fresh topic name for each test."""
    return f"t{next(_names)}"

