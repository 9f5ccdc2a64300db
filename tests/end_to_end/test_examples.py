"""Every example runs as users run it (its main, an embedded broker), at a small size, and
prints what it did; the results it prints are checked."""

import importlib.util
import os
import re
import subprocess
import sys

from support.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_autobatch_producer(capsys):
    summary = example("autobatch_producer").main(["--messages", "4000", "--threads", "2"])
    assert summary["messages"] == 4000 and summary["errors"] == 0 and summary["stored_messages"] == 4000
    assert "sent 4,000 messages from 2 threads" in capsys.readouterr().out


def test_pop_workers(capsys):
    result = example("pop_workers").main(["--orders", "300", "--poison-every", "100", "--max-retries", "2",
                                          "--workers", "2"])
    assert result["processed"] == 297
    assert result["dead_letters"] == result["poison"] == [99, 199, 299]
    assert result["attempts_of_poison"] == [3, 3, 3]  # the first try and two retries
    out = capsys.readouterr().out
    assert "each order once: True" in out and "%DLQ%order-workers: [99, 199, 299]" in out


def test_clickstream_etl_as_make_demo_runs_it(tmp_path, spark_in_a_process):
    """As `make demo` runs it: a process of its own that starts its own Spark, and says what it
    does in one line per step and per micro-batch, with nothing of Spark's start-up noise."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    result = subprocess.run([sys.executable, str(EXAMPLES / "clickstream_etl.py"), "--events", "6000", "--minutes",
                             "3", "--max-records-per-trigger", "2500", "--checkpoint", str(tmp_path / "cp")],
                            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "every click counted exactly once: True" in out and "UTC  /checkout" in out
    assert result.stderr.strip() == "", result.stderr[-3000:]  # no WARN lines, log4j notes or JVM notes
    batches = re.findall(r"micro-batch (\d+): ", out)
    assert len(batches) >= 3 and len(batches) == len(set(batches)), out  # one line per micro-batch
    assert "aggregates (page, minute, count)" in out


def test_clickstream_etl_through_a_name_server(spark, broker_sim_remoting, tmp_path, capsys):
    """The same pipeline through RocketMQ's remoting protocol (--name-server), as against a
    RocketMQ cluster: at least once, here every click counted once."""
    result = example("clickstream_etl").main(["--name-server", broker_sim_remoting.namesrv, "--events", "4000",
                                              "--minutes", "2", "--checkpoint", str(tmp_path / "cp")], spark=spark)
    assert result["exact"] and len(result["aggregates"]) == len(result["truth"]) >= 2 * 5
    assert f"broker at {broker_sim_remoting.namesrv}" in capsys.readouterr().out


def test_clickstream_etl_as_docker_compose_runs_it_with_acls(spark, tmp_path, monkeypatch, capsys):
    """docker-compose.yml's scenario without Docker: the broker with the ACL file of deploy/,
    the topics made by its admin account, the job signing as its own account."""

    from broker_sim.testing import broker_process

    root = REPO_ROOT
    with broker_process(tmp_path / "data", "--acl-file", str(root / "deploy/acl/plain_acl.yml")) as (endpoint, _p):
        for name, queues in (("clicks", "8"), ("page-minute-counts", "4")):
            subprocess.run([sys.executable, "-m", "rmq_spark.cli", "--endpoint", endpoint, "--access-key",
                            "ops", "topic", "create", name, "--queues", queues, "--type", "BatchCQ"], check=True,
                           env={**os.environ, "RMQ_SECRET_KEY": "ops-change-me"}, timeout=60)
        monkeypatch.setenv("RMQ_SECRET_KEY", "etl-change-me")
        result = example("clickstream_etl").main(["--endpoint", endpoint, "--access-key", "etl", "--events", "3000",
                                                  "--minutes", "2", "--checkpoint", str(tmp_path / "cp")],
                                                 spark=spark)
    assert result["exact"] and len(result["aggregates"]) == len(result["truth"]) >= 2 * 5


def test_backfill_batch(spark, tmp_path, capsys):
    result = example("backfill_batch").main(["--orders", "3000", "--parquet", str(tmp_path / "orders.parquet")],
                                            spark=spark)
    assert result["parquet_rows"] == 3000 and result["waves"] == {"second": 3000}
    assert result["replayed"] == 3000
    assert "df.write of the Parquet rows into orders-replay: 3,000 messages" in capsys.readouterr().out


def test_transactional_producer(capsys):
    result = example("transactional_producer").main(["--writers", "2", "--messages", "2000"])
    assert result == {"prepared": 4000, "committed": 4000, "replayed": 0, "visible": 4000}
    out = capsys.readouterr().out
    assert "2 writers prepared 4,000 messages; visible now: 0" in out and "the replay 0 (replayed: True)" in out
