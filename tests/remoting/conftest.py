"""Fixtures of the remoting tests: `target` runs a scenario against broker_sim's remoting door
(one broker), a two-broker broker_sim cluster, and the real RocketMQ (`-k "broker_sim]"`,
`-k broker_sim_cluster` or `-k rocketmq` picks one)."""

import pytest

from remoting_targets import RocketMQTarget, broker_sim_target, cluster_target


@pytest.fixture(scope="session")
def broker_sim_remoting(tmp_path_factory):
    with broker_sim_target(tmp_path_factory.mktemp("remoting-broker")) as target:
        yield target


@pytest.fixture(scope="session")
def broker_sim_cluster(tmp_path_factory):
    with cluster_target(tmp_path_factory.mktemp("remoting-cluster")) as target:
        yield target


@pytest.fixture(params=["broker_sim", "broker_sim_cluster", "rocketmq"])
def target(request):
    if request.param == "rocketmq":
        return RocketMQTarget(request.getfixturevalue("rocketmq"))
    return request.getfixturevalue("broker_sim_remoting" if request.param == "broker_sim" else request.param)
