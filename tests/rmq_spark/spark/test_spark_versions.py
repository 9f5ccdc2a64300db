"""What every supported PySpark (4.0 to 4.3) must do, run on each (``compat``: the project's venv
runs them on the newest, tests/rmq_spark/spark/test_pyspark_versions.py on the older ones): batch writes
and reads of every column, a stream's read limit held across a restart, Trigger.AvailableNow as
far as each version lets a Python source go, exactly-once stream writes through both doors with a
micro-batch replayed, a Kafka connector job, and a connector that cannot be imported in Spark's
Python saying why. The differences are rmq_spark/spark/compat.py's."""

import os
import subprocess
import sys
import textwrap

import pytest

from rmq_spark import Admin, Message, Producer
from rmq_spark.spark import compat
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchStreamReader
from spark_helpers import forget_commit, keyed, produce, run_available_now, source, wait_for
from support.sdk import wait_indexed

pytestmark = pytest.mark.compat


def every_column(spark, rows: int):
    return spark.range(0, rows, 1, 2).selectExpr(
        "cast(concat('b', id) as binary) as body", "concat('k', id) as keys",
        "if(id % 2 = 0, 'TagA', 'TagB') as tags", "map('n', cast(id as string)) as properties",
        "timestamp_millis(1700000000000 + id) as born_timestamp")


def described(rows) -> list:
    return sorted((bytes(r.body), r.keys, r.tags, dict(r.properties), r.born_timestamp) for r in rows)


def test_a_batch_write_then_a_batch_read_of_every_column(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    written = every_column(spark, 500)
    written.write.format("rocketmq-batch").mode("append").option("endpoint", endpoint).option(
        "topic", topic_name).save()
    assert described(source(spark, endpoint, topic=topic_name, includeProperties=True).collect()) == described(
        written.collect())


def run_stream(df, checkpoint, condition, what: str, timeout_s: float = 120, sink=None):
    """Run ``df`` with the default trigger (a micro-batch as soon as the one before ends) into
    ``sink`` (a foreachBatch function, or rocketmq-batch options), until ``condition(query)``."""
    if callable(sink):
        writer = df.writeStream.foreachBatch(sink)
    else:
        writer = df.writeStream.format("rocketmq-batch")
        for name, value in sink.items():
            writer = writer.option(name, str(value))
    query = writer.option("checkpointLocation", str(checkpoint)).start()
    try:
        wait_for(lambda: query.exception() is not None or condition(query), what, timeout_s)
        assert query.exception() is None, query.exception()
        return query
    finally:
        query.stop()


def rows_read(query) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_a_stream_keeps_its_read_limit_across_a_restart(spark, endpoint, topic_name, tmp_path):
    """PySpark < 4.2 tells a Python source neither where a micro-batch starts nor its limit: the
    source caps its own micro-batches, and after a restart starts where the checkpoint ends."""
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    sent = {(topic_name, q, o): body for q in range(4) for o, body in enumerate(produce(endpoint, topic_name, q, 250,
                                                                                         batch=25))}
    wait_indexed(endpoint, topic_name, 1000)
    batches = {}  # batch id -> its rows: a micro-batch run again after the restart reads the same offsets

    def collect(batch, batch_id):
        batches[batch_id] = keyed(batch.collect())

    def read_until(total: int):
        df = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest",
                    maxRecordsPerTrigger=300)
        run_stream(df, tmp_path / "checkpoint", lambda _: sum(map(len, batches.values())) >= total,
                   f"{total} rows read", sink=collect)

    read_until(600)
    read_until(1000)
    assert max(map(len, batches.values())) == 300
    assert sum(map(len, batches.values())) == 1000, "a message was read twice across the restart"
    assert {key: body for rows in batches.values() for key, body in rows.items()} == sent


