"""A job written for Spark's Kafka connector runs on rocketmq-batch by changing the format's name
(and the broker's address): with schema=kafka the reads have the Kafka source's columns and take
its option names, and the writes take the Kafka sink's columns."""

import pytest
from pyspark.sql import functions as F

from rmq_spark import Admin, ConfigError, Message, Producer
from rmq_spark.spark.options import parse_options, parse_sink_options
from spark_helpers import run_available_now, source
from support.sdk import wait_indexed

KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
                "timestampType:int,headers:array<struct<key:string,value:binary>>>")


def kafka_job_read(spark, endpoint, topic):
    """The read half of a Kafka connector job; only the format and the address changed."""
    return (spark.readStream.format("rocketmq-batch").option("endpoint", endpoint).option("schema", "kafka")
            .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 4)
            .option("failOnDataLoss", "true").option("includeHeaders", "true").load())


def test_a_kafka_connector_job_reads_with_kafkas_columns_and_options(spark, endpoint, topic_name):
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic(topic_name, 2)
        for i in range(10):
            producer.send(Message(topic_name, f"v{i}".encode(), keys=f"k{i}" if i % 2 else None, queue_id=i % 2,
                                  properties={"trace": f"t{i}"}))
    wait_indexed(endpoint, topic_name, 10)
    df = kafka_job_read(spark, endpoint, topic_name)
    assert df.schema.simpleString() == KAFKA_SCHEMA
    rows, progress = run_available_now(df.selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "topic", "partition", "offset", "timestamp",
        "timestampType", "headers"))
    assert len(progress) >= 3  # maxOffsetsPerTrigger=4 cut the 10 rows into micro-batches
    by_value = {r.value: r for r in rows}
    assert sorted(by_value) == sorted(f"v{i}" for i in range(10))
    for i in range(10):
        row = by_value[f"v{i}"]
        assert (row.key, row.topic, row.partition, row.offset) == (f"k{i}" if i % 2 else None, topic_name, i % 2,
                                                                   i // 2)
        assert row.timestamp is not None and row.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("trace", f"t{i}".encode())]


def test_our_kafka_schema_is_the_kafka_connectors(spark, endpoint, topic_name):
    """The same schema Spark's Kafka connector declares (when its jar is on the session)."""
    try:
        theirs = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
                  .option("subscribe", "t").option("includeHeaders", "true").load().schema)
    except Exception as err:  # noqa: BLE001 - the connector's jar comes with `make peers`
        pytest.skip(f"Spark's Kafka connector is not on this session ({type(err).__name__})")
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1)
    ours = source(spark, endpoint, topic=topic_name, schema="kafka", includeHeaders=True).schema
    assert ours.simpleString() == theirs.simpleString()


@pytest.mark.compat
def test_a_kafka_connector_job_writes_kafkas_columns(spark, endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2)
    rows = spark.range(6).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.array(F.struct(F.lit("trace").alias("key"), F.lit(b"t").alias("value"))).alias("headers"),
        (F.col("id") % 2).cast("int").alias("partition"))
    (rows.write.format("rocketmq-batch").option("endpoint", endpoint).option("schema", "kafka")
     .option("topic", topic_name).mode("append").save())
    back = source(spark, endpoint, topic=topic_name, includeProperties=True).collect()
    assert sorted((r.keys, bytes(r.body), r.queue_id, r.properties["trace"]) for r in back) == [
        (f"k{i}", f"v{i}".encode(), i % 2, "t") for i in range(6)]
    # and what a Kafka-schema read gives can be written back as it is
    copy = f"{topic_name}-copy"
    with Admin(endpoint) as admin:
        admin.create_topic(copy, 2)
    read = source(spark, endpoint, topic=topic_name, schema="kafka", includeHeaders=True)
    read.write.format("rocketmq-batch").option("endpoint", endpoint).option("schema", "kafka").option(
        "topic", copy).mode("append").save()
    assert sorted(bytes(r.value) for r in source(spark, endpoint, topic=copy, schema="kafka").collect()) == sorted(
        f"v{i}".encode() for i in range(6))


def test_a_key_that_is_not_text_is_refused_with_a_sentence(spark, endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1)
    rows = spark.createDataFrame([(b"\xff\xfe", b"v")], "key binary, value binary")
    with pytest.raises(Exception, match="column 'key' holds bytes that are not UTF-8"):
        (rows.write.format("rocketmq-batch").option("endpoint", endpoint).option("schema", "kafka")
         .option("topic", topic_name).mode("append").save())


def test_kafkas_option_names_are_taken_under_schema_kafka_only():
    base = {"endpoint": "127.0.0.1:1", "schema": "kafka"}
    options = parse_options({**base, "subscribe": "a,b", "maxoffsetspertrigger": "7", "includeheaders": "true"})
    assert (options.subscription.topics, options.max_records_per_trigger, options.include_properties) == (
        ("a", "b"), 7, True)
    with pytest.raises(ConfigError, match="here it is topics, or set schema=kafka"):
        parse_options({"endpoint": "127.0.0.1:1", "subscribe": "a"})
    with pytest.raises(ConfigError, match="options subscribe and topics are the same option"):
        parse_options({**base, "subscribe": "a", "topics": "a"})
    with pytest.raises(ConfigError, match="unknown option 'kafka.bootstrap.servers'.*here it is endpoint"):
        parse_options({**base, "topic": "a", "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(ConfigError, match="option schema='avro': use rocketmq"):
        parse_options({**base, "topic": "a", "schema": "avro"})
    assert parse_sink_options({"endpoint": "127.0.0.1:1", "schema": "KAFKA"}).schema == "kafka"
