"""The fuzz tests' profile (support/budget.py) is loaded before any test module builds its settings,
and a watchdog ends a run that hangs, printing every thread's stack (a hang is a finding)."""

import faulthandler

import pytest

from support import budget  # loads the hypothesis profile

HANG_SECONDS = 6 * 3600 if budget.PROFILE == "long" else 600


@pytest.fixture(autouse=True)
def hang_watchdog():
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
