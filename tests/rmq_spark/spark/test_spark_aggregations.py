"""The job shapes Kafka users bring, exactly once: streaming aggregations in update and complete
mode written through ``foreachBatch`` (docs/spark-writes.md) over a driver SIGKILLed between its
writes and Spark's commit, on broker_sim and the real RocketMQ; complete mode straight into the
sink; update mode refused by Spark with our sentence after Spark's."""

from __future__ import annotations

import collections
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyspark_rocketmq_batch
from rmq_spark import Admin, Message, Producer
from spark_helpers import wait_for
from support.paths import REPO_ROOT
from support.sdk import bodies

DRIVER = Path(__file__).with_name("aggregation_driver.py")
PAGES = 5
CLICKS = 400  # two micro-batches of 200: the driver dies in the second, which runs again
_names = itertools.count()


def clicks(page_of: int) -> bytes:
    return json.dumps({"page": f"p{page_of % PAGES}"}).encode()


@pytest.fixture(params=["broker_sim", "rocketmq"])
def door(request):
    """(read options, write options, the SDK's address): broker_sim's own door, or the real
    RocketMQ 5.5.0 through its name server, exactly once on its transactional messages."""
    if request.param == "broker_sim":
        endpoint = request.getfixturevalue("endpoint")
        return {"endpoint": endpoint}, {"endpoint": endpoint}, {"endpoint": endpoint}
    request.getfixturevalue("require_java_peers")
    name_server = request.getfixturevalue("rocketmq").namesrv_addr
    return ({"nameServer": name_server}, {"nameServer": name_server, "deliveryGuarantee": "exactlyOnce"},
            {"name_server": name_server})


def run_driver(read: dict, write: dict, source: str, out: str, work: Path, *kill: str):
    return subprocess.run([sys.executable, str(DRIVER), json.dumps(read), json.dumps(write), source, out, str(work),
                           *kill], capture_output=True, text=True, timeout=600, start_new_session=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})


def test_aggregations_in_update_and_complete_mode_through_foreach_batch_survive_a_driver_killed(door, tmp_path,
                                                                                                spark_in_a_process):
    read, write, sdk = door
    source, out = f"clicks-{next(_names)}-{int(time.time())}", f"counts-{next(_names)}-{int(time.time())}"
    with Admin(**sdk) as admin:
        admin.create_topic(source, 2, "SimpleCQ")
        admin.create_topic(out, 2, "SimpleCQ")
    with Producer(**sdk) as producer:
        for queue in range(2):
            producer.send_batch([Message(source, clicks(i), queue_id=queue) for i in range(queue, CLICKS, 2)])
    killed = run_driver(read, write, source, out, tmp_path, "kill")
    assert killed.returncode == -9, f"the driver was to be SIGKILLed:\n{killed.stderr[-4000:]}"
    assert (tmp_path / "written-update").exists() and (tmp_path / "written-complete").exists()
    for mode in ("update", "complete"):  # Spark had not recorded micro-batch 1: it runs it again
        assert not (tmp_path / f"checkpoint-{mode}" / "commits" / "1").exists()
    done = run_driver(read, write, source, out, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]

    rows = [json.loads(body) for body in bodies(sdk, out)]
    seen = collections.Counter((r["mode"], r["batch"], r["page"]) for r in rows)
    assert max(seen.values()) == 1, f"written twice: {[key for key, n in seen.items() if n > 1]}"
    totals = {f"p{p}": CLICKS // PAGES for p in range(PAGES)}
    for mode in ("update", "complete"):
        mine = [r for r in rows if r["mode"] == mode]
        batches = sorted({r["batch"] for r in mine})
        assert batches == list(range(len(batches))) and len(batches) == 2, batches
        latest = {}
        for r in sorted(mine, key=lambda r: r["batch"]):
            latest[r["page"]] = r["count"]
        assert latest == totals
        last = [r for r in mine if r["batch"] == batches[-1]]
        if mode == "complete":  # every micro-batch writes the whole result
            assert {r["page"]: r["count"] for r in last} == totals and len(last) == PAGES


def test_complete_mode_writes_each_micro_batchs_whole_result(spark, endpoint, topic_name, tmp_path):
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic(topic_name, 2, "BatchCQ")
        admin.create_topic(f"{topic_name}-out", 1, "BatchCQ")
        producer.send_batch([Message(topic_name, clicks(i), queue_id=0) for i in range(100)])
    counts = (spark.readStream.format("rocketmq-batch").option("endpoint", endpoint).option("topic", topic_name)
              .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 50).load()
              .selectExpr("get_json_object(cast(body as string), '$.page') as page").groupBy("page").count()
              .selectExpr("to_json(struct(*)) as body"))
    query = (counts.writeStream.outputMode("complete").format("rocketmq-batch").option("endpoint", endpoint)
             .option("topic", f"{topic_name}-out").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    written = [json.loads(b) for b in bodies({"endpoint": endpoint}, f"{topic_name}-out")]
    assert len(written) == 2 * PAGES  # two micro-batches, the whole result each
    assert sorted((r["page"], r["count"]) for r in written[PAGES:]) == [(f"p{p}", 20) for p in range(PAGES)]


def test_update_mode_is_refused_by_spark_and_our_sentence_says_what_to_do(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    counts = (spark.readStream.format("rocketmq-batch").option("endpoint", endpoint).option("topic", topic_name)
              .load().groupBy("tags").count().selectExpr("to_json(struct(*)) as body"))
    query = (counts.writeStream.outputMode("update").format("rocketmq-batch").option("endpoint", endpoint)
             .option("topic", topic_name).option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        wait_for(lambda: query.exception() is not None or not query.isActive, "the query's end", 60)
    finally:
        query.stop()
    error = query.exception()
    assert error is not None and pyspark_rocketmq_batch.UPDATE_MODE in str(error)
    hint = pyspark_rocketmq_batch.lead_sentence(error)
    assert hint.startswith("rocketmq-batch: Spark lets a Python sink take append and complete mode, not update")
    assert "foreachBatch" in hint and ".option('batchId', batch_id)" in hint and "docs/spark-writes.md#" in hint
    assert (REPO_ROOT / "docs" / "spark-writes.md").read_text().count(
        "## Aggregations: update and complete mode") == 1
