"""RocketMQ 5's gRPC protocol: ``v2_target`` (a fixture of every test, loaded by tests/conftest.py),
broker_sim's v2 door or the real RocketMQ proxy, for the door's tests
(tests/broker_sim/doors/rocketmq_v2/) and the official clients' (tests/end_to_end/)."""

from __future__ import annotations

import uuid

import pytest


class V2Target:
    """Where a v2 client connects (``endpoint``) and how topics are made there."""

    def __init__(self, kind: str, endpoint: str, remoting_target):
        self.kind = kind
        self.endpoint = endpoint
        self._target = remoting_target

    def create_topic(self, name: str, queues: int = 4, batch_cq: bool = False, message_type: str = "NORMAL") -> None:
        """``message_type``: what the real proxy's topic takes (it refuses other types; RocketMQ
        5.5.0's broker refuses MIXED topics); broker_sim's topics take every type."""
        if self.kind == "rocketmq":
            self._target.cluster.create_topic(name, queues, batch_cq, message_type=message_type)
        else:
            self._target.create_topic(name, queues, batch_cq)

    def group(self, prefix: str = "g", orderly: bool = False) -> str:
        """A new consumer group (the real proxy knows only groups created before their clients
        start; broker_sim needs none created); ``orderly``: a FIFO group."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self._target.create_group(name, orderly)
        return name


@pytest.fixture(params=["broker_sim", "rocketmq"])
def v2_target(request) -> V2Target:
    """broker_sim's v2 door (its gRPC port), or the real RocketMQ proxy (`-k rocketmq` picks it)."""
    if request.param == "rocketmq":
        from support.remoting_targets import RocketMQTarget

        cluster = request.getfixturevalue("rocketmq")
        return V2Target("rocketmq", cluster.proxy_endpoint, RocketMQTarget(cluster))
    target = request.getfixturevalue("broker_sim_remoting")
    return V2Target("broker_sim", target.endpoint, target)
