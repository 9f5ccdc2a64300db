"""Producer and RangeReader against a real broker: every codec, compression and queue type,
ranges inside and across batches, and the errors a user can act on."""

import itertools

import pyarrow as pa
import pytest

import broker_sim
from rmq_spark import (
    Admin,
    ClosedError,
    ConfigError,
    Message,
    MessageTooLargeError,
    OffsetRange,
    Producer,
    QueueNotFoundError,
    RangeReader,
    TopicNotFoundError,
)
from support.sdk import wait_indexed


def make_messages(topic, n, start=0, queue_id=0, tags="TagA"):
    return [Message(topic, b"body-%d-" % i + bytes([i % 256]) * (i % 50), tags=tags, keys=f"k{i}",
                    properties={"n": str(i)}, queue_id=queue_id) for i in range(start, start + n)]


def expected_rows(messages, first_offset):
    return [(m.topic, m.queue_id, first_offset + i, m.body, m.tags, m.keys) for i, m in enumerate(messages)]


def rows(table: pa.Table):
    columns = ["topic", "queue_id", "queue_offset", "body", "tags", "keys"]
    return list(zip(*(table.column(c).to_pylist() for c in columns)))


@pytest.mark.parametrize("queue_type", ["BatchCQ", "SimpleCQ"])
@pytest.mark.parametrize("codec, compression", list(itertools.product(["rmq", "arrow"], ["none", "lz4", "zstd"])))
def test_batches_round_trip(endpoint, topic_name, queue_type, codec, compression):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2, queue_type)
    batches = [make_messages(topic_name, n, start, queue_id=1) for start, n in [(0, 7), (7, 1), (8, 30)]]
    with Producer(endpoint, codec=codec, compression=compression) as producer:
        results = [producer.send_batch(batch) for batch in batches]
    wait_indexed(endpoint, topic_name, 38)
    assert [[r.queue_offset for r in rs] for rs in results] == [list(range(0, 7)), [7], list(range(8, 38))]
    assert all(r.queue_id == 1 and r.message_id for rs in results for r in rs)
    messages = [m for batch in batches for m in batch]
    with RangeReader(endpoint, include_properties=True) as reader:
        table = reader.read_table([OffsetRange(topic_name, 1, 0)])
        assert rows(table) == expected_rows(messages, 0)
        assert table.column("properties").to_pylist()[3] == [("n", "3")]
        # Ranges starting and ending inside batches, and across them: exactly those offsets.
        for start, end in [(2, 5), (6, 9), (0, 1), (7, 8), (5, 37), (37, 38)]:
            got = reader.read_table([OffsetRange(topic_name, 1, start, end)])
            assert rows(got) == expected_rows(messages[start:end], start), (start, end)


def test_many_ranges_in_one_call_and_a_small_budget(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 8, "BatchCQ")
    with Producer(endpoint, codec="arrow", compression="lz4") as producer:
        for queue_id in range(8):
            for start in range(0, 100, 10):
                producer.send_batch(make_messages(topic_name, 10, start, queue_id))
    wait_indexed(endpoint, topic_name, 800)
    ranges = [OffsetRange(topic_name, q, q, 100 - q) for q in range(8)]
    for budget in (3000, 64 << 20):  # a few records a call; every range in one call, decoded together
        with RangeReader(endpoint, max_bytes_per_fetch=budget) as reader:
            table = reader.read_table(ranges)
        assert len(table) == sum(100 - 2 * q for q in range(8))
        by_queue = {}
        for _topic, queue_id, offset, *_ in rows(table):
            by_queue.setdefault(queue_id, []).append(offset)
        assert by_queue == {q: list(range(q, 100 - q)) for q in range(8)}
        if budget > 3000:
            assert len(list(RangeReader(endpoint).read(ranges))) == 1  # one decode for all eight ranges
    with RangeReader(endpoint, max_bytes_per_fetch=3000) as reader:  # open ends: up to what is stored
        table = reader.read_table([OffsetRange(topic_name, q, 0) for q in range(8)])
    assert len(table) == 800 and table.column("queue_offset").to_pylist()[:100] == list(range(100))


def test_a_read_of_many_ranges_names_about_what_a_call_can_read(endpoint, topic_name):
    """The broker answers every range a call names, those its budget does not reach too: the
    reader names about as many as the last call finished, not every pending range each time."""
    queues = 2000
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, queues, "BatchCQ")
    with Producer(endpoint) as producer:
        for queue_id in range(queues):
            producer.send_batch([Message(topic_name, b"x" * 1000, queue_id=queue_id)])
    wait_indexed(endpoint, topic_name, queues)
    with RangeReader(endpoint, max_bytes_per_fetch=50_000) as reader:  # some 40 records a call
        named, real = [], reader._transport.read_ranges

        def read_ranges(ranges, *args):
            named.append(len(ranges))
            return real(ranges, *args)

        reader._transport.read_ranges = read_ranges
        table = reader.read_table([OffsetRange(topic_name, q, 0, 1) for q in range(queues)])
    assert sorted(table.column("queue_id").to_pylist()) == list(range(queues))
    assert sum(named) < 4 * queues, f"{len(named)} calls named {sum(named):,} ranges for {queues} to read"


