"""ali-ons (npm), a JavaScript RocketMQ remoting client, against broker_sim's remoting door
and the real RocketMQ: a producer sends, a push consumer (clustering) receives every message.
Node and npm are needed: without them the test skips saying so."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "node"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocketmq-batch" / "node"


@pytest.fixture(scope="session")
def ali_ons() -> Path:
    """node_modules with ali-ons, installed once from npm into a cache outside git."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run ali-ons (a JavaScript RocketMQ client): install Node.js 18+")
    manifest = (HERE / "package.json").read_bytes()
    target = CACHE / hashlib.sha256(manifest).hexdigest()[:16]
    if not (target / "node_modules" / "ali-ons").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        (target / "package.json").write_bytes(manifest)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=target,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode:
            pytest.fail(f"npm install of ali-ons failed:\n{done.stderr[-2000:]}")
    return target / "node_modules"


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
