"""The older PySparks the connector is tested on, beside the newest one of the project's own
venv: each in a virtual environment of its own inside the checkout (``.venv-pyspark/<version>``),
made as a user's would be: that PySpark installed first, then this project with pip, which must
keep it (the project's range, ``pyspark>=4.0,<4.4``, says so). The versions are pinned here
(``OLDER``: the newest patch of each older minor; the newest minor is the project venv's).

    python -m peers.pyspark           # what `make pyspark-versions` runs: make the missing ones

A venv is made again when pyproject.toml changes (its digest is kept in ``.installed``). The
tests that run on each (``-m compat``) start from ``tests/rmq_spark/spark/test_pyspark_versions.py``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".venv-pyspark"
EXTRAS = "spark,broker,test"
OLDER = ("4.0.5", "4.1.4", "4.2.1")


def python(version: str) -> Path:
    return HOME / version / "bin" / "python"


def _digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def ready(version: str) -> bool:
    stamp = HOME / version / ".installed"
    return stamp.exists() and stamp.read_text().strip() == _digest()


def make(version: str) -> None:
    """The venv of ``version``: PySpark first, then this project (editable, with its extras);
    SystemExit with a sentence when pip fails or replaces that PySpark."""
    home = HOME / version
    shutil.rmtree(home, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(home)
    interpreter = str(python(version))
    for what, args in ((f"PySpark {version}", [f"pyspark=={version}"]),
                       ("this project", ["-e", f"{ROOT}[{EXTRAS}]"])):
        done = subprocess.run([interpreter, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1200)
        if done.returncode:
            sys.exit(f"pyspark-versions: installing {what} into {home} failed (pip exit {done.returncode}):\n"
                     f"{(done.stdout + done.stderr)[-4000:]}")
    kept = subprocess.run([interpreter, "-c", "import pyspark; print(pyspark.__version__)"],
                          capture_output=True, text=True).stdout.strip()
    if kept != version:
        sys.exit(f"pyspark-versions: `pip install` of this project replaced PySpark {version} with {kept or 'nothing'} "
                 f"in {home}: the project's pyspark range (pyproject.toml) must keep every version it supports")
    (home / ".installed").write_text(_digest() + "\n")


def main() -> None:
    HOME.mkdir(exist_ok=True)
    for version in OLDER:
        if ready(version):
            print(f"pyspark-versions: PySpark {version} ready in {HOME / version}")
            continue
        started = time.monotonic()
        make(version)
        print(f"pyspark-versions: PySpark {version} and this project installed in {HOME / version} "
              f"in {time.monotonic() - started:.0f} s")
    for stale in HOME.iterdir():  # versions no longer tested
        if stale.is_dir() and stale.name not in OLDER:
            shutil.rmtree(stale, ignore_errors=True)


if __name__ == "__main__":
    main()
