"""ali-ons (npm), a JavaScript RocketMQ remoting client, against broker_sim's remoting door
and the real RocketMQ: a producer sends, a push consumer (clustering) receives every message.
Node and npm are needed: without them the test skips saying so."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from support.node import PROJECTS, node_modules

HERE = PROJECTS / "ali_ons"


@pytest.fixture(scope="session")
def ali_ons() -> Path:
    """node_modules with ali-ons, installed once from npm into a cache outside git."""
    return node_modules(HERE, "ali-ons",
                        "node and npm are needed to run ali-ons (a JavaScript RocketMQ client): install Node.js 18+")


def test_ali_ons_producer_and_consumer(target, ali_ons):
    topic = f"ali-ons-{target.kind}-{int(time.time() * 1000)}"
    group = f"{topic}-group"
    target.create_topic(topic, 4, batch_cq=False)
    target.create_group(group)
    done = subprocess.run(["node", str(HERE / "ali_ons.js"), target.namesrv, topic, group, "20"],
                          env={**os.environ, "NODE_PATH": str(ali_ons)}, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["sent"], result["received"]) == (20, 20), done.stderr[-2000:]
    assert result["bodies"] == sorted(f"node-{i}" for i in range(20))
