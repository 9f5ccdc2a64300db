"""The Spark tests that matter for compatibility (``-m compat``) on each older PySpark the
connector supports, each in its own venv (``make pyspark-versions``: peers/pyspark.py), where pip
installed this project after that PySpark and kept it. The project's own venv runs them, and the
whole suite, on the newest."""

import os
import subprocess

import pytest

from peers import pyspark as versions
from support.exclusive import at_most
from support.paths import REPO_ROOT


@pytest.fixture
def one_version_at_a_time(tmp_path_factory):
    """A run here is a pytest session with a Spark of its own and the Spark jobs its tests start:
    two at once held both of spark_in_a_process's slots at a load near 30, and a test beside them
    failed on Spark's 10 s for a Python worker to connect back. Taken before that slot, so a run
    that waits here holds none."""
    with at_most(1, "pyspark-version-run", tmp_path_factory):
        yield


@pytest.mark.parametrize("version", versions.OLDER)
def test_the_compatibility_tests_pass_on(version, one_version_at_a_time, spark_in_a_process):
    if not versions.ready(version):
        pytest.skip(f"no venv of PySpark {version} for this pyproject.toml: run `make pyspark-versions`")
    python = str(versions.python(version))
    kept = subprocess.run([python, "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert kept == version, f"pip replaced PySpark {version} with {kept}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "PYTEST_", "VIRTUAL_ENV"))}
    # An exactly-once stream write once, through our door: through the name server it differs in
    # the SDK only, which no PySpark version touches. How a script's own Spark finds the installed
    # package (a Spark each, half a minute): on the oldest, and on the newest in the suite.
    skipped = "not nameServer" + ("" if version == versions.OLDER[0] else " and not finds_the_format and not says_why")
    ran = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "compat", "-k", skipped,
                          "tests/rmq_spark/spark"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ""
    print(f"PySpark {version}: {summary}")
    assert ran.returncode == 0, f"PySpark {version}:\n{ran.stdout[-6000:]}\n{ran.stderr[-3000:]}"
    assert " passed" in summary and "skipped" not in summary, summary
