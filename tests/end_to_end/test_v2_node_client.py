"""RocketMQ's official Node.js gRPC client (npm rocketmq-client-nodejs, unchanged) against
broker_sim's v2 door and the real RocketMQ proxy: a Producer sends, a SimpleConsumer receives
and acks. Node and npm are needed: without them the test skips saying so."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from support.node import PROJECTS, node_modules

HERE = PROJECTS / "rocketmq_v2"


@pytest.fixture(scope="session")
def node_client() -> Path:
    """node_modules with rocketmq-client-nodejs, installed once from npm into a cache outside git."""
    return node_modules(HERE, "rocketmq-client-nodejs",
                        "node and npm are needed to run rocketmq-client-nodejs: install Node.js 18+")


def test_node_producer_and_simple_consumer(v2_target, node_client):
    topic = f"v2-node-{uuid.uuid4().hex[:8]}"
    v2_target.create_topic(topic, queues=2)
    group = v2_target.group()
    done = subprocess.run(["node", str(HERE / "node_client.js"), v2_target.endpoint, topic, group, "12"],
                          env={**os.environ, "NODE_PATH": str(node_client)}, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["sent"], result["received"]) == (12, 12), done.stderr[-2000:]
    assert result["bodies"] == sorted(f"node-{i}" for i in range(12))
