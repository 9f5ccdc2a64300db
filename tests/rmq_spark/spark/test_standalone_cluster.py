"""rocketmq-batch on a real Spark cluster: Spark's standalone master and two workers, separate
processes on 127.0.0.1 (tests/rmq_spark/spark/standalone.py), whose Python has neither this package nor its
dependencies; applications submitted with spark-submit the two ways Spark's "Python Package
Management" guide gives, with the package built by `python -m build`:

- a packed virtual environment (venv-pack) given with ``--archives``: a batch read, a stream
  read and an exactly-once stream write, whose driver is SIGKILLed mid-query and submitted again
  on its checkpoint; every row is written once;
- the wheel given with ``--py-files`` to workers whose Python has the dependencies.

What each way needs is docs/deployment.md's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_sim.testing import broker_process
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader
from standalone import StandaloneCluster, kill
from support import installs

ROWS = 3000

_PIPELINE = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    endpoint, source, out, checkpoint = sys.argv[1:]
    spark = SparkSession.builder.appName("rocketmq-batch pipeline").getOrCreate()
    print("batch read", spark.read.format("rocketmq-batch").option("endpoint", endpoint).option("topic", source)
          .load().count(), flush=True)
    query = (spark.readStream.format("rocketmq-batch").option("endpoint", endpoint).option("topic", source)
             .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 500).load().select("body")
             .writeStream.format("rocketmq-batch").option("endpoint", endpoint).option("topic", out)
             .option("deliveryGuarantee", "exactlyOnce").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    print("stream read", sum(p["numInputRows"] for p in query.recentProgress), flush=True)
    spark.stop()
""")

_FROM_A_WHEEL = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from rmq_spark.spark import register

    endpoint, source, out = sys.argv[1:]
    spark = SparkSession.builder.appName("rocketmq-batch from a wheel").getOrCreate()
    register(spark)  # shipped with --py-files, the package is not installed where PySpark's lookup looks
    rows = spark.read.format("rocketmq-batch").option("endpoint", endpoint).option("topic", source).load()
    rows.select("body").write.format("rocketmq-batch").mode("append").option("endpoint", endpoint) \\
        .option("topic", out).save()
    print("copied", rows.count(), flush=True)
    spark.stop()
