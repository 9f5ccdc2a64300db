"""spark.read.format("rocketmq-batch") against a real broker: exact offset ranges (inside
batches too), every codec, compression and queue type, tag filter, properties, timestamps,
and errors at load()."""

import json
import pkgutil
import time

import pytest

import rmq_spark.spark
from rmq_spark import Admin, Message, Producer
from spark_helpers import keyed, produce, source
from support.sdk import wait_indexed


def test_the_format_is_registered_by_installing_the_package(spark, endpoint, topic_name):
    found = [m.name for m in pkgutil.iter_modules() if m.name == "pyspark_rocketmq_batch"]
    assert found, "pyspark_rocketmq_batch is not on the path: PySpark would not register rocketmq-batch"
    import pyspark_rocketmq_batch

    assert pyspark_rocketmq_batch.DefaultSource.name() == "rocketmq-batch"
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 3)
    wait_indexed(endpoint, topic_name, 3)
    assert source(spark, endpoint, topic=topic_name).count() == 3  # the fixture never registered it
    rmq_spark.spark.register(spark)  # explicit registration works as well
    assert source(spark, endpoint, topic=topic_name).count() == 3


def test_ranges_start_and_end_inside_batches_and_give_exactly_their_offsets(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 3, "BatchCQ")
    bodies = {q: produce(endpoint, topic_name, q, 35, batch=10) for q in range(3)}  # batches of 10, 10, 10, 5
    wait_indexed(endpoint, topic_name, 105)
    starting = {topic_name: {"0": 3, "1": -2, "2": 12}}
    ending = {topic_name: {"0": 17, "1": -1, "2": 13}}
    expected = {(topic_name, q, o): bodies[q][o] for q, (a, b) in {0: (3, 17), 1: (0, 35), 2: (12, 13)}.items()
                for o in range(a, b)}
    for extra in ({}, {"maxRecordsPerPartition": 4, "maxBytesPerFetch": 700}, {"minPartitions": 7}):
        df = source(spark, endpoint, topic=topic_name, startingOffsets=json.dumps(starting),
                    endingOffsets=json.dumps(ending), **extra)
        rows = df.collect()
        assert len(rows) == len(expected) and keyed(rows) == expected, extra
        if "maxRecordsPerPartition" in extra:
            assert df.rdd.getNumPartitions() >= 14 // 4 + 35 // 4 + 1
        if "minPartitions" in extra:
            assert df.rdd.getNumPartitions() == 7
    assert source(spark, endpoint, topic=topic_name).rdd.getNumPartitions() == 3  # a queue a task


def test_every_codec_compression_and_queue_type(spark, endpoint):
    expected = {}
    with Admin(endpoint) as admin:
        for codec in ("rmq", "arrow"):
            for compression in ("none", "lz4", "zstd"):
                topic = f"codecs-{codec}-{compression}"
                admin.create_topic(topic, 2, "BatchCQ")
                for q in range(2):
                    for o, body in enumerate(produce(endpoint, topic, q, 23, batch=7, codec=codec,
                                                     compression=compression)):
                        expected[(topic, q, o)] = body
        admin.create_topic("codecs-simplecq", 2, "SimpleCQ")
    with Producer(endpoint) as producer:  # single messages and early batches: a stored record each
        for i in range(9):
            producer.send(Message("codecs-simplecq", b"s%d" % i, tags="TagA", queue_id=1))
            expected[("codecs-simplecq", 1, i)] = b"s%d" % i
    for topic in {t for t, _, _ in expected}:
        wait_indexed(endpoint, topic, sum(1 for t, _, _ in expected if t == topic))
    rows = source(spark, endpoint, topicPattern="codecs-.*", startingOffsets="earliest").collect()
    assert keyed(rows) == expected and len(rows) == len(expected)


