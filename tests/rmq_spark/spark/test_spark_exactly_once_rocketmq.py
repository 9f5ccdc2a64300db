"""Exactly once into RocketMQ through ``nameServer``, on RocketMQ's transactional messages
(rmq_spark/spark/sink_rocketmq.py), against broker_sim's remoting door, a two-broker broker_sim
cluster and the real Apache RocketMQ (5.5.0; 4.9.7 for the driver killed), each checked by
reading the topic with RocketMQ's own Java client: a streaming query; its last micro-batch
replayed after a restart; a whole Spark driver (its JVM and its Python workers) SIGKILLed
mid-query, then restarted; the driver's commit SIGKILLed halfway, then restarted; a writer task
SIGKILLed mid-write, then retried; one of Spark's own Python workers SIGKILLed mid-write, its
task retried by Spark."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from peers.rocketmq import digest, java_pull
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader
from rmq_spark.client.remoting.halves import Halves
from rmq_spark.spark import RocketMQBatchDataSource, sink, sink_rocketmq
from spark_helpers import forget_commit, wait_for

BODY_SCHEMA = StructType([StructField("body", BinaryType())])
_names = itertools.count()


@pytest.fixture(autouse=True)
def _java(require_java_peers):
    """The topics are read back with RocketMQ's Java consumer."""


def topic_of(target, prefix: str, queues: int = 2) -> str:
    name = f"{prefix}-{target.kind}-{next(_names)}-{int(time.time())}"
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, queues, "SimpleCQ")
    return name


def held(target, topic: str) -> int:
    with Admin(name_server=target.namesrv) as admin:
        return sum(q.max_offset - q.min_offset for q in admin.offsets([topic])[topic])


def held_once_indexed(target, topic: str, expect: int, timeout_s: float = 30) -> int:
    """``held`` once it reaches ``expect`` (or ``timeout_s`` passed): RocketMQ answers a commit
    (END_TRANSACTION) once the message is in its commit log, and indexes it in the topic's
    consume queue a moment later (ReputMessageService), so a count taken at once can be short."""
    deadline = time.monotonic() + timeout_s
    while (count := held(target, topic)) < expect and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


def read_once(target, topic: str, bodies: list[bytes]) -> None:
    """RocketMQ's Java consumer reads exactly ``bodies`` from the topic, each once (on 4.9.7, whose
    pulls the harness's Java 5 lite pull consumer gets nothing from, even of plain sends: the SDK)."""
    assert held_once_indexed(target, topic, len(bodies)) == len(bodies)
    if target.kind == "rocketmq4":
        with Admin(name_server=target.namesrv) as admin:
            ranges = [OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                      for q in admin.offsets([topic])[topic]]
        with RangeReader(name_server=target.namesrv) as reader:
            assert sorted(reader.read_table(ranges).column("body").to_pylist()) == sorted(bodies)
        return
    pulled = java_pull(target.namesrv, topic, expect=len(bodies), timeout_s=60)
    assert pulled["received"] == len(bodies) and pulled["digest"] == digest(bodies), pulled


def micro_batches(target, topic: str) -> set[int]:
    """The micro-batches the topic's messages say they were written in (``SPARK_MICRO_BATCH``,
    which the answers to the broker's checks go by); every message must say one."""
    with Admin(name_server=target.namesrv) as admin:
        ranges = [OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                  for q in admin.offsets([topic])[topic]]
    with RangeReader(name_server=target.namesrv, include_properties=True) as reader:
        properties = [dict(p) for p in reader.read_table(ranges).column("properties").to_pylist()]
    return {int(p[sink_rocketmq.MICRO_BATCH_PROPERTY]) for p in properties}


def rows(start: int, count: int) -> list[bytes]:
    return [b"row-%05d" % i for i in range(start, start + count)]


def writer_options(target, topic: str, checkpoint) -> dict:
    return {"nameServer": target.namesrv, "topic": topic, "deliveryGuarantee": "exactlyOnce",
            "sinkId": f"eo-{topic}", "checkpointLocation": str(checkpoint)}


