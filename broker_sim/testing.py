"""The broker in a process of its own, started through the `rmq-broker-sim` CLI as users start it:
for tests that kill it or fill its disk, and for benchmarks that give it the other core.

    with broker_process(data_dir, "--flush", "sync") as (endpoint, process):
        ...                                     # point clients at endpoint; process.kill() to crash it

`broker_sim.embedded()` runs the same broker in this process.
"""

from __future__ import annotations

import collections
import ctypes
import re
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

__all__ = ["broker_process", "die_with_parent", "output_of", "wait_listening"]

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
    process) and stops it with SIGTERM (SIGKILL after ``timeout_s``) unless it is gone already.
    Its output is read on as it comes (``output_of(process)``: its last lines): a broker whose
    log pipe nobody read would block on a full pipe at its next line, and stop only when killed."""
    command = [sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir", str(data_dir), *extra_args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=die_with_parent)
    try:
        endpoint, output = wait_listening(process, timeout_s)
        _drain(process, output)
        yield endpoint, process
    finally:
        stop_process(process, timeout_s)


def _drain(process: subprocess.Popen, printed: str, kept_lines: int = 2000) -> None:
    tail = process.output_tail = collections.deque(printed.splitlines(keepends=True), maxlen=kept_lines)
    process.output_drained = threading.Event()

    def read() -> None:
        try:
            for line in process.stdout:
                tail.append(line)
        except (OSError, ValueError):  # the pipe was closed
            pass
        process.output_drained.set()

    threading.Thread(target=read, name="broker-output", daemon=True).start()


def output_of(process: subprocess.Popen, timeout_s: float = 5.0) -> str:
    """The last lines a ``broker_process`` printed (all of them once it has exited)."""
    drained = getattr(process, "output_drained", None)
    if drained is None:
        return process.stdout.read() if process.stdout is not None else ""
    if process.poll() is not None:
        drained.wait(timeout_s)
    return "".join(process.output_tail)


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