def test_trigger_available_now_reads_as_far_as_this_pyspark_lets_a_python_source(spark, endpoint, topic_name,
                                                                                   tmp_path):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    produce(endpoint, topic_name, 0, 500, batch=50)
    produce(endpoint, topic_name, 1, 500, batch=50)
    wait_indexed(endpoint, topic_name, 1000)
    df = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest", maxRecordsPerTrigger=300)
    rows, progress = run_available_now(df, tmp_path / "checkpoint")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    if compat.HAS_ADMISSION_CONTROL:  # 4.2+: everything there at the start, in capped micro-batches
        assert sizes == [300, 300, 300, 100]
        return
    # 4.0 and 4.1 run it as Trigger.Once: one capped micro-batch a run, the next run reads on.
    assert sizes == [300] and len(rows) == 300
    more, _ = run_available_now(df, tmp_path / "checkpoint")
    assert len(more) == 300 and not set(keyed(more)) & set(keyed(rows))


def test_the_sources_own_limits_follow_the_calls_of_a_pyspark_without_read_limits(endpoint, topic_name):
    """The calls PySpark 4.0 and 4.1 make, driven by hand: ``latestOffset()`` with nothing, then
    ``initialOffset()`` for a new query; ``partitions(end, end)`` first on a restart."""
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 25)
    wait_indexed(endpoint, topic_name, 25)
    options = parse_options({"endpoint": endpoint, "topic": topic_name, "startingOffsets": "earliest",
                             "maxRecordsPerTrigger": "10"})
    first = RocketMQBatchStreamReader(options)
    try:
        end = first.latestOffset()
        assert end == {topic_name: {"0": 10}} and first.initialOffset() == {topic_name: {"0": 0}}
        first.partitions(first.initialOffset(), end)
        first.commit(end)
        assert first.latestOffset() == {topic_name: {"0": 20}}
    finally:
        first.stop()
    restarted = RocketMQBatchStreamReader(options)
    try:
        restarted.partitions({topic_name: {"0": 20}}, {topic_name: {"0": 20}})  # the checkpoint's last offset
        assert restarted.latestOffset() == {topic_name: {"0": 25}}
        assert restarted.latestOffset() == {topic_name: {"0": 25}}  # nothing new: no micro-batch
    finally:
        restarted.stop()
    if not compat.HAS_ADMISSION_CONTROL:
        assert "maxRecordsPerTrigger=10" in compat.old_engine_limits(10)


@pytest.fixture(params=["endpoint", "nameServer"])
def door(request):
    """broker_sim's own door (an embedded broker), or its remoting door (a broker process): the
    Spark option and the SDK's argument that name it."""
    if request.param == "endpoint":
        address = request.getfixturevalue("endpoint")
        return {"endpoint": address}, {"endpoint": address}
    address = request.getfixturevalue("broker_sim_remoting").namesrv
    return {"nameServer": address}, {"name_server": address}


def test_an_exactly_once_stream_write_replayed_after_a_restart_writes_each_row_once(spark, door, topic_name,
                                                                                    tmp_path):
    """Every column written by a stream (on 4.0 from Spark's rows, on 4.1+ from Arrow batches),
    the last micro-batch run again after the restart writes nothing twice."""
    door, sdk = door
    out = f"{topic_name}-out"
    with Admin(**sdk) as admin:
        admin.create_topic(topic_name, 2, "BatchCQ")
        admin.create_topic(out, 2, "BatchCQ")
    with Producer(**sdk) as producer:
        producer.send_batch([Message(topic_name, b"b%03d" % i, keys=f"k{i}", tags="TagA", properties={"n": str(i)},
                                     queue_id=0) for i in range(300)])
        producer.send_batch([Message(topic_name, b"b%03d" % i, keys=f"k{i}", tags="TagB", properties={"n": str(i)},
                                     queue_id=1) for i in range(300, 600)])
    checkpoint = tmp_path / "checkpoint"
    sink = {**door, "topic": out, "deliveryGuarantee": "exactlyOnce"}

    def run(condition, what):
        df = spark.readStream.format("rocketmq-batch").options(**door).option("topic", topic_name).option(
            "startingOffsets", "earliest").option("maxRecordsPerTrigger", 250).option("includeProperties", "true")
        return run_stream(df.load().select("body", "keys", "tags", "properties", "born_timestamp"), checkpoint,
                          condition, what, sink=sink)

    first = run(lambda q: rows_read(q) >= 600, "600 rows written")
    last = max(p["batchId"] for p in first.recentProgress if p["numInputRows"])
    assert last >= 2
    forget_commit(checkpoint, last)  # as if the driver died after the sink's commit, before Spark's
    run(lambda q: any(p["batchId"] == last for p in q.recentProgress), f"micro-batch {last} run again")
    read = spark.read.format("rocketmq-batch").options(**door).option("includeProperties", "true")
    written, sent = read.option("topic", out).load().collect(), read.option("topic", topic_name).load().collect()
    assert len(written) == 600

    def described(rows):  # through name servers a message's born time is when it was sent (RocketMQ's header)
        return sorted((bytes(r.body), r.keys, r.tags, r.properties["n"], r.born_timestamp if "endpoint" in door else 0)
                      for r in rows)

    assert described(written) == described(sent)


