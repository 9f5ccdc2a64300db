"""spark.readStream.format("rocketmq-batch") against a real broker: read limits to the row,
query progress, foreachBatch and consumer group commits, a restart from the checkpoint while
producers write (exactly once), new topics during a query, failOnDataLoss both ways, and the
stream reader's admission control driven directly with its own clock."""

import threading
import time

import pytest

import broker_sim
from broker_sim.store import QueueType
from broker_sim.store.paths import StorePaths
from rmq_spark import Admin, DataLossError
from rmq_spark.spark import offsets_behind_latest
from rmq_spark.spark.compat import ReadAllAvailable, ReadMaxRows, ReadMinRows
from rmq_spark.spark.offsets import to_json
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import RocketMQBatchStreamReader
from spark_helpers import keyed, produce, run_available_now, source, wait_for
from support.clock import Clock
from support.sdk import wait_indexed


def test_max_records_per_trigger_is_honoured_to_the_row(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    bodies = {q: produce(endpoint, topic_name, q, n, batch=9) for q, n in enumerate([100, 40, 7, 0])}
    wait_indexed(endpoint, topic_name, 147)
    df = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest", maxRecordsPerTrigger=30)
    rows, progress = run_available_now(df, tmp_path / "checkpoint")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [30, 30, 30, 30, 27]
    assert keyed(rows) == {(topic_name, q, o): b for q, bs in bodies.items() for o, b in enumerate(bs)}
    assert len(rows) == 147
    latest = progress[-1]["sources"][0]["latestOffset"]  # reportLatestOffset
    assert latest == '{"%s": {"0": 100, "1": 40, "2": 7, "3": 0}}' % topic_name
    # How far behind the broker each micro-batch left the query, in the Kafka connector's names.
    first = next(p for p in progress if p["numInputRows"])
    assert offsets_behind_latest(first)["avgOffsetsBehindLatest"] * 4 == 147 - 30
    assert offsets_behind_latest(first)["maxOffsetsBehindLatest"] >= (147 - 30) / 4
    assert offsets_behind_latest(progress[-1]) == {"minOffsetsBehindLatest": 0, "avgOffsetsBehindLatest": 0.0,
                                                   "maxOffsetsBehindLatest": 0}


def test_foreach_batch_and_consumer_group_offsets(spark, endpoint, topic_name, tmp_path):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    produce(endpoint, topic_name, 0, 25)
    produce(endpoint, topic_name, 1, 5)
    wait_indexed(endpoint, topic_name, 30)
    seen = []
    df = source(spark, endpoint, stream=True, topic=topic_name, startingOffsets="earliest", maxRecordsPerTrigger=12,
                consumerGroup="spark-group")
    query = (df.writeStream.foreachBatch(lambda batch, batch_id: seen.append((batch_id, batch.count())))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert [n for _, n in seen if n] == [12, 12, 6]

    def committed():
        with Admin(endpoint) as admin:
            return {(o.topic, o.queue_id): o.offset for o in admin.group_offsets("spark-group", [topic_name])}

    # Spark commits a micro-batch's source offsets when it starts the next one; the source also
    # commits at the start of each trigger, so the last micro-batch of the run is committed too.
    assert committed() == {(topic_name, 0): 25, (topic_name, 1): 5}


def test_restart_from_the_checkpoint_while_producers_write_sees_each_message_once(spark, endpoint, topic_name,
                                                                                   tmp_path):
    Admin(endpoint).create_topic(topic_name, 4, "BatchCQ")
    sent = {}

    def producer():
        for round_ in range(30):
            for q in range(4):
                for o, body in enumerate(produce(endpoint, topic_name, q, 7, batch=7, start=round_ * 7)):
                    sent[(topic_name, q, round_ * 7 + o)] = body

    writing = threading.Thread(target=producer)
    writing.start()
    try:
        options = dict(topic=topic_name, startingOffsets="earliest", maxRecordsPerTrigger=50)
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        first = (source(spark, endpoint, stream=True, **options).writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint)).start())
        try:
            wait_for(lambda: sum(p["numInputRows"] for p in first.recentProgress) >= 100, "two micro-batches")
        finally:
            first.stop()  # while the producer is still writing
    finally:
        writing.join(timeout=120)
    assert not writing.is_alive()
    wait_indexed(endpoint, topic_name, 840)
    second = (source(spark, endpoint, stream=True, **options).writeStream.format("parquet")
              .option("path", str(out)).option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True).start())
    assert second.awaitTermination(120) and second.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 840, "a message was lost or seen twice across the restart"
    assert keyed(rows) == sent


