"""df.write / df.writeStream.format("rocketmq-batch") against a real broker and local Spark:
rows written and read back equal (both codecs), exactly once through task retries, aborted
jobs, micro-batches replayed after a restart and a broker restart between prepare and commit;
every bad input refused before a row is written."""

import json

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.types import BinaryType, StructField, StructType

import broker_sim
import pyspark_rocketmq_batch
from broker_sim.broker import Broker
from rmq_spark import Admin, ConfigError, Transactions
from rmq_spark.spark import RocketMQBatchDataSource
from rmq_spark.spark.options import SINK_OPTION_NAMES, parse_sink_options
from spark_helpers import forget_commit, produce, source, wait_for
from support.paths import REPO_ROOT
from support.sdk import wait_indexed

BODY_SCHEMA = StructType([StructField("body", BinaryType())])


def write(df, endpoint, **options):
    writer = df.write.format("rocketmq-batch").mode("append").option("endpoint", endpoint)
    for name, value in options.items():
        writer = writer.option(name, str(value))
    writer.save()


def write_stream(df, endpoint, checkpoint, timeout_s=120, **options):
    """Run a stream into the sink with Trigger.AvailableNow; returns the finished (or failed) query."""
    writer = (df.writeStream.format("rocketmq-batch").option("endpoint", endpoint)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for name, value in options.items():
        writer = writer.option(name, str(value))
    query = writer.start()
    try:
        assert query.awaitTermination(timeout_s), f"the query did not finish in {timeout_s} s"
    except StreamingQueryException:  # the caller looks at query.exception()
        pass
    finally:
        query.stop()
    return query


def visible(endpoint, topic):
    with Admin(endpoint) as admin:
        return sum(q.max_offset for q in admin.offsets([topic])[topic])


def read_back(spark, endpoint, topic, expected_rows):
    wait_indexed(endpoint, topic, expected_rows)
    return source(spark, endpoint, topic=topic, includeProperties=True).collect()


def bodies_of(rows):
    return sorted(bytes(r.body) for r in rows)


def rows_df(spark, n, partitions=2, extra=""):
    return spark.range(0, n, 1, partitions).selectExpr(f"cast(concat('row-', id) as binary) as body{extra}")


@pytest.mark.compat
@pytest.mark.parametrize("codec", ["arrow", "rmq"])
def test_batch_write_then_read_back_equal_rows(spark, endpoint, topic_name, codec):
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    df = spark.range(0, 3000, 1, 3).selectExpr(
        "cast(concat('row-', id) as binary) as body", "concat('k', id % 50) as keys",
        "if(id % 3 = 0, 'TagA', 'TagB') as tags", "map('n', cast(id as string)) as properties")
    write(df, endpoint, topic=topic_name, codec=codec, compression="zstd" if codec == "rmq" else "lz4")
    back = read_back(spark, endpoint, topic_name, 3000)
    assert sorted((bytes(r.body), r.keys, r.tags, r.properties["n"]) for r in back) == sorted(
        (f"row-{i}".encode(), f"k{i % 50}", "TagA" if i % 3 == 0 else "TagB", str(i)) for i in range(3000))
    # hash: the same keys, the same queue
    assert all(len({r.queue_id for r in back if r.keys == k}) == 1 for k in {r.keys for r in back})


def test_batch_write_by_topic_and_queue_columns_with_string_bodies(spark, endpoint, topic_name):
    admin = Admin(endpoint)
    admin.create_topic(topic_name + "a", 3, "BatchCQ")
    admin.create_topic(topic_name + "b", 2, "SimpleCQ")
    df = spark.range(0, 600, 1, 2).selectExpr(
        "concat('s', id) as body", f"if(id % 2 = 0, '{topic_name}a', '{topic_name}b') as topic",
        "cast(id % 2 as int) as queue_id")
    write(df, endpoint)  # topic and queue from the columns (queueSelector column by default)
    for suffix, queue_id in (("a", 0), ("b", 1)):
        back = read_back(spark, endpoint, topic_name + suffix, 300)
        assert {r.queue_id for r in back} == {queue_id}
        assert bodies_of(back) == sorted(f"s{i}".encode() for i in range(queue_id, 600, 2))
        # a task's rows of one queue keep their order
        offsets = {bytes(r.body): r.queue_offset for r in back}
        for task_rows in (range(queue_id, 300, 2), range(300 + queue_id, 600, 2)):
            written = [offsets[f"s{i}".encode()] for i in task_rows]
            assert written == sorted(written)


@pytest.mark.parametrize("codec", ["arrow", "rmq"])
def test_stream_write_then_read_back_and_every_micro_batch_is_recorded(spark, endpoint, topic_name, tmp_path, codec):
    admin = Admin(endpoint)
    admin.create_topic(topic_name, 3, "BatchCQ")
    admin.create_topic(topic_name + "-out", 4, "BatchCQ")
    sent = sorted(b for q in range(3) for b in produce(endpoint, topic_name, q, 200, batch=25))
    wait_indexed(endpoint, topic_name, 600)
    stream = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest",
                    maxRecordsPerTrigger=250)
    query = write_stream(stream.select("body", "keys", "tags"), endpoint, tmp_path / "checkpoint",
                         topic=topic_name + "-out", codec=codec)
    assert query.exception() is None
    batch_ids = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    assert len(batch_ids) == 3
    back = read_back(spark, endpoint, topic_name + "-out", 600)
    assert bodies_of(back) == sent and {r.tags for r in back} == {"TagA"}
    with Transactions(endpoint) as txns:  # the sink id is the query's id, kept in the checkpoint
        assert all(txns.is_committed(f"spark-{query.id}", batch_id) for batch_id in batch_ids)


