"""The package as users get it: built by `python -m build` (an sdist, and the wheel built from
it), and installed by pip into virtual environments of their own, never editable. For the tests
of the wheel (tests/end_to_end/test_readme.py) and of Spark clusters it is shipped to
(tests/rmq_spark/spark/test_standalone_cluster.py)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

from support.paths import REPO_ROOT

ROOT = REPO_ROOT
DISTRIBUTION = "rocketmq-batch-spark"


def build(out: Path) -> tuple[Path, Path]:
    """`python -m build` of the checkout into ``out``: (the wheel, the sdist)."""
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return next(out.glob("*.whl")), next(out.glob("*.tar.gz"))


def pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def new_venv(home: Path, *requirements: str) -> Path:
    """A virtual environment at ``home`` with ``requirements`` installed by pip (none: a bare
    one); its Python."""
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    if requirements:
        pip(python, *requirements)
    return python