def test_new_topics_matching_the_pattern_are_read_from_their_start(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(f"{topic_name}-a", 2, "BatchCQ")
    produce(endpoint, f"{topic_name}-a", 0, 10)
    wait_indexed(endpoint, f"{topic_name}-a", 10)
    df = source(spark, endpoint, stream=True, topicPattern=f"{topic_name}-.*", startingOffsets="latest")
    query = df.writeStream.format("memory").queryName("growing").start()
    try:
        wait_for(lambda: query.lastProgress is not None, "the first micro-batch")
        Admin(endpoint).create_topic(f"{topic_name}-b", 3, "BatchCQ")
        produce(endpoint, f"{topic_name}-b", 2, 15)  # a new topic: read from offset 0
        produce(endpoint, f"{topic_name}-a", 1, 4)  # a queue that was empty at the start
        wait_for(lambda: spark.table("growing").count() >= 19, "the new messages")
        rows = spark.table("growing").collect()
    finally:
        query.stop()
        spark.catalog.dropTempView("growing")
    assert sorted((r.topic, r.queue_id, r.queue_offset) for r in rows) == sorted(
        [(f"{topic_name}-b", 2, o) for o in range(15)] + [(f"{topic_name}-a", 1, o) for o in range(4)])


def test_fail_on_data_loss_both_ways(spark, endpoint, topic_name, tmp_path):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2, "BatchCQ")
        produce(endpoint, topic_name, 0, 20)
        wait_indexed(endpoint, topic_name, 20)
        checkpoint = tmp_path / "checkpoint"
        stream = dict(stream=True, topic=topic_name, startingOffsets="earliest")
        rows, _ = run_available_now(source(spark, endpoint, **stream), checkpoint)
        assert len(rows) == 20
        admin.delete_topic(topic_name)  # then created again: its offsets start over
        admin.create_topic(topic_name, 2, "BatchCQ")
        produce(endpoint, topic_name, 0, 5)
        wait_indexed(endpoint, topic_name, 5)
    with pytest.raises(Exception, match=r"data loss: topic '.*' queue 0 ends at 5, before the checkpointed offset 20"
                                        r".*failOnDataLoss to false"):
        run_available_now(source(spark, endpoint, **stream), checkpoint)
    rows, _ = run_available_now(source(spark, endpoint, failOnDataLoss=False, **stream), checkpoint)
    assert sorted(r.queue_offset for r in rows) == list(range(5))  # the new messages, read from the first
    with Admin(endpoint) as admin:
        admin.delete_topic(topic_name)
    pattern = dict(stream=True, topicPattern=topic_name, startingOffsets="earliest")
    with pytest.raises(Exception, match="data loss: topic .* queue 0 is gone"):
        run_available_now(source(spark, endpoint, **pattern), checkpoint)
    rows, _ = run_available_now(source(spark, endpoint, failOnDataLoss=False, **pattern), checkpoint)
    assert rows == []


def stream_reader(endpoint, topic, **options):
    clock = Clock(1_000)
    opts = parse_options({"endpoint": endpoint, "topic": topic, "startingOffsets": "earliest", **options})
    return RocketMQBatchStreamReader(opts, now_ms=clock), clock


