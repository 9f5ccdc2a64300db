"""One queue choice for messages (Producer.send) and Arrow rows (Producer.send_arrow), and one
early-versus-inner batch decision for both: checked on what a real broker stores."""

import pyarrow as pa
import pytest

from rmq_spark import Admin, Message, OffsetRange, Producer, QueueNotFoundError, RangeReader
from rmq_spark.producer.batch import EARLY_BATCH, BatchForm, batch_form
from rmq_spark.producer.routing import key_hash
from rmq_spark.structs import QueueType
from rmq_wire.codec import Codec, Compression
from support.sdk import wait_indexed

QUEUES = 8


def create(endpoint, name, kind="BatchCQ"):
    with Admin(endpoint) as admin:
        admin.create_topic(name, QUEUES, kind)
    return name


def stored(endpoint, topic, total):
    """(body, queue id) of every stored message."""
    wait_indexed(endpoint, topic, total)
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, q, 0, 10**9) for q in range(QUEUES)])
    return dict(zip(table["body"].to_pylist(), table["queue_id"].to_pylist()))


def test_a_message_and_a_row_with_the_same_keys_land_on_the_same_queue(endpoint, topic_name):
    topic = create(endpoint, topic_name)
    keys = [f"order-{i}" for i in range(40)]
    with Producer(endpoint) as producer:
        for key in keys:
            producer.send(Message(topic, b"m-" + key.encode(), keys=key))
        producer.send_arrow(pa.table({"body": [b"r-" + key.encode() for key in keys], "keys": keys}), topic).wait(10)
    queue_of = stored(endpoint, topic, 2 * len(keys))
    for key in keys:
        assert queue_of[b"m-" + key.encode()] == queue_of[b"r-" + key.encode()] == key_hash(key) % QUEUES
    assert len({queue_of[b"m-" + key.encode()] for key in keys}) > 1  # the keys spread


def test_an_explicit_queue_wins_on_both_paths_and_a_missing_one_is_refused_alike(endpoint, topic_name):
    topic = create(endpoint, topic_name)
    with Producer(endpoint) as producer:
        producer.send(Message(topic, b"message", keys="k", queue_id=5))
        producer.send_arrow(pa.table({"body": [b"row"], "keys": ["k"], "queue_id": [5]}), topic).wait(10)
        with pytest.raises(QueueNotFoundError, match=rf"the message names queue 8; topic '{topic}' has queues 0 to 7"):
            producer.send(Message(topic, b"x", queue_id=QUEUES))
        with pytest.raises(QueueNotFoundError, match=rf"row 1 names queue 8; topic '{topic}' has queues 0 to 7"):
            producer.send_arrow(pa.table({"body": [b"x", b"y"], "queue_id": [0, QUEUES]}), topic)
    assert stored(endpoint, topic, 2) == {b"message": 5, b"row": 5}


@pytest.mark.parametrize("selector, keys", [("round_robin", "k"), ("hash", None)])
def test_messages_and_rows_take_the_queues_in_turn_from_one_counter(endpoint, topic_name, selector, keys):
    """A batch of messages is a turn, and so is a run of about batch_max_bytes of rows: what one
    path sends next goes to the queue after the other's last."""
    topic = create(endpoint, topic_name)
    rows = pa.table({"body": [b"row-%d" % i + b"." * 95 for i in range(30)], "keys": [keys] * 30})
    with Producer(endpoint, queue_selector=selector, batch_max_bytes=1000) as producer:
        producer.send(Message(topic, b"first", keys=keys))
        producer.send_arrow(rows, topic).wait(10)  # three runs of ten 100-byte rows
        producer.send(Message(topic, b"last", keys=keys))
    queue_of = stored(endpoint, topic, 32)
    first = queue_of[b"first"]  # where this producer's turns start: at random
    assert [queue_of[b"row-%d" % i + b"." * 95] for i in range(0, 30, 10)] == [(first + n) % QUEUES for n in (1, 2, 3)]
    assert queue_of[b"last"] == (first + 4) % QUEUES


def test_producers_that_send_once_each_start_at_random_queues(endpoint, topic_name):
    """Spark's write tasks are producers of a batch or two each: were every producer to start at
    the first queue, 40 of them would all write to it."""
    topic = create(endpoint, topic_name)
    for i in range(40):
        with Producer(endpoint) as producer:
            producer.send(Message(topic, b"task-%d" % i))
    used = set(stored(endpoint, topic, 40).values())
    assert len(used) >= 4, f"40 producers of one message each used queues {sorted(used)} of {QUEUES}"


def test_early_or_inner_batch_is_decided_by_the_queue_type_alone():
    assert batch_form(QueueType.BATCH_CQ, Codec.ARROW, Compression.ZSTD) == BatchForm(True, Codec.ARROW,
                                                                                      Compression.ZSTD)
    # The broker unpacks an early batch: RocketMQ's encoding, uncompressed, whatever the producer's.
    assert batch_form(QueueType.SIMPLE_CQ, Codec.ARROW, Compression.ZSTD) == EARLY_BATCH
    assert EARLY_BATCH == BatchForm(False, Codec.RMQ, Compression.NONE)


@pytest.mark.parametrize("kind, records_per_send", [("BatchCQ", 1), ("SimpleCQ", 3)])
def test_messages_and_rows_go_as_the_same_form_of_batch(endpoint, topic_name, kind, records_per_send):
    """Three messages by hand, three rows: on BatchCQ one inner batch each (one stored record,
    whose id the messages share); on SimpleCQ an early batch (a stored record per message), in
    RocketMQ's encoding whatever the producer's codec and compression."""
    topic = create(endpoint, topic_name, kind)
    with Producer(endpoint, codec="arrow", compression="lz4") as producer:
        messages = producer.send_batch([Message(topic, b"m%d" % i, tags="T", queue_id=0) for i in range(3)])
        sent = producer.send_arrow(pa.table({"body": [b"r%d" % i for i in range(3)], "tags": ["T"] * 3,
                                             "queue_id": [0] * 3}), topic)
        sent.wait(10)
    [response] = sent.responses
    for ids in ([r.message_id for r in messages], response.message_ids):
        assert len({message_id.rsplit("-", 1)[0] for message_id in ids}) == records_per_send
    wait_indexed(endpoint, topic, 6)
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, 0, 0, 6)])
    assert table["body"].to_pylist() == [b"m0", b"m1", b"m2", b"r0", b"r1", b"r2"]
    assert table["tags"].to_pylist() == ["T"] * 6
