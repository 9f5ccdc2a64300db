"""Read-your-writes for Spark (issue 29, point 5; a fresh-clone run of test_backfill_batch saw
1,500 of 3,000 rows right after df.write): once df.write returns, or a streaming query's
micro-batch has committed, the topic's offsets (what a read started next plans from) count
every row, while the broker's dispatcher lags behind the writers (``LaggingDispatch``)."""

from __future__ import annotations

import pytest

from rmq_spark import Admin
from spark_helpers import source
from support.lagging_dispatch import LaggingDispatch

ROWS = 3000


def offsets_sum(endpoint: str, topic: str) -> int:
    with Admin(endpoint) as admin:
        return sum(q.max_offset for q in admin.offsets([topic])[topic])


def rows_df(spark, n: int):
    return spark.range(0, n, 1, 3).selectExpr("cast(concat('row-', id) as binary) as body")


@pytest.mark.parametrize("guarantee", ["exactlyOnce", "atLeastOnce"])
def test_offsets_count_every_row_once_df_write_returns(spark, doors_broker, topic_name, guarantee):
    endpoint = doors_broker.endpoint
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    with LaggingDispatch(doors_broker.core.store) as lag:
        (rows_df(spark, ROWS).write.format("rocketmq-batch").mode("append").option("endpoint", endpoint)
         .option("topic", topic_name).option("deliveryGuarantee", guarantee).save())
        assert lag.read(lambda: offsets_sum(endpoint, topic_name)) == ROWS
    assert source(spark, endpoint, topic=topic_name).count() == ROWS


def test_offsets_count_every_row_once_a_stream_s_micro_batch_committed(spark, doors_broker, topic_name, tmp_path):
    """One micro-batch: the sink checks its topic (and so its offsets) before each, which would
    wait for the one before it while the dispatcher is held."""
    endpoint = doors_broker.endpoint
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    rows_df(spark, ROWS).write.parquet(str(tmp_path / "in"))
    stream = spark.readStream.schema("body binary").parquet(str(tmp_path / "in"))
    with LaggingDispatch(doors_broker.core.store) as lag:
        query = (stream.writeStream.format("rocketmq-batch").option("endpoint", endpoint).option("topic", topic_name)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120), "the query did not finish in 120 s"
        finally:
            query.stop()
        assert query.exception() is None
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [ROWS]
        assert lag.read(lambda: offsets_sum(endpoint, topic_name)) == ROWS
