"""The README's quickstart runs as written: its commands start a broker and make a topic, and its
PySpark code writes a stream into the topic and reads it back (on a free port and in a scratch
directory instead of 10911 and /tmp, with the last query bounded)."""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import installs
from support.paths import REPO_ROOT

ROOT = REPO_ROOT


def quickstart() -> tuple[list[str], str]:
    """The quickstart's shell commands (without the install line) and its Python code."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in shell.splitlines()]
    return [c for c in commands if c and not c.startswith("pip ")], python


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_quickstart_runs_as_written(tmp_path, spark_in_a_process):
    run_quickstart(tmp_path, Path(sys.executable))


@pytest.mark.xdist_group("package")
def test_the_quickstart_runs_from_the_wheel_in_a_bare_venv(tmp_path, built_package, spark_in_a_process):
    """The wheel `python -m build` makes, installed (not editable) with the extras the README's
    install line names into a venv of nothing else, registers the format and runs the quickstart."""
    wheel, sdist = built_package
    assert sdist.name.startswith("rocketmq_batch_spark-") and wheel.name.endswith("-py3-none-any.whl")
    install = next(line for line in (ROOT / "README.md").read_text().split("## Quickstart", 1)[1].splitlines()
                   if line.startswith("pip install "))
    extras = re.search(r"\[([a-z,]+)\]", install).group(1)
    python = installs.new_venv(tmp_path / "venv", f"{wheel}[{extras}]")
    run_quickstart(tmp_path, python)


def run_quickstart(tmp_path: Path, python: Path) -> None:
    """The quickstart with ``python`` and the commands beside it (its environment's bin)."""
    commands, code = quickstart()
    assert len(commands) == 2 and commands[0].startswith("rmq-broker-sim ") and commands[0].endswith("&")
    assert len(code.splitlines()) + len(commands) + 1 <= 15, "the quickstart is at most 15 lines"
    port = str(free_port())

    def local(text: str) -> str:
        return text.replace("10911", port).replace("/tmp/", f"{tmp_path}/")

    bin_dir = python.parent
    broker_args = local(commands[0]).rstrip("&").split()
    broker = subprocess.Popen([str(bin_dir / broker_args[0]), *broker_args[1:]], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([str(bin_dir / "rmq-admin"), "--endpoint", f"127.0.0.1:{port}", "topic", "list"],
                             capture_output=True).returncode != 0:
            assert broker.poll() is None, broker.stderr.read()
            assert time.monotonic() < deadline, "the broker did not start in 60 s"
            time.sleep(0.3)
        admin = local(commands[1]).split()
        made = subprocess.run([str(bin_dir / admin[0]), *admin[1:]], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        # The read runs until stopped: here, until a batch of rows is printed (a slow host took
        # over 45 s), bounded.
        read = '(spark.readStream.format("rocketmq-batch")'
        job = local(code).replace(read, "read = " + read).replace(".awaitTermination())", ")")
        assert job.count("read = ") == 1 and ".awaitTermination" not in job, "the quickstart's read changed"
        job += ("\nimport time\ndeadline = time.monotonic() + 180\n"
                "while time.monotonic() < deadline and not any(p['numInputRows'] for p in read.recentProgress):\n"
                "    read.awaitTermination(1)\n"
                "for query in spark.streams.active:\n    query.stop()\n")
        env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
        ran = subprocess.run([str(python), "-c", job + "spark.stop()\n"], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path, env=env)
        assert ran.returncode == 0, ran.stderr[-3000:]
        rows = re.findall(r"^\|\s+(\d+)\|\s+(\d+)\|\s*(\d+)\|$", ran.stdout, re.M)
        assert rows, ran.stdout[-3000:]  # the console sink printed rows read back from the topic
    finally:
        broker.terminate()
        broker.wait(30)
