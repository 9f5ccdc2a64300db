"""Spark's own standalone cluster on 127.0.0.1, as a cluster of separate processes: a master and
workers started with the ``spark-class`` launcher of PySpark's distribution (no download), and
applications given to it with ``spark-submit``, as users submit them. The workers run with an
environment of their own (their PATH's ``python`` is the cluster's), so what an application needs
on the executors reaches them the way Spark ships it, or not at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyspark

from broker_sim.testing import die_with_parent
from peers.process import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
QUICK_JVM = "-XX:TieredStopAtLevel=1"  # as tests/conftest.py: short-lived JVMs spend less in C2


def _base_env(path: str) -> dict:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "SPARK_HOME": str(SPARK_HOME),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


class StandaloneCluster:
    """A master and ``workers`` workers of one core and 1 GiB each; ``workers_path``: the PATH
    the workers and their executors run with."""

    def __init__(self, work: Path, workers_path: str, workers: int = 2):
        self.work, self.workers_path, self.workers = work, workers_path, workers
        self.processes: list[subprocess.Popen] = []
        self.master_url = ""

    def __enter__(self) -> "StandaloneCluster":
        env = {**_base_env(self.workers_path), "SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM}
        port, ui = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        try:
            self._start("master", env, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                        str(port), "--webui-port", str(ui))
            for n in range(self.workers):
                (self.work / f"worker-{n}").mkdir(parents=True)
                self._start(f"worker-{n}", env, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g", "--work-dir",
                            str(self.work / f"worker-{n}"), self.master_url)
            self._wait_for_workers(ui, timeout_s=120)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, name: str, env: dict, main_class: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "w")
        self.processes.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main_class, *args], env=env,
                                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True, preexec_fn=die_with_parent))
        log.close()

    def _wait_for_workers(self, ui: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if p.poll() is not None]
            assert not dead, f"a cluster process exited ({dead[0].args[1]}): see {self.work}/*.log"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as answer:
                    if sum(w["state"] == "ALIVE" for w in json.load(answer)["workers"]) == self.workers:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"{self.workers} workers did not register with the master in {timeout_s} s")

    def __exit__(self, *_exc) -> None:
        for process in self.processes:  # the workers first stop their executors (SIGTERM), then the rest goes
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)

    def submit(self, app: Path, *args: str, python: str, driver_python: str | None = None, options: tuple = (),
               cwd: Path, timeout_s: float = 300, wait: bool = True):
        """``spark-submit`` ``app`` to the cluster from ``cwd`` in client mode, with a PATH that
        has no Python of the project's (``python``: PYSPARK_PYTHON, ``driver_python``:
        PYSPARK_DRIVER_PYTHON). Returns what it did (``Finished``), or with ``wait=False`` the
        running process, in a process group of its own (``finish`` or ``kill`` it)."""
        env = {**_base_env("/usr/bin:/bin"), "PYSPARK_PYTHON": python, "SPARK_SUBMIT_OPTS": QUICK_JVM}
        if driver_python:
            env["PYSPARK_DRIVER_PYTHON"] = driver_python
        command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.master_url, "--driver-memory", "512m",
                   "--conf", "spark.executor.memory=512m", "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
                   "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2", *options,
                   str(app), *args]
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True, preexec_fn=die_with_parent)
        return finish(process, timeout_s) if wait else process

    def unpacked(self, alias: str) -> list[Path]:
        """Where the executors of the applications so far found an archive shipped as ``#alias``."""
        return sorted(self.work.glob(f"worker-*/app-*/*/{alias}"))


@dataclass
class Finished:
    returncode: int
    out: str
    err: str


def finish(process: subprocess.Popen, timeout_s: float) -> Finished:
    """Wait for a submitted application (SIGKILLed after ``timeout_s``, said in ``err``)."""
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        finished = kill(process)
        finished.err += f"\n(killed: still running after {timeout_s} s)"
        return finished
    return Finished(process.returncode, out, err)


def kill(process: subprocess.Popen) -> Finished:
    """SIGKILL a submitted application's whole process group (spark-submit's JVM, the driver's
    Python, its planners), and collect what it printed."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out, err = process.communicate(timeout=60)
    return Finished(process.returncode, out, err)
