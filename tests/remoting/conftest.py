"""Fixtures of the remoting tests: `target` runs a scenario once against the real RocketMQ and
once against broker_sim's remoting door (`-k broker_sim` or `-k rocketmq` picks one)."""

import pytest

from remoting_targets import RocketMQTarget, broker_sim_target


@pytest.fixture(scope="session")
def broker_sim_remoting(tmp_path_factory):
    with broker_sim_target(tmp_path_factory.mktemp("remoting-broker")) as target:
        yield target


@pytest.fixture(params=["broker_sim", "rocketmq"])
def target(request):
    if request.param == "broker_sim":
        return request.getfixturevalue("broker_sim_remoting")
    return RocketMQTarget(request.getfixturevalue("rocketmq"))
