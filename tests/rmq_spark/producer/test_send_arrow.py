"""Producer.send_arrow: rows from Arrow columns, routed and cut into batches by column operations."""

import pyarrow as pa
import pytest

from rmq_spark import (
    Admin,
    BufferFullError,
    ConfigError,
    Message,
    OffsetRange,
    Producer,
    QueueNotFoundError,
    RangeReader,
    TopicNotFoundError,
)
from support.sdk import wait_indexed


def create(endpoint, name, queues, kind="BatchCQ"):
    with Admin(endpoint) as admin:
        admin.create_topic(name, queues, kind)
    return name


def read_all(endpoint, topic, queues, total):
    wait_indexed(endpoint, topic, total)
    with RangeReader(endpoint) as reader:
        return reader.read_table([OffsetRange(topic, q, 0, 10**9) for q in range(queues)])


@pytest.mark.parametrize("codec", ["arrow", "rmq"])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_rows_round_trip_with_their_fields(endpoint, topic_name, codec, compression):
    topic = create(endpoint, topic_name, 3)
    rows = pa.table({
        "body": [b"b%d" % i for i in range(500)],
        "keys": [f"k{i % 7}" for i in range(500)],
        "tags": ["A" if i % 3 else None for i in range(500)],
        "properties": pa.array([[("p", str(i))] for i in range(500)], pa.map_(pa.string(), pa.string())),
    })
    with Producer(endpoint, codec=codec, compression=compression, batch_max_bytes=200) as producer:
        assert producer.send_arrow(rows, topic).wait(10) == 500
    table = read_all(endpoint, topic, 3, 500)
    got = sorted(zip(table["body"].to_pylist(), table["keys"].to_pylist(), table["tags"].to_pylist()))
    assert got == sorted(zip(rows["body"].to_pylist(), rows["keys"].to_pylist(), rows["tags"].to_pylist()))
    # Keys hash to queues as Producer.send routes them: the same key, the same queue.
    queue_of = {}
    for key, queue in zip(table["keys"].to_pylist(), table["queue_id"].to_pylist()):
        assert queue_of.setdefault(key, queue) == queue


def test_batches_are_cut_by_bytes_and_keep_row_order_per_queue(endpoint, topic_name):
    topic = create(endpoint, topic_name, 2)
    rows = pa.table({"body": [b"%04d" % i + b"." * 96 for i in range(1000)], "queue_id": [i % 2 for i in range(1000)]})
    with Producer(endpoint, batch_max_bytes=1000) as producer:
        sent = producer.send_arrow(rows, topic)
        sent.wait(10)
        counts = [r.count for r in sent.responses]
    assert sum(counts) == 1000 and max(counts) == 10 and len(counts) == 100  # ten 100-byte rows per batch
    table = read_all(endpoint, topic, 2, 1000)
    for queue in (0, 1):
        bodies = [b for b, q in zip(table["body"].to_pylist(), table["queue_id"].to_pylist()) if q == queue]
        assert bodies == [b"%04d" % i + b"." * 96 for i in range(queue, 1000, 2)]


def test_rows_without_keys_take_the_queues_in_turn_a_batch_at_a_time(endpoint, topic_name):
    topic = create(endpoint, topic_name, 4)
    with Producer(endpoint, batch_max_bytes=1000) as producer:
        producer.send_arrow(pa.table({"body": [b"x" * 100] * 80}), topic).wait(10)
    table = read_all(endpoint, topic, 4, 80)
    assert sorted(table["queue_id"].value_counts().field(1).to_pylist()) == [20, 20, 20, 20]


def test_a_topic_column_splits_rows_between_topics_and_simple_cq_gets_early_batches(endpoint, topic_name):
    batch_topic, simple_topic = create(endpoint, topic_name + "b", 1), create(endpoint, topic_name + "s", 1, "SimpleCQ")
    rows = pa.table({"body": [b"%d" % i for i in range(30)],
                     "topic": [batch_topic if i % 3 else None for i in range(30)]})
    with Producer(endpoint) as producer:
        producer.send_arrow(rows, simple_topic).wait(10)
    assert read_all(endpoint, batch_topic, 1, 20)["body"].to_pylist() == [b"%d" % i for i in range(30) if i % 3]
    assert read_all(endpoint, simple_topic, 1, 10)["body"].to_pylist() == [b"%d" % i for i in range(0, 30, 3)]


def test_bad_columns_fail_before_anything_is_sent(endpoint, topic_name):
    topic = create(endpoint, topic_name, 2)
    with Producer(endpoint) as producer:
        with pytest.raises(ConfigError, match="'body' column"):
            producer.send_arrow(pa.table({"value": [b"x"]}), topic)
        with pytest.raises(ConfigError, match="name the topic"):
            producer.send_arrow(pa.table({"body": [b"x"]}))
        with pytest.raises(ConfigError, match="column 'queue_id' is string"):
            producer.send_arrow(pa.table({"body": [b"x"], "queue_id": ["0"]}), topic)
        with pytest.raises(QueueNotFoundError, match="row 1 names queue 5"):
            producer.send_arrow(pa.table({"body": [b"x", b"y"], "queue_id": [0, 5]}), topic)
        with pytest.raises(TopicNotFoundError):
            producer.send_arrow(pa.table({"body": [b"x"]}), topic + "-missing")
        with pytest.raises(ConfigError, match="RecordBatch or Table"):
            producer.send_arrow([{"body": b"x"}], topic)
    with Admin(endpoint) as admin:
        assert all(q.max_offset == 0 for q in admin.offsets([topic])[topic])


def test_the_memory_bound_holds_for_columns(endpoint, topic_name):
    topic = create(endpoint, topic_name, 1)
    producer = Producer(endpoint, background=False, batch_max_bytes=1000, total_batch_max_bytes=2000,
                        send_timeout_ms=200)
    producer.send_async(Message(topic, b"x" * 900, queue_id=0))  # held, not sent: no timer runs here
    with pytest.raises(BufferFullError):
        producer.send_arrow(pa.table({"body": [b"y" * 600] * 2}), topic)
    producer.close()
    assert producer._accumulator.held_bytes == 0
