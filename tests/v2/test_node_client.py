"""RocketMQ's official Node.js gRPC client (npm rocketmq-client-nodejs, unchanged) against
broker_sim's v2 door and the real RocketMQ proxy: a Producer sends, a SimpleConsumer receives
and acks. Node and npm are needed: without them the test skips saying so."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "node"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocketmq-batch" / "node"


@pytest.fixture(scope="session")
def node_client() -> Path:
    """node_modules with rocketmq-client-nodejs, installed once from npm into a cache outside git."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run rocketmq-client-nodejs: install Node.js 18+")
    manifest = (HERE / "package.json").read_bytes()
    target = CACHE / hashlib.sha256(manifest).hexdigest()[:16]
    if not (target / "node_modules" / "rocketmq-client-nodejs").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        (target / "package.json").write_bytes(manifest)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=target,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode:
            pytest.fail(f"npm install of rocketmq-client-nodejs failed:\n{done.stderr[-2000:]}")
    return target / "node_modules"


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
