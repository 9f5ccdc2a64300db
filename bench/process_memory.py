"""Resident memory and CPU time of a process, for the benchmarks' tables (the broker runs in a
process of its own: broker_sim.testing.broker_process)."""

from __future__ import annotations

import os
from pathlib import Path


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def anon_rss_bytes(pid: int) -> int:
    """Resident anonymous memory of a process (RssAnon): its heap, without the pages of the files it
    maps (the store's commitlog and indexes, which the kernel may drop at will)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes(pid: int) -> int:
    """Peak resident memory of a process (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


__all__ = ["anon_rss_bytes", "rss_bytes", "peak_rss_bytes"]


def process_cpu_s(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has spent so far, every thread, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
