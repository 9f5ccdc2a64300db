"""How hard the fuzz tests and the exhaustive sweeps try: hypothesis profiles chosen by FUZZ_PROFILE.

``ci`` (the default) is small, derandomized (the same examples every run: a CI failure
reproduces locally) and keeps no example database, so that tests/fuzz runs in about a minute.
``quick`` (``make test-quick``) is ``ci`` with a tenth of its examples (at least 3): a small
deterministic sample of every fuzz test, run after each change. ``long`` (``make fuzz``)
draws FUZZ_SCALE (default 50) times as many random examples per test,
without a deadline; it saves failing examples in .hypothesis/ so that a rerun tries them first.
A sweep that damages every byte of a record (tests/broker_sim/store/test_recovery_tail.py) takes a
spread of those bytes over every field when quick, every byte otherwise.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

PROFILE = os.environ.get("FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "quick", "long"):
    raise ValueError(f"FUZZ_PROFILE={PROFILE!r}: use ci (the default), quick or long")
SCALE = int(os.environ.get("FUZZ_SCALE", "50")) if PROFILE == "long" else 1

# Hostile inputs are slow to generate on purpose (large, nested): that is not a test's fault.
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=_QUIET)
settings.register_profile("long", deadline=None, print_blob=True, suppress_health_check=_QUIET)
settings.load_profile("long" if PROFILE == "long" else "ci")
if PROFILE != "long":  # hypothesis caches the constants it finds in the code: not into the work tree
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "rmq-fuzz-hypothesis")

# Sweeps over every position (ci and long); quick takes their spread.
EXHAUSTIVE = PROFILE != "quick"

# A decoder given one hostile input answers within this (generous on a loaded 2-core machine).
DECODE_SECONDS = 2.0


def examples(ci_count: int) -> settings:
    """Settings for a test that tries ``ci_count`` examples in CI (SCALE times that when long,
    a tenth when quick)."""
    if PROFILE == "quick":
        return settings(max_examples=max(3, ci_count // 10))
    return settings(max_examples=ci_count * SCALE)