def test_single_sends_and_queue_selection(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 4, "SimpleCQ")
    with Producer(endpoint) as producer:
        same_key = [producer.send(Message(topic_name, b"x", keys="order-1")) for _ in range(3)]
        assert len({r.queue_id for r in same_key}) == 1
        assert [r.queue_offset for r in same_key] == [0, 1, 2]
    with Producer(endpoint, queue_selector="round_robin") as producer:
        turns = [producer.send(Message(topic_name, b"x")).queue_id for _ in range(8)]
        assert sorted(turns) == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ConfigError, match="queue_selector"):
        Producer(endpoint, queue_selector="random")


def test_tag_filter(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1, "BatchCQ")
    with Producer(endpoint) as producer:
        producer.send_batch(make_messages(topic_name, 3, 0, tags="A"))
        producer.send_batch(make_messages(topic_name, 3, 3, tags="B"))
        producer.send_batch(make_messages(topic_name, 3, 6, tags="C"))
    wait_indexed(endpoint, topic_name, 9)
    with RangeReader(endpoint, tag_filter="A || C") as reader:
        table = reader.read_table([OffsetRange(topic_name, 0, 0)])
    assert table.column("queue_offset").to_pylist() == [0, 1, 2, 6, 7, 8]
    assert set(table.column("tags").to_pylist()) == {"A", "C"}


def test_errors_say_what_to_do(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2, "BatchCQ")
    producer = Producer(endpoint)
    with pytest.raises(TopicNotFoundError, match="does not exist"):
        producer.send(Message(topic_name + "-missing", b"x"))
    with pytest.raises(QueueNotFoundError, match="queues 0 to 1"):
        producer.send(Message(topic_name, b"x", queue_id=5))
    with pytest.raises(MessageTooLargeError, match="4194304"):
        producer.send(Message(topic_name, b"x" * ((4 << 20) + 1)))
    with pytest.raises(ConfigError, match="one topic"):
        producer.send_batch([Message(topic_name, b"x"), Message(topic_name + "2", b"y")])
    with pytest.raises(ConfigError, match="codec"):
        Producer(endpoint, codec="avro")
    producer.close()
    with pytest.raises(ClosedError, match="closed"):
        producer.send(Message(topic_name, b"x"))
    with pytest.raises(ConfigError, match="bad range"):
        list(RangeReader(endpoint).read([OffsetRange(topic_name, 0, 5, 2)]))


@pytest.mark.parametrize("queue_ids", [(0, 1), (None, 0, 1)])
def test_a_batch_naming_different_queues_is_refused_and_nothing_is_sent(endpoint, topic_name, queue_ids):
    """As a batch of different topics: one batch is one queue's (one stored record on BatchCQ,
    one answer), never moved silently into the first message's queue. A message naming no
    queue goes with the one the others name."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2, "BatchCQ")
    with Producer(endpoint) as producer:
        with pytest.raises(ConfigError, match="a batch goes to one queue; got queue 0, queue 1: give its messages"):
            producer.send_batch([Message(topic_name, b"m%d" % i, queue_id=q) for i, q in enumerate(queue_ids)])
        results = producer.send_batch([Message(topic_name, b"any"), Message(topic_name, b"one", queue_id=1)])
    assert [(r.queue_id, r.queue_offset) for r in results] == [(1, 0), (1, 1)]  # none of the refused batch
    wait_indexed(endpoint, topic_name, 2)
    with Admin(endpoint) as admin:
        assert [q.max_offset for q in admin.offsets([topic_name])[topic_name]] == [0, 2]


def test_reads_after_a_broker_restart(tmp_path):
    data = tmp_path / "broker"
    with broker_sim.embedded(data) as endpoint:
        with Admin(endpoint) as admin:
            admin.create_topic("restart", 1, "BatchCQ")
        with Producer(endpoint, codec="arrow", compression="zstd") as producer:
            producer.send_batch(make_messages("restart", 20))
    with broker_sim.embedded(data) as endpoint:
        with RangeReader(endpoint) as reader:
            table = reader.read_table([OffsetRange("restart", 0, 5, 15)])
    assert rows(table) == expected_rows(make_messages("restart", 20)[5:15], 5)
