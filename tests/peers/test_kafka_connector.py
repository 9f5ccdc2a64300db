"""Spark's own Kafka connector writes and reads a real Kafka broker from the session our other
Spark tests use: the peer the benchmarks put beside rocketmq-batch is real."""

import pytest

pytestmark = pytest.mark.peers

ROWS = 2000


def test_spark_kafka_connector_writes_and_reads_back_every_row(spark, kafka):
    kafka.create_topic("spark-roundtrip", 4)
    rows = spark.range(ROWS).selectExpr("CAST(id AS STRING) AS key", "CAST(id * 7 AS STRING) AS value")
    rows.write.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("topic", "spark-roundtrip").save()

    batch = spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("subscribe", "spark-roundtrip").load()
    got = {(r.key.decode(), r.value.decode()) for r in batch.select("key", "value").collect()}
    assert got == {(str(i), str(i * 7)) for i in range(ROWS)}
    assert {r.partition for r in batch.select("partition").distinct().collect()} == {0, 1, 2, 3}

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", "spark-roundtrip").option("startingOffsets", "earliest").load()
              .writeStream.format("memory").queryName("kafka_roundtrip").trigger(availableNow=True).start())
    try:
        assert stream.awaitTermination(180), "the availableNow stream did not finish in 180 s"
    finally:
        stream.stop()
    streamed = spark.sql("SELECT CAST(key AS STRING) k, CAST(value AS STRING) v FROM kafka_roundtrip").collect()
    assert sorted((int(r.k), int(r.v)) for r in streamed) == [(i, i * 7) for i in range(ROWS)]