def stream_writer(options: dict):
    """A writer as Spark makes one in a task, or in the driver's commit (a fresh one each time)."""
    return RocketMQBatchDataSource(options).streamWriter(BODY_SCHEMA, False)


def task(bodies: list[bytes]):
    return iter([pa.record_batch({"body": pa.array(bodies, pa.binary())})])


def test_a_stream_is_written_exactly_once_and_a_replayed_micro_batch_writes_nothing_twice(spark, target, tmp_path):
    source_topic, topic = topic_of(target, "eo-src"), topic_of(target, "eo-out")
    spark.createDataFrame([(b,) for b in rows(0, 600)], "body binary").write.format("rocketmq-batch").mode("append") \
        .option("nameServer", target.namesrv).option("topic", source_topic).save()
    checkpoint = tmp_path / "checkpoint"

    def run():
        query = (spark.readStream.format("rocketmq-batch").option("nameServer", target.namesrv)
                 .option("topic", source_topic).option("startingOffsets", "earliest")
                 .option("maxRecordsPerTrigger", 250).load().select("body")
                 .writeStream.format("rocketmq-batch").option("nameServer", target.namesrv).option("topic", topic)
                 .option("deliveryGuarantee", "exactlyOnce").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(180) and query.exception() is None
            return max(p["batchId"] for p in query.recentProgress)
        finally:
            query.stop()

    last = run()
    assert last >= 2  # 600 rows at most 250 a micro-batch
    assert held_once_indexed(target, topic, 600) == 600
    assert micro_batches(target, topic) == set(range(last + 1))  # Spark's tasks named theirs
    forget_commit(checkpoint, last)
    run()
    read_once(target, topic, rows(0, 600))


_COMMITTER = textwrap.dedent("""
    import pickle, sys, time
    from pyspark.sql.types import BinaryType, StructField, StructType
    from rmq_spark.client.remoting import RemotingTransport
    from rmq_spark.spark import RocketMQBatchDataSource

    options, messages, batch_id, marker = pickle.load(open(sys.argv[1], "rb"))
    end_halves = RemotingTransport.end_halves

    def halfway(self, halves, commit, group, timeout_ms=None, in_flight=1024, ended=None):
        def told(n):  # half of the commits answered, a few more in flight: the driver dies here
            if commit and n == len(halves) // 2:
                open(marker, "w").close()
                time.sleep(600)
        return end_halves(self, halves, commit, group, timeout_ms, 8, told)

    RemotingTransport.end_halves = halfway
    writer = RocketMQBatchDataSource(options).streamWriter(StructType([StructField("body", BinaryType())]), False)
    writer.commit(messages, batch_id)
""")

_WRITER = textwrap.dedent("""
    import pickle, sys, time
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType
    from rmq_spark.client.remoting import RemotingTransport
    from rmq_spark.spark import RocketMQBatchDataSource, sink, sink_rocketmq

    options, bodies, marker = pickle.load(open(sys.argv[1], "rb"))
    send_half, sent = RemotingTransport.send_half, []
    sink._micro_batch = lambda: 0  # a task of micro-batch 0, as Spark's TaskContext says
    sink_rocketmq.CHECK_IMMUNITY_S = 1  # checked after the broker's transactionTimeOut (3 s), not 5 minutes

    def counted(self, *args):
        sent.append(1)
        if len(sent) == len(bodies) // 2:  # half of the rows prepared: the task dies here
            open(marker, "w").close()
            time.sleep(600)
        return send_half(self, *args)

    RemotingTransport.send_half = counted
    writer = RocketMQBatchDataSource(options).streamWriter(StructType([StructField("body", BinaryType())]), False)
    writer.write(iter([pa.record_batch({"body": pa.array(bodies, pa.binary())})]))
""")


def killed_halfway(script: str, arguments: tuple, tmp_path) -> None:
    """Run ``script`` in a process of its own and SIGKILL it once it says it is halfway."""
    marker, given = tmp_path / f"halfway-{next(_names)}", tmp_path / f"arguments-{next(_names)}"
    given.write_bytes(pickle.dumps((*arguments, str(marker))))
    killed_when(subprocess.Popen([sys.executable, "-c", script, str(given)], start_new_session=True,
                                 stderr=subprocess.PIPE), marker, "halfway", 120)


def killed_when(process: subprocess.Popen, marker, what: str, timeout_s: float) -> None:
    """SIGKILL ``process`` and every process of its group once ``marker`` exists (``what``)."""
    try:
        deadline = time.monotonic() + timeout_s
        while not marker.exists():
            assert process.poll() is None, \
                f"the process ended ({process.returncode}) before {what}: {process.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, f"the process was not {what} within {timeout_s} s"
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        process.stderr.close()


# The crashes on one broker of each kind (the two-broker cluster takes the stream above); the
# driver's on RocketMQ 4.9.7 too.
ONE_BROKER_EACH = pytest.mark.parametrize("target", ["broker_sim", "rocketmq"], indirect=True)
AND_ROCKETMQ4 = pytest.mark.parametrize("target", ["broker_sim", "rocketmq", "rocketmq4"], indirect=True)


@AND_ROCKETMQ4
def test_a_driver_killed_in_the_middle_of_its_commit_and_restarted_writes_each_row_once(target, tmp_path):
    topic = topic_of(target, "eo-driver")
    options = writer_options(target, topic, tmp_path / "checkpoint")
    messages = [stream_writer(options).write(task(rows(0, 300))), stream_writer(options).write(task(rows(300, 200)))]
    assert held(target, topic) == 0  # prepared: invisible
    killed_halfway(_COMMITTER, (options, messages, 4), tmp_path)
    assert 0 < held(target, topic) < 500, "the driver was to die with part of its commit made"
    # Spark runs micro-batch 4 again: new attempts write the same rows, and the commit finishes
    # what the dead driver decided (its rows), rolling back the replay's.
    replay = [stream_writer(options).write(task(rows(0, 300))), stream_writer(options).write(task(rows(300, 200)))]
    stream_writer(options).commit(replay, 4)
    read_once(target, topic, rows(0, 500))


@ONE_BROKER_EACH
def test_a_writer_killed_mid_write_and_retried_writes_each_row_once(target, tmp_path, monkeypatch):
    """A write task dies with half of its rows prepared and is tried again; whatever part of the
    query runs while the broker checks the dead attempt's half messages (the driver's commit, the
    next micro-batch's task) answers them with a rollback once its micro-batch was decided
    without them, and the broker asks no more; the rows are in the topic once."""
    topic = topic_of(target, "eo-writer")
    options = writer_options(target, topic, tmp_path / "checkpoint")
    killed_halfway(_WRITER, (options, rows(0, 400)), tmp_path)  # 200 rows prepared, then the task died
    answered, lock, release = [], threading.Lock(), threading.Event()
    answer_check = Halves.answer_check

    def recorded(self, connection, command):  # every answer of this process from now on
        answer_check(self, connection, command)
        with lock:
            answered.extend(self.checks_answered.items())
            self.checks_answered.clear()

    monkeypatch.setattr(Halves, "answer_check", recorded)
    monkeypatch.setattr(sink, "_micro_batch", lambda: 0)
    monkeypatch.setattr(sink_rocketmq, "CHECK_IMMUNITY_S", 1)
    retried = stream_writer(options).write(task(rows(0, 400)))  # Spark tries the task again
    other = stream_writer(options).write(task(rows(400, 100)))
    stream_writer(options).commit([retried, other], 0)  # (its checks come to the commit too)
    read_once(target, topic, rows(0, 500))

    def a_long_task():  # micro-batch 1's task: its first rows, then more once the test says so
        yield pa.record_batch({"body": pa.array(rows(500, 10), pa.binary())})
        assert release.wait(120)
        yield pa.record_batch({"body": pa.array(rows(510, 10), pa.binary())})

    monkeypatch.setattr(sink, "_micro_batch", lambda: 1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        written = pool.submit(stream_writer(options).write, a_long_task())
        try:
            wait_for(lambda: answered, "a check of the dead attempt's rows answered", 60)
            settled = 0
            while settled != len(answered):  # until three check intervals pass with no new check
                settled = len(answered)
                time.sleep(6)
        finally:
            release.set()
        later = written.result(60)
    keys = [key for key, _commit in answered]
    decided = set(pa.ipc.open_file(str(tmp_path / "checkpoint" / "rocketmq-batch" / "decisions" / "0.arrow"))
                  .read_all().column("unique_key").to_pylist())
    # The dead attempt's half messages, and on RocketMQ copies of decided ones (its check service
    # writes a half message again when it meets it before its commit), are answered: a rollback.
    assert len(decided) == 500 and set(keys) - decided, "none of the dead attempt's half messages was answered"
    assert len(keys) == len(set(keys)), "the broker asked again after a rollback"
    assert not any(commit for _key, commit in answered)
    # Micro-batch 1's half messages are past their check immunity by now (3 s here): RocketMQ 5
    # takes the driver's commit of them only as the answer to a check, which it is sent again as.
    stream_writer(options).commit([later], 1)
    read_once(target, topic, rows(0, 520))


_DRIVER = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    name_server, source, topic, checkpoint = sys.argv[1:]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    query = (spark.readStream.format("rocketmq-batch").option("nameServer", name_server).option("topic", source)
             .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 300).load().select("body")
             .writeStream.format("rocketmq-batch").option("nameServer", name_server).option("topic", topic)
             .option("deliveryGuarantee", "exactlyOnce").option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    query.awaitTermination(600)  # the test kills this process long before
""")


@ONE_BROKER_EACH
def test_a_spark_driver_killed_mid_query_and_restarted_writes_each_row_once(spark, target, tmp_path,
                                                                            spark_in_a_process):
    """The whole driver (JVM and Python workers, one process group) is SIGKILLed as it decides
    its second micro-batch (where in that micro-batch the kill lands varies: writing, deciding,
    committing); a new driver on the same checkpoint finishes the query, and each row is in the
    topic once."""
    source_topic, topic = topic_of(target, "eo-src"), topic_of(target, "eo-out")
    with Producer(name_server=target.namesrv) as producer:
        producer.send_batch([Message(source_topic, body) for body in rows(0, 1500)])
    checkpoint = tmp_path / "checkpoint"
    decided = checkpoint.joinpath("rocketmq-batch", "decisions", "1.arrow")
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, target.namesrv, source_topic, topic, str(checkpoint)],
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_when(driver, decided, "deciding its second micro-batch", 180)
    assert held(target, topic) < 1500, "the driver was to die before the end of the query"
    print("killed with micro-batch 1", "committed" if decided.with_suffix(".done").exists() else
          "decided, its commit unfinished", f"({held(target, topic)} rows visible)")
    query = (spark.readStream.format("rocketmq-batch").option("nameServer", target.namesrv)
             .option("topic", source_topic).option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 300)
             .load().select("body")
             .writeStream.format("rocketmq-batch").option("nameServer", target.namesrv).option("topic", topic)
             .option("deliveryGuarantee", "exactlyOnce").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180) and query.exception() is None
    finally:
        query.stop()
    read_once(target, topic, rows(0, 1500))


_BATCH_WRITER = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    name_server, topic, sink_id, location = sys.argv[1:]
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    rows = spark.range(0, 1500, 1, 3).selectExpr("cast(format_string('row-%05d', id) as binary) as body")
    (rows.write.format("rocketmq-batch").option("nameServer", name_server).option("topic", topic)
     .option("deliveryGuarantee", "exactlyOnce").option("sinkId", sink_id).option("batchId", 7)
     .option("checkpointLocation", location).mode("append").save())
""")


@ONE_BROKER_EACH
def test_a_batch_write_exactly_once_whose_driver_is_killed_is_finished_by_a_rerun(target, tmp_path,
                                                                                  spark_in_a_process):
    """A df.write with sinkId, batchId and checkpointLocation: its driver is SIGKILLed as it
    decides (where the kill lands varies: deciding, committing); the same write run again
    finishes the decision, and each row is in the topic once."""
    topic = topic_of(target, "eo-batch")
    arguments = [sys.executable, "-c", _BATCH_WRITER, target.namesrv, topic, f"nightly-{topic}", str(tmp_path / "d")]
    decided = tmp_path.joinpath("d", *sink_rocketmq.DECISIONS_DIR, f"sink-nightly-{topic}", "7.arrow")
    killed_when(subprocess.Popen(arguments, start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE), decided, "deciding", 180)
    assert held(target, topic) < 1500, "the driver was to die before the end of the write"
    print("killed with the write", "committed" if decided.with_suffix(".done").exists() else "decided, unfinished",
          f"({held(target, topic)} rows visible)")
    rerun = subprocess.run(arguments, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    read_once(target, topic, rows(0, 1500))


_RETRYING_DRIVER = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    name_server, source, topic, checkpoint = sys.argv[1:]
    spark = (SparkSession.builder.master("local[2,4]")  # a failed task is tried again (up to 4 times)
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.python.worker.module", "pyspark_worker_killed_mid_write").getOrCreate())
    query = (spark.readStream.format("rocketmq-batch").option("nameServer", name_server).option("topic", source)
             .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 300).load().select("body")
             .writeStream.format("rocketmq-batch").option("nameServer", name_server).option("topic", topic)
             .option("deliveryGuarantee", "exactlyOnce").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    print("batches:", sorted(p["batchId"] for p in query.recentProgress))
""")


@ONE_BROKER_EACH
def test_a_spark_python_worker_killed_mid_write_is_retried_by_spark_and_writes_each_row_once(target, tmp_path,
                                                                                            spark_in_a_process):
    """Spark's own Python worker of a write task is SIGKILLed with 100 of its rows prepared
    (tests/rmq_spark/spark/pyspark_worker_killed_mid_write.py, as PySpark's worker module); Spark fails the task
    and runs it again, the query goes on, and each row is in the topic once: the dead attempt's
    half messages are never committed."""
    source_topic, topic = topic_of(target, "eo-src"), topic_of(target, "eo-out")
    with Producer(name_server=target.namesrv) as producer:
        producer.send_batch([Message(source_topic, body) for body in rows(0, 900)])
    marker = tmp_path / "killed"
    here = os.path.dirname(os.path.abspath(__file__))
    environment = {**os.environ, "KILL_MARKER": str(marker),
                   "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    driver = subprocess.Popen([sys.executable, "-c", _RETRYING_DRIVER, target.namesrv, source_topic, topic,
                               str(tmp_path / "checkpoint")], env=environment, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _out, err = driver.communicate(timeout=360)
    finally:  # the driver's JVM and workers too, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    assert driver.returncode == 0, err[-4000:]
    assert marker.exists(), "no Python worker was killed: " + err[-3000:]
    assert "Python worker exited unexpectedly" in err, err[-3000:]
    read_once(target, topic, rows(0, 900))



def test_a_commit_at_the_pace_of_rocketmq_s_full_op_queue_names_the_broker_setting(caplog):
    """RocketMQ 5 ends transactional messages 100 ms apart once its op queue is full (its default
    transactionOpMsgMaxSize; docs/rocketmq-clusters.md): a large commit that slow says what to set."""
    import logging

    from rmq_spark.spark.sink_rocketmq import _say_if_slow

    log = logging.getLogger("rmq-test-sink")
    with caplog.at_level(logging.WARNING, "rmq-test-sink"):
        _say_if_slow(log, 20_000, 20_000 / 14_000)  # a healthy broker: nothing said
        _say_if_slow(log, 100, 10.0)  # a small commit: its pace says nothing
        assert caplog.messages == []
        _say_if_slow(log, 20_000, 20_000 / 120)
    [said] = caplog.messages
    assert "committed at 120 rows/s" in said and "transactionOpMsgMaxSize to 262144" in said
