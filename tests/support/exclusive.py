"""What the suite runs at most a few at a time across its pytest-xdist workers: lock files in
the directory the workers share (the session's base temp), held with flock, so that a worker
that dies lets go of its slot."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


def shared_dir(tmp_path_factory) -> Path:
    """The run's temp root: the base temp of every xdist worker is popen-gwN below it; without
    xdist it is the base temp itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def at_most(slots: int, name: str, tmp_path_factory, poll_s: float = 0.2) -> Iterator[None]:
    """Wait until fewer than ``slots`` workers hold ``name``, hold a slot of it for the block."""
    files = [open(shared_dir(tmp_path_factory) / f"{name}.{slot}.lock", "a") for slot in range(slots)]
    try:
        while True:
            for held in files:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(held, fcntl.LOCK_UN)
                return
            time.sleep(poll_s)
    finally:
        for file in files:
            file.close()
