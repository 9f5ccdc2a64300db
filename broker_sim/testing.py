"""The broker in a process of its own, started through the `rmq-broker-sim` CLI as users start it:
for tests that kill it or fill its disk, and for benchmarks that give it the other core.

    with broker_process(data_dir, "--flush", "sync") as (endpoint, process):
        ...                                     # point clients at endpoint; process.kill() to crash it

`broker_sim.embedded()` runs the same broker in this process.
"""

from __future__ import annotations

import ctypes
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

__all__ = ["broker_process", "die_with_parent", "wait_listening"]

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None  # this process: libc in it


def die_with_parent() -> None:
    """``preexec_fn`` of a process a test or benchmark starts: the kernel kills it (SIGKILL)
    when the process that started it dies, even by SIGKILL or a timeout's SIGTERM, where no
    fixture's teardown runs; so that a cut-off run leaves no broker or JVM behind. Linux only
    (elsewhere nothing)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

LISTENING = re.compile(r"listening on (\S+):(\d+)")


@contextmanager
def broker_process(data_dir: Path, *extra_args: str, timeout_s: float = 60):
    """Run `rmq-broker-sim` on a free port (unless ``extra_args`` name one); yields (endpoint,
    process) and stops it with SIGTERM (SIGKILL after ``timeout_s``) unless it is gone already."""
    command = [sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir", str(data_dir), *extra_args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=die_with_parent)
    try:
        endpoint, _output = wait_listening(process, timeout_s)
        yield endpoint, process
    finally:
        stop_process(process, timeout_s)


def stop_process(process: subprocess.Popen, timeout_s: float) -> None:
    """Stop a broker process unless it is gone already: SIGTERM, SIGKILL after ``timeout_s``;
    its output pipe is closed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)
    if process.stdout is not None:
        process.stdout.close()


def wait_listening(process: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """Read a starting broker's output until it listens: (its endpoint, what it printed)."""
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the broker exited before listening:\n" + "".join(lines))
        lines.append(line)
        match = LISTENING.search(line)
        if match:
            return f"{match.group(1)}:{match.group(2)}", "".join(lines)
    raise RuntimeError(f"the broker did not listen within {timeout_s} s:\n" + "".join(lines))
