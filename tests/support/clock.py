"""A clock that tests move instead of sleeping; ``clock``, a fixture of every test (loaded by
tests/conftest.py), is one at a time of this era (``ERA_MS``)."""

from __future__ import annotations

import pytest

ERA_MS = 1_700_000_000_000  # where the ``clock`` fixture starts, in ms: a time of this era


class Clock:
    """``clock()`` is its time, in whatever unit the code under test counts (ms or s);
    ``clock.step(by)`` moves it, and so does setting ``clock.now``."""

    def __init__(self, now: float = 0):
        self.now = now

    def __call__(self):
        return self.now

    def step(self, by: float) -> None:
        self.now += by


@pytest.fixture
def clock() -> Clock:
    """A clock in ms at ``ERA_MS``, stepped by the test: what the broker's pop, schedule and
    transaction services, and the producer's batch ages, are given instead of the time."""
    return Clock(ERA_MS)