def test_tag_filter_keys_and_properties(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    produce(endpoint, topic_name, 0, 10, batch=5, tags="TagA", properties={"kind": "a"})
    produce(endpoint, topic_name, 0, 10, batch=5, start=10, tags="TagB")
    produce(endpoint, topic_name, 0, 10, batch=5, start=20, tags="TagC", codec="rmq")
    wait_indexed(endpoint, topic_name, 30)
    rows = source(spark, endpoint, topic=topic_name, tagFilter="TagA || TagC", includeProperties=True).collect()
    assert sorted(r.queue_offset for r in rows) == list(range(10)) + list(range(20, 30))
    first = min(rows, key=lambda r: r.queue_offset)
    assert (first.tags, first.keys, first.properties) == ("TagA", "k0", {"kind": "a"})
    assert {r.tags for r in rows} == {"TagA", "TagC"}
    assert "properties" not in source(spark, endpoint, topic=topic_name).columns


def test_starting_and_ending_timestamps(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 2, "BatchCQ")
    stamps = []
    with Producer(endpoint, codec="arrow") as producer:
        for round_ in range(3):
            if stamps:
                while int(time.time() * 1000) <= stamps[-1]:  # the next round is stored a millisecond later
                    time.sleep(0.001)
            results = [producer.send_batch([Message(topic_name, b"%d-%d-%d" % (round_, q, i), queue_id=q)
                                            for i in range(4)]) for q in range(2)]
            stamps.append(max(r[-1].store_timestamp_ms for r in results))
    wait_indexed(endpoint, topic_name, 24)
    first_of_round_1 = stamps[0] + 1
    rows = source(spark, endpoint, topic=topic_name, startingTimestamp=first_of_round_1,
                  endingTimestamp=stamps[1] + 1).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(b"1-%d-%d" % (q, i) for q in range(2) for i in range(4))
    assert all(r.store_timestamp.timestamp() * 1000 >= first_of_round_1 - 1 for r in rows)


def test_bad_options_fail_at_load_with_a_sentence(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 1, "BatchCQ")
    with pytest.raises(Exception, match="maxRecordsPerTrigger='many': expected a positive number of records"):
        source(spark, endpoint, stream=True, topic=topic_name, maxRecordsPerTrigger="many")
    with pytest.raises(Exception, match="unknown option 'subscribe'.*here it is topics"):
        source(spark, endpoint, topic=topic_name, subscribe="x")
    with pytest.raises(Exception, match="does not exist on the broker"):
        source(spark, endpoint, topic="no-such-topic").collect()
    with pytest.raises(Exception, match="rocketmq-batch reads a fixed schema"):
        spark.read.format("rocketmq-batch").schema("body string").option("endpoint", endpoint).option(
            "topic", topic_name).load().collect()
    with pytest.raises(Exception, match="would start at 2, after its end 1"):
        source(spark, endpoint, topic=topic_name, startingOffsets=json.dumps({topic_name: {"0": 2}}),
               endingOffsets=json.dumps({topic_name: {"0": 1}})).collect()
    with pytest.raises(Exception, match="reads nothing in a batch read"):
        source(spark, endpoint, topic=topic_name, startingOffsets="latest").collect()


def test_many_queues_share_a_few_tasks(spark, endpoint, topic_name):
    Admin(endpoint).create_topic(topic_name, 300, "BatchCQ")
    with Producer(endpoint, codec="arrow") as producer:
        for q in range(300):
            producer.send_batch([Message(topic_name, b"%d-%d" % (q, i), queue_id=q) for i in range(1 + q % 3)])
    wait_indexed(endpoint, topic_name, 600)
    df = source(spark, endpoint, topic=topic_name, maxPartitions=4)
    assert df.rdd.getNumPartitions() == 4  # not 300
    rows = df.collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [(q, i) for q in range(300) for i in range(1 + q % 3)]


def test_a_pattern_leaves_out_the_brokers_own_topics(spark, endpoint, topic_name):
    """As Kafka's patterns leave out its internal topics: a committed sink batch is kept in the
    broker's RMQ_SYS_SINK_BATCHES, which ``.*`` must not read as if a user had written it."""
    from rmq_spark import Transactions, is_system_topic

    with Admin(endpoint) as admin, Transactions(endpoint) as txns:
        admin.create_topic(topic_name, 1)
        txns.commit([], sink_id=f"{topic_name}-sink", batch_id=0)
        admin.describe_topic("RMQ_SYS_SINK_BATCHES")  # the broker keeps the sink batch in a topic of its own
        assert not [t.name for t in admin.list_topics() if is_system_topic(t.name)]  # which lists leave out
    produce(endpoint, topic_name, 0, 3)
    wait_indexed(endpoint, topic_name, 3)
    topics = {row.topic for row in source(spark, endpoint, topicPattern=".*").select("topic").distinct().collect()}
    assert topic_name in topics
    assert not [t for t in topics if is_system_topic(t)]
