"""A peer's JVM process: started in its own process group with its output in a log file, waited
for with a bounded wait, and stopped (the whole group) whatever happens."""

from __future__ import annotations

import os
import random
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from broker_sim.testing import die_with_parent


def free_port(count: int = 1) -> int:
    """A loopback port whose ``count`` consecutive ports are all free (RocketMQ's broker also
    listens on its port - 2 and + 1), below the kernel's ephemeral range: a port taken from that
    range (bind to 0) was once taken again, port + 1, by a client's connection in the seconds the
    JVM took to start ("Address already in use" from RocketMQ's HA service)."""
    low = _ephemeral_low()
    for _ in range(200):
        base = random.randrange(max(1026, low - 12000), low - 8)
        if all(_is_free(p) for p in range(base - 2, base + count)):
            return base
    raise RuntimeError("no run of free loopback ports found")


def _ephemeral_low() -> int:
    """The first port the kernel hands out to connections (Linux's default 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# More JVM options for every peer JVM started here, after the peer's own (the test suite sets C1
# only: its JVMs live seconds to minutes and spent most of their CPU in C2's compiler; a
# benchmark leaves it unset, so that the peers it measures run as their users run them).
JVM_OPTIONS_VARIABLE = "RMQ_PEERS_JVM_OPTIONS"


def java_command(classpath: str, main: str, args: list[str], jvm: list[str] = ()) -> list[str]:
    return ["java", *jvm, *shlex.split(os.environ.get(JVM_OPTIONS_VARIABLE, "")), "-cp", classpath, main, *args]


class JavaProcess:
    """``java [jvm options] -cp classpath main args``, its output in ``log``."""

    def __init__(self, name: str, classpath: str, main: str, args: list[str], log: Path, *,
                 jvm: list[str] = (), env: dict | None = None, cwd: Path | None = None):
        self.name = name
        self.log = log
        command = java_command(classpath, main, args, jvm)
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
                                          preexec_fn=die_with_parent)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        """Poll ``ready`` until it is true; RuntimeError with the log's tail if the process ends
        or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode} before {what}:\n{self.log_tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: no {what} within {timeout_s:.0f} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the process group: for a peer whose data goes with it (a graceful stop of
        RocketMQ's processes took 3 to 11 s each, at the end of every test session)."""
        _signal_group(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def run_java(classpath: str, main: str, args: list[str], *, timeout_s: float = 120.0, jvm: list[str] = (),
             env: dict | None = None, stderr_too: bool = False) -> str:
    """Run a Java main to its end; its output (``stderr_too``: both streams as one, in order),
    or RuntimeError with it on failure. A run past ``timeout_s`` is asked for its threads'
    stacks (SIGQUIT) before it is killed, so that the error says where it hung."""
    command = java_command(classpath, main, args, jvm)
    stderr = subprocess.STDOUT if stderr_too else subprocess.PIPE
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                          text=True, env={**os.environ, **(env or {})}, start_new_session=True,
                          preexec_fn=die_with_parent) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGQUIT)  # the JVM prints every thread's stack on its stdout
            time.sleep(1)
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise RuntimeError(f"{main} {' '.join(args)} did not finish within {timeout_s:.0f} s; its output and "
                               f"threads:\n{((stderr or '') + stdout)[-12000:]}") from None
    if process.returncode:
        raise RuntimeError(f"{main} {' '.join(args)} failed ({process.returncode}):\n"
                           f"{(stdout + (stderr or ''))[-4000:]}")
    return stdout