""")


@dataclass
class Shipped:
    home: Path  # where applications are submitted from: `environment/` is the app's venv
    wheel: Path
    archive: Path  # environment/, packed by venv-pack
    cluster_python: Path  # the workers' own Python: nothing installed
    dependencies_python: Path  # a Python with the package's dependencies, not the package


def _runs(python: Path, statement: str) -> bool:
    return subprocess.run([str(python), "-c", statement], capture_output=True, cwd="/").returncode == 0


pytestmark = pytest.mark.xdist_group("package")  # the package is built once (built_package)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, built_package) -> Shipped:
    home = tmp_path_factory.mktemp("shipped")
    wheel, _sdist = built_package
    environment = installs.new_venv(home / "environment", str(wheel))  # the package and its dependencies only
    archive = home / "environment.tar.gz"
    packed = subprocess.run([str(Path(sys.executable).parent / "venv-pack"), "-p", str(environment.parent.parent),
                             "-o", str(archive), "-q"], capture_output=True, text=True, timeout=300)
    assert packed.returncode == 0, packed.stderr
    # the same environment without the package: copied (a venv finds its prefix from where its
    # python is), not installed again, which took a minute of the suite
    shutil.copytree(home / "environment", home / "dependencies", symlinks=True)
    dependencies = home / "dependencies" / "bin" / "python"
    subprocess.run([str(dependencies), "-m", "pip", "uninstall", "-q", "-y", installs.DISTRIBUTION], check=True)
    cluster_python = installs.new_venv(home / "cluster-python")
    assert not _runs(cluster_python, "import pyarrow") and not _runs(dependencies, "import rmq_spark")
    assert _runs(dependencies, "import pyarrow, grpc, zstandard") and not _runs(environment, "import pyspark")
    return Shipped(home, wheel, archive, cluster_python, dependencies)


@pytest.fixture(scope="module")
def cluster(shipped, tmp_path_factory):
    """The workers' PATH finds the cluster's bare Python first, as `python` and `python3`."""
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), f"{shipped.cluster_python.parent}:/usr/bin:/bin") as up:
        yield up


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    with broker_process(tmp_path_factory.mktemp("broker")) as (started, _process):
        yield started


def fill(endpoint: str, topic: str, out: str) -> list[bytes]:
    bodies = [b"row-%05d" % i for i in range(ROWS)]
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic(topic, 4, "BatchCQ")
        admin.create_topic(out, 4, "BatchCQ")
        for at in range(0, ROWS, 500):
            producer.send_batch([Message(topic, body, queue_id=(at // 500) % 4) for body in bodies[at:at + 500]])
    return bodies


def bodies_in(endpoint: str, topic: str) -> list[bytes]:
    with Admin(endpoint) as admin:
        ranges = [OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset) for q in admin.offsets([topic])[topic]]
    with RangeReader(endpoint) as reader:
        return sorted(reader.read_table(ranges).column("body").to_pylist())


def test_a_packed_environment_reads_and_writes_exactly_once_through_a_driver_killed_mid_query(
        shipped, cluster, endpoint, spark_in_a_process):
    """The app's venv is packed and shipped as ``#environment``; PYSPARK_PYTHON and
    PYSPARK_DRIVER_PYTHON are both ``./environment/bin/python``: the venv itself where the driver
    runs (the submitting directory), the unpacked archive where the executors run."""
    bodies = fill(endpoint, "packed-src", "packed-out")
    app, checkpoint = shipped.home / "pipeline.py", shipped.home / "pipeline-checkpoint"
    app.write_text(_PIPELINE)

    def submit(wait: bool):
        return cluster.submit(app, endpoint, "packed-src", "packed-out", str(checkpoint),
                              python="./environment/bin/python", driver_python="./environment/bin/python",
                              options=("--archives", f"{shipped.archive}#environment"), cwd=shipped.home, wait=wait)

    first = submit(wait=False)
    deadline = time.monotonic() + 300
    while not (checkpoint / "offsets" / "2").exists():  # micro-batch 2 planned: its tasks write
        assert first.poll() is None, f"the first run ended first:\n{kill(first).err[-4000:]}"
        assert time.monotonic() < deadline, f"no third micro-batch in 300 s:\n{kill(first).err[-4000:]}"
        time.sleep(0.05)
    killed = kill(first)  # spark-submit's JVM, the driver's Python and its planners: the whole driver
    assert "batch read 3000" in killed.out, killed.err[-4000:]
    assert len(bodies_in(endpoint, "packed-out")) < ROWS, "the driver was to die before the end of the query"
    second = submit(wait=True)
    assert second.returncode == 0, second.err[-6000:]
    assert "batch read 3000" in second.out and "stream read" in second.out
    assert bodies_in(endpoint, "packed-out") == bodies  # each row once
    assert cluster.unpacked("environment"), "the executors did not run the shipped environment"


def test_a_wheel_given_to_py_files_on_workers_that_have_its_dependencies(shipped, cluster, endpoint,
                                                                          spark_in_a_process):
    """PYSPARK_PYTHON names a Python every node has at the same path, with the dependencies; the
    wheel itself is shipped with ``--py-files`` and the app calls ``register(spark)``."""
    bodies = fill(endpoint, "wheel-src", "wheel-out")
    app = shipped.home / "from_a_wheel.py"
    app.write_text(_FROM_A_WHEEL)
    done = cluster.submit(app, endpoint, "wheel-src", "wheel-out", python=str(shipped.dependencies_python),
                          options=("--py-files", str(shipped.wheel)), cwd=shipped.home)
    assert done.returncode == 0, done.err[-6000:]
    assert f"copied {ROWS}" in done.out
    assert bodies_in(endpoint, "wheel-out") == bodies


def test_the_install_without_extras_holds_no_broker_and_says_which_to_add(shipped):
    """What executors are shipped is the SDK alone: the broker's command says what to install."""
    environment = shipped.home / "environment" / "bin"
    assert not _runs(environment / "python", "import rocksdict") and not _runs(environment / "python", "import yaml")
    ran = subprocess.run([str(environment / "rmq-broker-sim"), "--data-dir", str(shipped.home / "no-broker")],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.strip().splitlines() == [
        f"rmq-broker-sim: broker_sim needs rocksdict, pyyaml, prometheus-client (the package's extra 'broker'), not "
        f"installed in {environment / 'python'}: pip install 'rocketmq-batch-spark[broker]'"]
