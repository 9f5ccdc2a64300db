"""RocketMQ's official Python client (PyPI rocketmq-python-client, gRPC v2), for tests and
benchmarks: installed once into a virtual environment of its own in the peers' cache (it shares
the package name `rocketmq` with the C++ client of the test extras), and run as
``python_client_scenarios.py`` in that environment, one process a scenario."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

from . import HERE, cache_root

PACKAGE = "rocketmq-python-client==5.1.2"
SCENARIOS = HERE / "python_client_scenarios.py"


def interpreter() -> Path:
    """The Python of the client's virtual environment, made (from PyPI) on first use."""
    home = cache_root() / PACKAGE.replace("==", "-")
    python = home / "bin" / "python"
    if not (home / ".complete").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PACKAGE],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"installing {PACKAGE} from PyPI failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        (home / ".complete").touch()
    return python


def run(scenario: str, endpoint: str, topic: str, *options: str, timeout_s: float = 120,
        env: dict | None = None) -> dict:
    """Run a scenario of python_client_scenarios.py; its JSON answer. The client writes its
    logs below HOME: the cache directory, not the user's. ``env``: more environment (with
    ``--tls``, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: the CA the client trusts)."""
    python = interpreter()
    # -I: the script's directory (peers/, with its own rocketmq.py) stays off sys.path
    done = subprocess.run([str(python), "-I", str(SCENARIOS), scenario, endpoint, topic, *options],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {}), "HOME": str(python.parent.parent)})
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"the official Python client's {scenario} failed (exit {done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])
