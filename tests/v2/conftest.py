"""RocketMQ 5's gRPC protocol: the official clients against broker_sim's v2 door and against the
real RocketMQ proxy. The official Python client lives in a virtual environment of its own in a
cache outside git (installed once from PyPI): it shares the package name `rocketmq` with the
C++ client of the test extras."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

PYTHON_CLIENT = "rocketmq-python-client==5.1.2"
HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocketmq-batch" / "python-v5"


@pytest.fixture(scope="session")
def official_python() -> Path:
    """The interpreter of a virtual environment holding RocketMQ's official Python client."""
    home = CACHE / PYTHON_CLIENT.replace("==", "-")
    python = home / "bin" / "python"
    if not (home / ".complete").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               PYTHON_CLIENT], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        if done.returncode:
            pytest.fail(f"installing {PYTHON_CLIENT} from PyPI failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        (home / ".complete").touch()
    return python


class V2Target:
    """Where a v2 client connects (``endpoint``) and how topics are made there."""

    def __init__(self, kind: str, endpoint: str, remoting_target):
        self.kind = kind
        self.endpoint = endpoint
        self._target = remoting_target

    def create_topic(self, name: str, queues: int = 4, batch_cq: bool = False) -> None:
        if self.kind == "rocketmq":  # every message type on one topic, as broker_sim's topics take them
            self._target.cluster.create_topic(name, queues, batch_cq, message_type="MIXED")
        else:
            self._target.create_topic(name, queues, batch_cq)


@pytest.fixture(params=["broker_sim", "rocketmq"])
def v2_target(request) -> V2Target:
    """broker_sim's v2 door (its gRPC port), or the real RocketMQ proxy (`-k rocketmq` picks it)."""
    if request.param == "rocketmq":
        from remoting_targets import RocketMQTarget

        cluster = request.getfixturevalue("rocketmq")
        return V2Target("rocketmq", cluster.proxy_endpoint, RocketMQTarget(cluster))
    target = request.getfixturevalue("broker_sim_remoting")
    return V2Target("broker_sim", target.endpoint, target)


@pytest.fixture
def run_official(official_python):
    """Run a scenario of official_python.py; its JSON answer."""

    def run(scenario: str, endpoint: str, topic: str, *options: str, timeout_s: float = 120) -> dict:
        done = subprocess.run([str(official_python), str(HERE / "official_python.py"), scenario, endpoint, topic,
                               *options], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                              cwd=HERE, env={**os.environ, "HOME": str(CACHE)})
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        assert done.returncode == 0 and lines, f"{scenario} failed (exit {done.returncode}):\n" \
                                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return json.loads(lines[-1])

    return run

