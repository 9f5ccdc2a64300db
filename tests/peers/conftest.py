"""The real peers, one of each per test session, skipped with one line when Java or Maven is
missing or `make peers` has not fetched them."""

import pytest

import peers


def require_peers(*groups: str) -> None:
    try:
        for group in groups:
            peers.jars(group)
    except peers.PeersMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def kafka():
    require_peers("kafka")
    from peers.kafka import KafkaBroker

    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def rocketmq():
    require_peers("rocketmq", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster() as cluster:
        yield cluster