def test_at_least_once_writes_without_transactions(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    write(rows_df(spark, 500), endpoint, topic=topic_name, deliveryGuarantee="atLeastOnce",
          queueSelector="roundRobin")
    assert bodies_of(read_back(spark, endpoint, topic_name, 500)) == sorted(f"row-{i}".encode() for i in range(500))
    with Transactions(endpoint) as txns:
        assert not txns.list()


def _fail_first_attempt_once_prepared(endpoint, partition, marker):
    """A mapInArrow function: on the first attempt of ``partition`` it passes one batch on,
    waits until the sink has prepared rows of it (noting how many in ``marker``), then fails
    the task."""
    def run(batches):
        import time

        from pyspark import TaskContext

        from rmq_spark import Transactions

        context = TaskContext.get()
        failing = context.partitionId() == partition and context.attemptNumber() == 0
        for index, batch in enumerate(batches):
            if failing and index == 1:
                deadline = time.monotonic() + 60
                with Transactions(endpoint) as txns:
                    while not any(t.message_count for t in txns.list()) and time.monotonic() < deadline:
                        time.sleep(0.05)
                    prepared = sum(t.message_count for t in txns.list())
                with open(marker, "w") as out:
                    out.write(str(prepared))
                raise RuntimeError(f"task failed on purpose after the sink prepared {prepared} rows")
            yield batch
    return run


def test_a_task_failing_mid_write_is_retried_and_its_rows_appear_once(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    marker = tmp_path / "prepared-before-the-failure"
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # the sink gets rows before the failure
    try:
        df = rows_df(spark, 2000).mapInArrow(_fail_first_attempt_once_prepared(endpoint, 1, str(marker)),
                                             "body binary")
        write(df, endpoint, topic=topic_name, batchMaxBytes="1k")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert int(marker.read_text()) > 0  # the failed attempt had prepared rows
    assert bodies_of(read_back(spark, endpoint, topic_name, 2000)) == sorted(f"row-{i}".encode() for i in range(2000))
    assert visible(endpoint, topic_name) == 2000
    with Transactions(endpoint) as txns:  # at most the failed attempt's is open (it rolls back itself, or times out)
        assert all(".p1.a0." in t.transaction_id for t in txns.list())


def _always_fail(partition):
    def run(batches):
        from pyspark import TaskContext

        for batch in batches:
            if TaskContext.get().partitionId() == partition:
                raise RuntimeError("task failed on purpose")
            yield batch
    return run


def test_an_aborted_write_leaves_nothing_visible(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    df = rows_df(spark, 1000, partitions=3).mapInArrow(_always_fail(2), "body binary")
    with pytest.raises(Exception, match="task failed on purpose"):
        write(df, endpoint, topic=topic_name)
    admin = Admin(endpoint)
    admin.create_topic(topic_name + "-in", 1, "BatchCQ")
    produce(endpoint, topic_name + "-in", 0, 300, batch=50)
    wait_indexed(endpoint, topic_name + "-in", 300)
    stream = source(spark, endpoint, stream=True, topic=topic_name + "-in", startingOffsets="earliest",
                    maxPartitions=1, minPartitions=1)
    query = write_stream(stream.select("body").repartition(3).mapInArrow(_always_fail(2), "body binary"),
                         endpoint, tmp_path / "checkpoint", topic=topic_name)
    assert "task failed on purpose" in str(query.exception())
    assert visible(endpoint, topic_name) == 0
    # Tasks still running when the job failed may leave their transaction open (invisible) for
    # the broker's timeout; what abort() gets, it rolls back:
    writer = _stream_writer(endpoint, topic=topic_name, sinkId="abort-sink")
    messages = [writer.write(_task_rows(0, 50)), None]
    writer.abort(messages, 3)
    with Transactions(endpoint) as txns:
        assert not [t for t in txns.list() if t.transaction_id == messages[0].transaction.transaction_id]
        with pytest.raises(Exception, match="rolled back"):
            txns.commit([messages[0].transaction], sink_id="abort-sink", batch_id=3)
    assert visible(endpoint, topic_name) == 0


def test_a_micro_batch_replayed_after_a_restart_writes_nothing_twice(spark, endpoint, topic_name, tmp_path):
    admin = Admin(endpoint)
    admin.create_topic(topic_name, 2, "BatchCQ")
    admin.create_topic(topic_name + "-out", 2, "BatchCQ")
    sent = sorted(b for q in range(2) for b in produce(endpoint, topic_name, q, 150, batch=30))
    wait_indexed(endpoint, topic_name, 300)
    checkpoint = tmp_path / "checkpoint"

    def run():
        stream = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest",
                        maxRecordsPerTrigger=100)
        return write_stream(stream.select("body"), endpoint, checkpoint, topic=topic_name + "-out")

    first = run()
    assert first.exception() is None
    last = max(p["batchId"] for p in first.recentProgress)
    wait_for(lambda: visible(endpoint, topic_name + "-out") == 300, "the first run's rows visible")
    forget_commit(checkpoint, last)
    second = run()
    assert second.exception() is None
    replayed = [p for p in second.recentProgress if p["batchId"] == last]
    assert replayed and replayed[0]["numInputRows"] > 0  # Spark did run the micro-batch again
    assert second.id == first.id
    assert visible(endpoint, topic_name + "-out") == 300
    assert bodies_of(read_back(spark, endpoint, topic_name + "-out", 300)) == sent


def _stream_writer(endpoint, **options):
    data_source = RocketMQBatchDataSource({"endpoint": endpoint, **options})
    return data_source.streamWriter(BODY_SCHEMA, False)


def _task_rows(start, n):
    return iter([pa.record_batch({"body": pa.array([b"m%05d" % i for i in range(start, start + n)], pa.binary())})])


def test_a_broker_restart_between_prepare_and_commit_loses_nothing(tmp_path):
    data_dir = tmp_path / "data"
    broker = Broker(data_dir, "127.0.0.1", 0)
    broker.start()
    port = broker.port
    try:
        Admin(broker.endpoint).create_topic("t", 2, "BatchCQ")
        writer = _stream_writer(broker.endpoint, topic="t", sinkId="restart-sink")
        messages = [writer.write(_task_rows(0, 500)), writer.write(_task_rows(500, 300)), None]
        assert visible(broker.endpoint, "t") == 0  # prepared, invisible
    finally:
        broker.stop(grace=1.0)
    broker = Broker(data_dir, "127.0.0.1", port)
    broker.start()
    try:
        # the driver's commit runs in a fresh worker: a new writer of the same options
        committer = _stream_writer(broker.endpoint, topic="t", sinkId="restart-sink")
        committer.commit(messages, 7)
        wait_for(lambda: visible(broker.endpoint, "t") == 800, "the committed rows visible")
        # the same batch id again, with the rows written anew (a replay): nothing more
        replay = [committer.write(_task_rows(0, 500)), committer.write(_task_rows(500, 300))]
        committer.commit(replay, 7)
        committer.commit(messages, 7)
        assert visible(broker.endpoint, "t") == 800
        with Transactions(broker.endpoint) as txns:
            assert txns.is_committed("restart-sink", 7) and not txns.list()  # the replay's were rolled back
    finally:
        broker.stop(grace=1.0)


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("columns, words", [
    (["cast(id as string) as value"], ["no 'body' column", "Kafka sink calls it 'value'"]),
    (["id as body"], ["column 'body' is bigint", "binary or string"]),
    (["cast(id as string) as body", "cast(id as string) as key"], ["column 'key' is not one", "'keys' here"]),
    (["cast(id as string) as body", "map('a', 1) as properties"], ["column 'properties' is map<string,int>"]),
    (["cast(id as string) as body", "'x' as queue_id"], ["column 'queue_id' is string", "integer"]),
    (["cast(id as string) as body", "array(1) as tags"], ["column 'tags' is array<int>", "string"]),
])
@pytest.mark.compat
def test_bad_columns_fail_before_anything_is_written(spark, endpoint, topic_name, columns, words):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    with pytest.raises(Exception) as failure:
        write(spark.range(10).selectExpr(*columns), endpoint, topic=topic_name)
    for word in words:
        assert word in str(failure.value)
    assert visible(endpoint, topic_name) == 0


@pytest.mark.parametrize("options, words", [
    ({}, ["name the topic to write to"]),
    ({"topic": "{topic}", "queueSelector": "column"}, ["queueSelector=column", "no"]),
    ({"topic": "{topic}", "compression": "gzip"}, ["compression='gzip'", "none, lz4, zstd"]),
    ({"topic": "{topic}", "deliveryGuarantee": "maybe"}, ["deliveryGuarantee='maybe'", "exactlyOnce, atLeastOnce"]),
    ({"topic": "{topic}", "batchMaxBytes": "lots"}, ["batchMaxBytes='lots'", "512k"]),
    ({"topic": "{topic}", "batchMaxBytes": "1m", "totalBatchMaxBytes": "512k"}, ["totalBatchMaxBytes=524288 is below"]),
    ({"topic": "{topic}", "startingOffsets": "earliest"}, ["startingOffsets is an option of reads"]),
    ({"topic": "{topic}", "partitoin": "1"}, ["unknown option 'partitoin' for the rocketmq-batch sink"]),
    ({"topic": "{topic}", "batchId": "3"}, ["batchId numbers a write of a sink: set sinkId too"]),
    ({"topic": "{topic}", "sinkId": "s1", "batchId": "-1"}, ["batchId='-1'", "a whole number"]),
    ({"topic": "{topic}", "sinkId": "bad id!"}, ["sinkId='bad id!'"]),
    ({"topic": "{topic}", "endpoint": "nowhere"}, ["option endpoint"]),
])
def test_bad_options_fail_before_anything_is_written(spark, endpoint, topic_name, options, words):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    writer = rows_df(spark, 10).write.format("rocketmq-batch").mode("append")
    for name, value in {"endpoint": endpoint, **options}.items():
        writer = writer.option(name, value.replace("{topic}", topic_name))
    with pytest.raises(Exception) as failure:
        writer.save()
    for word in words:
        assert word in str(failure.value)
    assert visible(endpoint, topic_name) == 0


def test_overwrite_and_topics_in_a_column_that_cannot_be_written_write_nothing(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    with pytest.raises(Exception, match="cannot be overwritten: use mode\\('append'\\)"):
        rows_df(spark, 10).write.format("rocketmq-batch").mode("overwrite").option("endpoint", endpoint) \
            .option("topic", topic_name).save()
    df = spark.range(0, 100, 1, 2).selectExpr(  # a name no topic may have: no send creates it
        "cast(id as string) as body", f"if(id < 90, '{topic_name}', 'no such topic') as topic")
    with pytest.raises(Exception, match="no such topic"):
        write(df, endpoint)
    assert visible(endpoint, topic_name) == 0  # the rows of the good topic were rolled back too


def test_a_write_to_a_topic_that_does_not_exist_creates_it_where_the_broker_allows(spark, endpoint, topic_name,
                                                                                    tmp_path):
    write(rows_df(spark, 30), endpoint, topic=topic_name)  # the broker's default: RocketMQ's autoCreateTopicEnable
    info, _queues = Admin(endpoint).describe_topic(topic_name)
    assert (info.queue_count, info.queue_type.value) == (8, "BatchCQ")
    assert bodies_of(read_back(spark, endpoint, topic_name, 30)) == sorted(f"row-{i}".encode() for i in range(30))
    with broker_sim.embedded(tmp_path / "strict", auto_create_topics=None) as strict:
        with pytest.raises(Exception) as refused:
            write(rows_df(spark, 10), strict, topic=topic_name)
        sentence = (f"topic '{topic_name}' does not exist on the broker {strict}, which creates no topic on a "
                    "first send (autoCreateTopicEnable=false): create it first (rmq-admin --endpoint")
        text = str(refused.value)
        assert sentence in text and text.count(sentence) == 1, text[-3000:]
        assert pyspark_rocketmq_batch.lead_sentence(refused.value).startswith(f"rocketmq-batch: {sentence}")


def test_a_stream_checkpointed_through_the_session_commits_under_its_query_id(spark, endpoint, topic_name,
                                                                             tmp_path):
    """The checkpoint set only through spark.sql.streaming.checkpointLocation (a Python sink gets
    no option then): the write tasks carry the query's id, which names the sink's commits."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1, "BatchCQ")
        admin.create_topic(topic_name + "-out", 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 50)
    wait_indexed(endpoint, topic_name, 50)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "checkpoints"))
    try:
        query = (source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest").select("body")
                 .writeStream.format("rocketmq-batch").option("endpoint", endpoint)
                 .option("topic", topic_name + "-out").trigger(availableNow=True).start())
        assert query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert query.exception() is None
    assert visible(endpoint, topic_name + "-out") == 50
    with Transactions(endpoint) as txns:
        assert txns.is_committed(f"spark-{query.id}", 0)


def test_sink_options_are_parsed_and_documented():
    opts = parse_sink_options({"ENDPOINT": "h:1", "topic": " t ", "queueselector": "ROUNDROBIN",
                               "batchMaxBytes": "1m", "totalBatchMaxBytes": "8m", "batchMaxDelayMs": "5",
                               "compression": "ZSTD", "codec": "rmq", "deliveryGuarantee": "atleastonce",
                               "checkpointLocation": "/cp", "queryName": "q"})
    assert (opts.topic, opts.queue_selector, opts.batch_max_bytes, opts.total_batch_max_bytes) == \
        ("t", "roundRobin", 1 << 20, 8 << 20)
    assert (opts.batch_max_delay_ms, opts.compression, opts.codec, opts.exactly_once) == (5, "zstd", "rmq", False)
    defaults = parse_sink_options({"endpoint": "h:1"})
    assert (defaults.compression, defaults.codec, defaults.exactly_once, defaults.queue_selector) == \
        ("lz4", "arrow", True, None)
    with pytest.raises(ConfigError, match="sinkId names the commits of deliveryGuarantee=exactlyOnce"):
        parse_sink_options({"endpoint": "h:1", "sinkId": "s", "deliveryGuarantee": "atLeastOnce"})
    doc = RocketMQBatchDataSource.__doc__
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for name in SINK_OPTION_NAMES:
        assert f"    {name} :" in doc, f"{name} is not in the data source's docstring"
        assert f"| `{name}` |" in readme, f"{name} is not in the README's sink options table"


def test_the_sink_id_comes_from_the_checkpoint(tmp_path):
    from rmq_spark.spark.sink import stream_sink_id
    (tmp_path / "metadata").write_text(json.dumps({"id": "0a1b"}) + "\n")
    assert stream_sink_id(parse_sink_options({"endpoint": "h:1", "checkpointLocation": str(tmp_path)})) == \
        "spark-0a1b"
    assert stream_sink_id(parse_sink_options({"endpoint": "h:1", "checkpointLocation": f"file://{tmp_path}"})) == \
        "spark-0a1b"
    assert stream_sink_id(parse_sink_options({"endpoint": "h:1", "sinkId": "mine",
                                              "checkpointLocation": str(tmp_path)})) == "mine"
    with pytest.raises(ConfigError, match="not on the local file system"):
        stream_sink_id(parse_sink_options({"endpoint": "h:1", "checkpointLocation": "s3a://bucket/cp"}))
    with pytest.raises(ConfigError, match="cannot read the query id"):
        stream_sink_id(parse_sink_options({"endpoint": "h:1", "checkpointLocation": str(tmp_path / "none")}))


def test_a_write_through_name_servers_is_checked_by_its_transport_at_load():
    """The rule is the remoting transport's (``write_form``, ``supports_transactions``); the
    sentences are the options' own, naming the option."""
    ns = {"nameServer": "127.0.0.1:9876", "topic": "t"}
    defaults = parse_sink_options(ns)
    assert (defaults.codec, defaults.compression, defaults.exactly_once) == ("rmq", "none", False)
    for name, value, needed in (("codec", "ARROW", "rmq"), ("compression", "zstd", "none")):
        with pytest.raises(ConfigError) as refused:
            parse_sink_options({**ns, name: value})
        assert str(refused.value) == (
            f"option {name}={value!r}: through nameServer a batch is RocketMQ's MessageBatch, uncompressed, which "
            f"RocketMQ's brokers and clients read: drop the option (or set {name}={needed})")
    with pytest.raises(ConfigError, match="^option codec='arrow'"):  # exactly once or not
        parse_sink_options({**ns, "deliveryGuarantee": "exactlyOnce", "codec": "arrow"})
    with pytest.raises(ConfigError, match="^deliveryGuarantee=exactlyOnce through nameServer commits RocketMQ's "
                                          "transactional messages one at a time.*checkpointLocation.*sinkId"):
        parse_sink_options({**ns, "deliveryGuarantee": "exactlyOnce"}).check_batch_write()
    parse_sink_options({**ns, "deliveryGuarantee": "exactlyOnce", "sinkId": "s", "checkpointLocation": "/d"}) \
        .check_batch_write()  # a decision a rerun finds
    with pytest.raises(ConfigError, match="^option batchId numbers a df.write"):
        parse_sink_options({"endpoint": "h:1", "sinkId": "s", "batchId": "3"}).check_stream_write()
    assert parse_sink_options({**ns, "codec": "rmq", "compression": "NONE"}).codec == "rmq"
