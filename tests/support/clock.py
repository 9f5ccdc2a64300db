"""A clock that tests move instead of sleeping."""

from __future__ import annotations


class Clock:
    """``clock()`` is its time, in whatever unit the code under test counts (ms or s);
    ``clock.step(by)`` moves it, and so does setting ``clock.now``."""

    def __init__(self, now: float = 0):
        self.now = now

    def __call__(self):
        return self.now

    def step(self, by: float) -> None:
        self.now += by
