"""Node.js clients of RocketMQ (tests/end_to_end/node/: a package.json and a script each), their
npm packages installed once into a cache outside git."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECTS = Path(__file__).resolve().parents[1] / "end_to_end" / "node"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rocketmq-batch" / "node"


def node_modules(project: Path, package: str, missing_node: str) -> Path:
    """node_modules with the dependencies of ``project``'s package.json (``package`` among them),
    installed from npm once per manifest; skips saying ``missing_node`` without node and npm."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip(missing_node)
    manifest = (project / "package.json").read_bytes()
    target = CACHE / hashlib.sha256(manifest).hexdigest()[:16]
    if not (target / "node_modules" / package).is_dir():
        target.mkdir(parents=True, exist_ok=True)
        (target / "package.json").write_bytes(manifest)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=target,
                              capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode:
            pytest.fail(f"npm install of {package} failed:\n{done.stderr[-2000:]}")
    return target / "node_modules"
