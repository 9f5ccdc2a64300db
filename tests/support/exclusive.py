"""What the suite runs one at a time across its pytest-xdist workers: a lock file in the
directory the workers share (the session's base temp), held with flock, so that a worker that
dies lets go of it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def shared_dir(tmp_path_factory) -> Path:
    """The run's temp root: the base temp of every xdist worker is popen-gwN below it; without
    xdist it is the base temp itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def one_at_a_time(name: str, tmp_path_factory) -> Iterator[None]:
    """Wait until no other worker holds ``name``, hold it for the block."""
    with open(shared_dir(tmp_path_factory) / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