def test_a_kafka_connector_job_reads_and_writes_kafkas_columns(spark, endpoint, topic_name, tmp_path):
    copy = f"{topic_name}-copy"
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic(topic_name, 2)
        admin.create_topic(copy, 2)
        for i in range(10):
            producer.send(Message(topic_name, f"v{i}".encode(), keys=f"k{i}", queue_id=i % 2,
                                  properties={"trace": f"t{i}"}))
    wait_indexed(endpoint, topic_name, 10)
    df = (spark.readStream.format("rocketmq-batch").option("endpoint", endpoint).option("schema", "kafka")
          .option("subscribe", topic_name).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 4)
          .option("includeHeaders", "true").load())
    query = run_stream(df.select("key", "value", "headers", "partition"), tmp_path / "checkpoint",
                       lambda q: rows_read(q) >= 10, "10 rows copied",
                       sink={"endpoint": endpoint, "schema": "kafka", "topic": copy})
    assert max(p["numInputRows"] for p in query.recentProgress) == 4
    back = source(spark, endpoint, topic=copy, schema="kafka", includeHeaders=True).collect()
    assert sorted((bytes(r.key), bytes(r.value), r.partition, [(h.key, bytes(h.value)) for h in r.headers])
                  for r in back) == [(f"k{i}".encode(), f"v{i}".encode(), i % 2, [("trace", f"t{i}".encode())])
                                     for i in range(10)]


_REFUSE_ZSTANDARD = textwrap.dedent("""
    import importlib.machinery
    import sys

    class Refuse:  # found (PySpark looks for it), but it cannot be imported
        def find_spec(self, name, path=None, target=None):
            if name == "zstandard":
                return importlib.machinery.ModuleSpec(name, self)

        def create_module(self, spec):
            raise ModuleNotFoundError("No module named 'zstandard'", name="zstandard")

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Refuse())
""")


_LOAD = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.read.format("rocketmq-batch").option("endpoint", "127.0.0.1:9").option("topic", "t").load()
""")


def test_a_connector_that_cannot_be_imported_in_sparks_python_says_why(tmp_path, spark_in_a_process):
    """PySpark's lookup of data sources swallows an ImportError, and Spark would say only
    DATA_SOURCE_NOT_FOUND: the format is found anyway, and fails with the reason."""
    (tmp_path / "sitecustomize.py").write_text(_REFUSE_ZSTANDARD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
           "PYSPARK_PYTHON": sys.executable}
    ran = subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert ran.returncode != 0
    assert "DATA_SOURCE_NOT_FOUND" not in ran.stderr, ran.stderr[-3000:]
    lines = ran.stderr.splitlines()
    first = lines[lines.index("Traceback (most recent call last):") - 1]  # printed before the traceback
    assert first.startswith("rocketmq-batch cannot be loaded in ") and "No module named 'zstandard'" in first, \
        ran.stderr[-3000:]
    assert "pip install rocketmq-batch-spark" in first
