"""Fetch the pinned peers (versions.properties) from Maven Central into the cache, once.

    python -m peers.fetch          # what `make peers` runs
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import GROUPS, HARNESS, POMS, fetched_dir, missing_tools, versions


def fetch() -> None:
    problem = missing_tools()
    if problem:  # the tests that need a peer skip, saying the same
        print(f"peers: not fetched: {problem}")
        return
    done = fetched_dir()
    if (done / ".complete").exists():
        print(f"peers: already fetched in {done}")
        return
    done.parent.mkdir(parents=True, exist_ok=True)
    properties = [f"-D{name}={value}" for name, value in versions().items()]
    with tempfile.TemporaryDirectory(prefix="fetching-", dir=done.parent) as work:
        for group in GROUPS:
            started = time.monotonic()
            command = ["mvn", "-B", "-q", "-f", str(POMS / f"{group}.xml"), "dependency:copy-dependencies",
                       f"-DoutputDirectory={work}/{group}", "-DincludeScope=runtime", *properties]
            result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if result.returncode:
                sys.exit(f"peers: fetching {group} failed (mvn exit {result.returncode}):\n"
                         f"{(result.stdout + result.stderr)[-4000:]}")
            print(f"peers: {group} fetched in {time.monotonic() - started:.0f} s")
        _build_harness(Path(work), properties)
        (done.parent / work / ".complete").touch()
        shutil.rmtree(done, ignore_errors=True)
        shutil.move(work, done)
    print(f"peers: fetched into {done}")


def _build_harness(work: Path, properties: list[str]) -> None:
    """Compile the Java harness (peers/harness) into the cache: its output never lands in git."""
    command = ["mvn", "-B", "-q", "-f", str(HARNESS / "pom.xml"), "compile", f"-Dharness.build.dir={work}/harness",
               *properties]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"peers: building the Java harness failed (mvn exit {result.returncode}):\n"
                 f"{(result.stdout + result.stderr)[-4000:]}")
    print("peers: Java harness built")


if __name__ == "__main__":
    fetch()
