"""Waiting on a condition, never on a sleep."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(condition: Callable, what: str, timeout_s: float = 30.0, state: Callable[[], str] = lambda: "",
               poll_s: float = 0.02):
    """Poll ``condition`` until it is true and return its value; after ``timeout_s``,
    AssertionError saying ``what`` did not happen (and the ``state`` things were in)."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s {state()}".rstrip())
        time.sleep(poll_s)
    return result
