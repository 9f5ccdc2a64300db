"""Fetch the pinned peers (versions.properties) from Maven Central into the cache, once.

    python -m peers.fetch          # what `make peers` runs
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from . import AGENT_JAR, GROUPS, HARNESS, POMS, fetched_dir, missing_tools, versions


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
        _build_agent(Path(work))
        (done.parent / work / ".complete").touch()
        shutil.rmtree(done, ignore_errors=True)
        shutil.move(work, done)
    print(f"peers: fetched into {done}")
    _forget_others(done)


def _forget_others(done: Path) -> None:
    """Remove the caches of other versions and harnesses (about 400 MB each; every change of the
    harness makes a new one). A checkout that needs one again fetches it again, from Maven's
    local repository."""
    for other in done.parent.iterdir():  # named by their digest (fetched_dir); the Python client's venv is not
        is_cache = re.fullmatch("[0-9a-f]{%d}" % len(done.name), other.name) is not None
        if is_cache and other != done and (other / ".complete").exists():
            shutil.rmtree(other, ignore_errors=True)
            print(f"peers: removed the cache of other versions {other}")


def _build_harness(work: Path, properties: list[str]) -> None:
    """Compile the Java harness (peers/harness) into the cache: its output never lands in git."""
    command = ["mvn", "-B", "-q", "-f", str(HARNESS / "pom.xml"), "compile", f"-Dharness.build.dir={work}/harness",
               *properties]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"peers: building the Java harness failed (mvn exit {result.returncode}):\n"
                 f"{(result.stdout + result.stderr)[-4000:]}")
    print("peers: Java harness built")


def _build_agent(work: Path) -> None:
    """Compile the loopback agent (peers/harness/agent) into a jar of the cache. javac, not Maven:
    it uses the JDK's own ASM (jdk.internal.org.objectweb.asm), which --release forbids."""
    classes = work / "agent" / "classes"
    command = ["javac", "--add-exports", "java.base/jdk.internal.org.objectweb.asm=ALL-UNNAMED", "-d", str(classes),
               *map(str, sorted((HARNESS / "agent").glob("*.java")))]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"peers: compiling the loopback agent failed (javac exit {result.returncode}):\n"
                 f"{(result.stdout + result.stderr)[-4000:]}")
    with zipfile.ZipFile(work / "agent" / AGENT_JAR, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nPremain-Class: peers.LoopbackAgent\n")
        for path in sorted(classes.rglob("*.class")):
            jar.write(path, path.relative_to(classes).as_posix())
    print("peers: loopback agent built")


if __name__ == "__main__":
    fetch()
