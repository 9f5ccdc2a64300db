"""A user's own script finds the format with no register call, however its Python was started;
where Spark's workers truly lack the package, the first thing the user reads says so; and an
error of ours that Spark wraps in its own is read first, not after Spark's traceback. A thread of
the user's own that writes is told to call ``register(spark)``, and then writes.

Each test runs a script as a user would: this environment's interpreter by its path (the venv not
activated: PATH has only the system's Python), from a directory of its own, PYSPARK_PYTHON unset.
"""

import os
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path

import pytest

import pyspark_rocketmq_batch
from rmq_spark import Admin
from rmq_spark.spark import register

_JOB = textwrap.dedent("""
    import broker_sim
    from pyspark.sql import SparkSession
    from rmq_spark import Admin, Message, Producer

    with broker_sim.embedded() as endpoint:
        with Admin(endpoint) as admin, Producer(endpoint) as producer:
            admin.create_topic("first-hour", 2)
            for i in range(3):
                producer.send(Message(topic="first-hour", body=b"row %d" % i))
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        rows = spark.read.format("rocketmq-batch").option("endpoint", endpoint).option("topic", "first-hour").load()
        print("rows", rows.count())
        spark.stop()
""")
_SYSTEM_PATH = "/usr/bin:/bin"


def _run_job(tmp_path: Path, job: str = _JOB, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=_SYSTEM_PATH, **env_changes)
    (tmp_path / "job.py").write_text(job)
    return subprocess.run([sys.executable, "job.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def _python_lacking_the_package() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists() and subprocess.run([candidate, "-c", "import pyspark_rocketmq_batch"],
                                                       capture_output=True, cwd="/").returncode != 0:
            return candidate
    pytest.skip("no Python without this package on this machine (/usr/bin/python3 has it)")


@pytest.mark.compat
@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests run outside a virtual environment")
def test_a_script_run_by_the_venvs_python_unactivated_finds_the_format(tmp_path, spark_in_a_process):
    _python_lacking_the_package()  # python3 on PATH lacks the package, as a fresh machine's does
    result = _run_job(tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "rows 3" in result.stdout


def test_workers_without_the_package_are_named_in_the_first_line(tmp_path, spark_in_a_process):
    lacking = _python_lacking_the_package()
    result = _run_job(tmp_path, PYSPARK_PYTHON=lacking)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if not _spark_banner(line)]
    assert ours and ours[0].startswith("rocketmq-batch: Spark's Python workers run " + lacking), "\n".join(ours[:5])
    assert f"set PYSPARK_PYTHON={sys.executable}" in ours[0]


def test_an_uncaught_error_of_ours_leads_with_its_sentence(tmp_path, spark_in_a_process):
    """Spark puts a data source's error after its own words and the worker's traceback: it is
    printed first, once, and Spark's words after the user's frames."""
    result = _run_job(tmp_path, _JOB.replace('.option("topic", "first-hour")',
                                             '.option("topic", "first-hour").option("maxPartitions", "abc")'))
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if not _spark_banner(line)]
    sentence = "option maxPartitions='abc': expected a positive number of partitions (a whole number >= 1)"
    assert ours and ours[0] == f"rocketmq-batch: {sentence}", "\n".join(ours[:5])
    assert result.stderr.count(sentence) == 1, result.stderr  # once, first: not again in Spark's worker traceback
    assert "[PYTHON_DATA_SOURCE_ERROR]" in ours[-1] and "sentence above" in ours[-1]  # Spark's own first words


def _spark_banner(line: str) -> bool:
    """Lines the JVM prints as it starts, before anything of the job runs."""
    return (" WARN " in line or "log4j" in line or "setLogLevel" in line or "incubator modules" in line
            or "default log level" in line or not line.strip())


def test_the_install_puts_the_project_on_the_path_plainly_and_runs_the_start_up_hook():
    """PySpark's lookup lists modules with pkgutil.iter_modules, which sees path entries but not
    setuptools' editable import hooks: the install is a plain one, or a plain path entry."""
    site = Path(sysconfig.get_paths()["purelib"])
    hook = site / "rocketmq_batch_spark.pth"
    assert hook.is_file(), "the install lacks rocketmq_batch_spark.pth: reinstall with `make setup`"
    assert hook.read_text().startswith("import pyspark_rocketmq_batch; pyspark_rocketmq_batch.start_up()")
    assert not list(site.glob("__editable__*rocketmq_batch_spark*finder.py")), "an import-hook editable install"
    import pyspark_rocketmq_batch

    module_dir = Path(pyspark_rocketmq_batch.__file__).parent
    assert module_dir == site or any(module_dir == Path(line.strip()) for pth in site.glob("*.pth")
                                     for line in pth.read_text().splitlines())


@pytest.mark.compat
def test_a_thread_of_its_own_that_writes_is_told_to_register_and_then_writes(spark, endpoint, topic_name):
    """PySpark finds a Python data source for a write through the calling thread's active session,
    which it sets only in the thread that created the session."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2)
    df = spark.range(20).selectExpr("cast(id as string) as body")
    outcome = {}

    def write():
        writer = (df.write.format("rocketmq-batch").mode("append").option("endpoint", endpoint)
                  .option("topic", topic_name))
        try:
            writer.save()
        except Exception as error:  # noqa: BLE001 - the test reads what the user would
            outcome["hint"] = pyspark_rocketmq_batch.lead_sentence(error)
        register(spark)
        writer.save()
        outcome["written"] = True

    thread = threading.Thread(target=write, name="nightly-writer")
    thread.start()
    thread.join(180)
    assert outcome.get("written"), "the write after register(spark) did not finish"
    assert outcome.get("hint", "").startswith("rocketmq-batch: PySpark finds a Python data source for df.write"), (
        f"{outcome.get('hint')!r}: if PySpark now finds the format from any thread, drop the hint and this test")
    assert "'nightly-writer'" in outcome["hint"] and "register(spark)" in outcome["hint"]
    rows = spark.read.format("rocketmq-batch").option("endpoint", endpoint).option("topic", topic_name).load()
    assert rows.count() == 20  # the one write that ran


def test_a_thread_s_uncaught_error_of_ours_leads_with_its_sentence(capsys):
    error = RuntimeError("[PYTHON_DATA_SOURCE_ERROR] ... rmq_spark.errors.ConfigError: option topic is required")
    try:
        raise error
    except RuntimeError:
        args = threading.ExceptHookArgs((RuntimeError, error, error.__traceback__, threading.current_thread()))
    pyspark_rocketmq_batch._thread_excepthook(args)
    first, *rest = capsys.readouterr().err.splitlines()
    assert first == "rocketmq-batch: option topic is required"
    assert "RuntimeError: [PYTHON_DATA_SOURCE_ERROR]" in "\n".join(rest)  # the error itself follows, whole
