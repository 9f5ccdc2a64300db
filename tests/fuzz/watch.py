"""Bounds a decoder must keep with a hostile input: time, and the process's peak memory."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from support.budget import DECODE_SECONDS

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@contextlib.contextmanager
def quick(seconds: float = DECODE_SECONDS):
    """The block must end within ``seconds`` (a decoder that loops long on a small input)."""
    start = time.monotonic()
    yield
    elapsed = time.monotonic() - start
    assert elapsed < seconds, f"took {elapsed:.2f} s on one input; the bound is {seconds} s"


def peak_rss_mib() -> int | None:
    """This process's peak resident memory since the last ``reset_peak_rss`` (None off Linux)."""
    return _status_mib("VmHWM:")


def rss_mib() -> int | None:
    """This process's resident memory now (None off Linux)."""
    return _status_mib("VmRSS:")


def _status_mib(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Start the peak over from the current resident memory (Linux 4.0+); whether it could."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def bounded_memory(mib: int):
    """The block may raise the process's peak resident memory by at most ``mib`` MiB."""
    measurable = reset_peak_rss()
    before = rss_mib()
    yield
    peak = peak_rss_mib()
    if measurable and before is not None and peak is not None:
        assert peak - before <= mib, f"peak memory grew by {peak - before} MiB; the bound is {mib} MiB"