def test_min_records_per_trigger_waits_up_to_max_trigger_delay(endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    reader, clock = stream_reader(endpoint, topic_name, minRecordsPerTrigger=10, maxRecordsPerTrigger=12,
                                  maxTriggerDelay="1m")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(12)
        start = reader.initialOffset()
        produce(endpoint, topic_name, 0, 6)
        wait_indexed(endpoint, topic_name, 6)
        assert reader.latestOffset(start, ReadMaxRows(12)) == start  # 6 < 10: held
        produce(endpoint, topic_name, 1, 20)
        wait_indexed(endpoint, topic_name, 26)
        end = reader.latestOffset(start, ReadMaxRows(12))
        assert sum(end[topic_name].values()) == 12  # enough: a trigger of at most 12
        clock.now += 1_000
        rest = reader.latestOffset(end, ReadMaxRows(12))
        assert sum(rest[topic_name].values()) == 24
        clock.now += 59_000  # 2 records wait, fewer than 10, until a minute has passed since the last trigger
        assert reader.latestOffset(rest, ReadMaxRows(12)) == rest
        clock.now += 1_000
        assert sum(reader.latestOffset(rest, ReadMaxRows(12))[topic_name].values()) == 26
        assert sum(reader.latestOffset(start, ReadAllAvailable())[topic_name].values()) == 26  # Trigger.Once
    finally:
        reader.stop()
    only_min, _ = stream_reader(endpoint, topic_name, minRecordsPerTrigger=5)
    assert only_min.getDefaultReadLimit() == ReadMinRows(5)
    only_min.stop()


def test_a_trigger_that_finds_nothing_waits_at_the_broker_until_messages_land(endpoint, topic_name):
    """waitForMessages: latestOffset with nothing new is a long poll, answered as the messages are
    stored (the 20 s it may wait are not waited), so the micro-batch starts then."""
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    reader, _ = stream_reader(endpoint, topic_name, waitForMessages="20s")
    idle, _ = stream_reader(endpoint, topic_name, waitForMessages="0")
    try:
        start = reader.initialOffset()
        assert idle.latestOffset(start, ReadAllAvailable()) == start  # 0: answered at once, nothing there
        sender = threading.Thread(target=produce, args=(endpoint, topic_name, 1, 3))
        sender.start()
        started = time.monotonic()
        end = reader.latestOffset(start, ReadAllAvailable())
        waited_s = time.monotonic() - started
        sender.join()
        assert end[topic_name] == {"0": 0, "1": 3} and waited_s < 15
    finally:
        reader.stop()
        idle.stop()


def test_available_now_stops_at_the_offsets_of_its_start(endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 8)
    wait_indexed(endpoint, topic_name, 8)
    reader, _ = stream_reader(endpoint, topic_name, maxRecordsPerTrigger=5)
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        produce(endpoint, topic_name, 0, 8, start=8)
        wait_indexed(endpoint, topic_name, 16)
        first = reader.latestOffset(start, ReadMaxRows(5))
        second = reader.latestOffset(first, ReadMaxRows(5))
        assert (first, second) == (to_json({(topic_name, "", 0): 5}), to_json({(topic_name, "", 0): 8}))
        assert reader.latestOffset(second, ReadMaxRows(5)) == second  # the target: the query ends
        partitions = reader.partitions(start, second)
        assert sum(batch.num_rows for p in partitions for batch in reader.read(p)) == 8
    finally:
        reader.stop()


def test_a_new_queue_whose_start_was_deleted_is_data_loss(endpoint, topic_name):
    """partitions() of a new queue reads from offset 0; the reader reports what is gone."""
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 4)
    wait_indexed(endpoint, topic_name, 4)
    reader, _ = stream_reader(endpoint, topic_name)
    try:
        assert reader.partitions({}, {topic_name: {"0": 4}})[0].value == [(topic_name, "", 0, 0, 4)]
        # A topic the query no longer subscribes to (options changed on restart) is dropped, not lost.
        assert reader.latestOffset({"unsubscribed": {"0": 7}, topic_name: {"0": 4}}, ReadAllAvailable()) == {
            topic_name: {"0": 4}}
        with pytest.raises(DataLossError, match="moved back from 9 to 4"):
            reader.partitions({topic_name: {"0": 9}}, {topic_name: {"0": 4}})
    finally:
        reader.stop()


def test_messages_deleted_below_the_start_are_data_loss(spark, tmp_path):
    """Retention deleting a queue's oldest index file (as RocketMQ deletes old files) moves its
    first offset past where a query must start."""
    with broker_sim.embedded(tmp_path / "broker", batch_cq_units_per_file=4) as endpoint:
        Admin(endpoint).create_topic("aging", 1, "BatchCQ")
        produce(endpoint, "aging", 0, 50, batch=5)  # 10 batches: index files of 4, 4 and 2 units
        wait_indexed(endpoint, "aging", 50)
    oldest = sorted(StorePaths(tmp_path / "broker").queue_index(QueueType.BATCH_CQ, "aging", 0).iterdir())[0]
    oldest.unlink()  # offsets 0 to 19 are gone
    with broker_sim.embedded(tmp_path / "broker", batch_cq_units_per_file=4) as endpoint:
        assert Admin(endpoint).offsets(["aging"])["aging"][0].min_offset == 20
        options = dict(topic="aging", startingOffsets='{"aging": {"0": 3}}')
        with pytest.raises(Exception, match="data loss: topic 'aging' queue 0: offsets 3 to 19 were deleted"):
            run_available_now(source(spark, endpoint, stream=True, **options))
        rows, _ = run_available_now(source(spark, endpoint, stream=True, failOnDataLoss=False, **options))
        assert sorted(r.queue_offset for r in rows) == list(range(20, 50))
        with pytest.raises(Exception, match="offset 3 is no longer stored.*failOnDataLoss to false"):
            source(spark, endpoint, **options).collect()  # a batch read finds it in the task
        rows = source(spark, endpoint, failOnDataLoss=False, **options).collect()
        assert sorted(r.queue_offset for r in rows) == list(range(20, 50))
