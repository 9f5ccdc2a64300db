"""ReadRanges: many ranges in one call, ranges inside and across inner batches, statuses,
chunks of at most 4 MiB, the byte budget, the tag filter, and the refusals (all before any
response)."""

import random

import grpc
import pytest

from broker_sim.doors.contract.servicers import CHUNK_BYTES
from broker_sim.store import encode_message_batch
from rmq_wire.contract import broker_pb2 as pb
from support.grpc_client import filler_batch, stream_refusal

INVALID = grpc.StatusCode.INVALID_ARGUMENT
SIZES = [3, 5, 2, 7]  # inner batches at bases 0, 3, 8, 10; max offset 17


def inner_messages(base, count):
    return [(b"m%d" % (base + i), {"i": str(i)}, 0) for i in range(count)]


@pytest.fixture
def batches(client):
    client.create("b", 2, pb.BATCH_CQ)
    base = 0
    for n in SIZES:
        assert client.send_inner("b", 1, inner_messages(base, n)).base_offset == base
        base += n
    client.wait_readable("b", 1, base)
    return client


def test_ranges_inside_and_across_inner_batches_in_one_call(batches):
    cases = [  # (start, end) -> (bases of the records returned, status, next offset)
        ((0, 0), ([0, 3, 8, 10], "FOUND", 17)),
        ((4, 6), ([3], "FOUND", 6)),  # inside one batch: its whole record, the reader cuts it
        ((2, 9), ([0, 3, 8], "FOUND", 9)),  # across batches, starting and ending inside them
        ((8, 10), ([8], "FOUND", 10)),  # exactly one batch
        ((12, 0), ([10], "FOUND", 17)),
        ((16, 17), ([10], "FOUND", 17)),
        ((0, 100), ([0, 3, 8, 10], "FOUND", 17)),  # an end past the max offset reads to it
        ((17, 0), ([], "NO_MESSAGE", 17)),
        ((17, 25), ([], "NO_MESSAGE", 17)),
        ((30, 0), ([], "OFFSET_OVERFLOW", 17)),
    ]
    reads = batches.read([("b", 1, start, end) for (start, end), _ in cases])
    for ((start, end), (bases, status, next_offset)), read in zip(cases, reads):
        records = read.records
        assert [r.queue_offset for r in records] == bases, (start, end)
        assert (read.status, read.next_offset) == (status, next_offset), (start, end)
        assert (read.done.min_offset, read.done.max_offset) == (0, 17)
        for record in records:  # stored as sent: the payload is opaque
            assert bytes(record.body) == encode_message_batch(inner_messages(record.queue_offset, record.inner_count))
    # An empty queue: nothing at 0, and 5 is past its max offset (0).
    empty_at_0, empty_at_5 = batches.read([("b", 0, 0, 0), ("b", 0, 5, 0)])
    assert (empty_at_0.status, empty_at_0.next_offset, empty_at_0.records) == ("NO_MESSAGE", 0, [])
    assert (empty_at_5.status, empty_at_5.next_offset) == ("OFFSET_OVERFLOW", 0)
    assert batches.read([]) == []


def test_many_ranges_over_many_queues(client):
    client.create("s", 8)
    client.create("t", 3, pb.BATCH_CQ)
    for q in range(8):
        for i in range(12):
            client.send_single("s", q, b"s-%d-%d" % (q, i))
    for q in range(3):
        for n in (4, 4, 4):
            client.send_inner("t", q, [(b"t", {}, 0)] * n)
    for q in range(8):
        client.wait_readable("s", q, 12)
    for q in range(3):
        client.wait_readable("t", q, 12)
    rng = random.Random(5)
    ranges = []
    for _ in range(60):
        if rng.random() < 0.7:
            q, start = rng.randrange(8), rng.randrange(12)
            ranges.append(("s", q, start, rng.choice([0, rng.randrange(start + 1, 15)])))
        else:
            q, start = rng.randrange(3), rng.randrange(12)
            ranges.append(("t", q, start, 0))
    reads = client.read(ranges)
    for (topic, q, start, end), read in zip(ranges, reads):
        stop = min(end or 12, 12)
        assert read.status == "FOUND" and read.next_offset == stop
        if topic == "s":
            assert [bytes(r.body) for r in read.records] == [b"s-%d-%d" % (q, i) for i in range(start, stop)]
        else:
            assert [r.queue_offset for r in read.records] == [b for b in (0, 4, 8) if b + 4 > start]


def test_a_large_range_comes_in_chunks_of_at_most_4_mib(client):
    client.create("big", 1, pb.BATCH_CQ)
    payloads = [filler_batch(i, 1 << 20, 10) for i in range(9)] + [filler_batch(0xee, 4 << 20, 10)]  # 9 MiB, 4 MiB
    for payload in payloads:
        client.send("big", 0, inner_batch=pb.InnerBatch(payload=payload, count=10, codec=pb.CODEC_RMQ))
    client.wait_readable("big", 0, 100)
    [read] = client.read([("big", 0, 0, 0)])
    assert len(read.chunks) >= 4 and all(not c.done for c in read.chunks[:-1]) and read.chunks[-1].done
    for chunk in read.chunks:
        assert len(chunk.records) <= CHUNK_BYTES or chunk.record_count == 1
    assert read.chunks[-1].record_count == 1 and len(read.chunks[-1].records) > CHUNK_BYTES  # alone in its chunk
    assert [bytes(r.body) for r in read.records] == payloads
    assert (read.status, read.next_offset) == ("FOUND", 100)


@pytest.fixture
def singles(client):
    """Queues 0 and 1 of "s" with 10 messages of 1000-byte bodies each; returns the record size."""
    client.create("s", 3)
    for q in (0, 1):
        for i in range(10):
            client.send_single("s", q, bytes([65 + i]) * 1000)
        client.wait_readable("s", q, 10)
    [read] = client.read([("s", 0, 0, 1)])
    return read.records[0].total_size


def test_the_byte_budget(client, singles):
    size = singles
    first, second, third = client.read([("s", 0, 0, 0), ("s", 1, 3, 0), ("s", 0, 5, 0)], max_bytes=int(size * 2.5))
    assert (len(first.records), first.status, first.next_offset) == (2, "FOUND", 2)
    for read, start in ((second, 3), (third, 5)):
        assert (read.records, read.status, read.next_offset) == ([], "BUDGET_EXHAUSTED", start)
        assert (read.done.min_offset, read.done.max_offset) == (0, 10)
    # Across ranges: the first is read whole, the second in part, the third not at all.
    first, second, third = client.read([("s", 0, 0, 0), ("s", 1, 0, 0), ("s", 0, 0, 3)], max_bytes=size * 12)
    assert (len(first.records), first.next_offset, first.status) == (10, 10, "FOUND")
    assert (len(second.records), second.next_offset, second.status) == (2, 2, "FOUND")
    assert (third.status, third.next_offset) == ("BUDGET_EXHAUSTED", 0)
    # The first record always comes, however small the budget.
    [tiny] = client.read([("s", 1, 4, 0)], max_bytes=1)
    assert (len(tiny.records), tiny.next_offset, tiny.status) == (1, 5, "FOUND")
    # 0: the broker's default (64 MiB).
    assert [len(r.records) for r in client.read([("s", 0, 0, 0), ("s", 1, 0, 0)])] == [10, 10]


def test_the_tag_filter_on_single_messages(client):
    client.create("s", 1)
    tags = ["A", "B", "", "C", "Aa", "BB", "A"]  # "Aa" and "BB" have the same Java hash code
    for i, tag in enumerate(tags):
        client.send_single("s", 0, b"%d" % i, tags=tag)
    client.wait_readable("s", 0, len(tags))

    def offsets(expression, start=0, end=0):
        [read] = client.read([("s", 0, start, end)], tag_filter=expression)
        assert read.status == "FOUND"
        return [r.queue_offset for r in read.records], read.next_offset

    assert offsets("A || C") == ([0, 3, 6], 7)
    assert offsets("Aa") == ([4], 7) and offsets("BB") == ([5], 7)
    assert offsets("*") == (list(range(7)), 7) and offsets("") == (list(range(7)), 7)
    assert offsets("  A  ||  ") == ([0, 6], 7)
    assert offsets("A", 1, 4) == ([], 4)  # every record filtered: next_offset still moves past them
    assert offsets("Nope") == ([], 7)
    code, reason, details, received = stream_refusal(client, pb.ReadRangesRequest(
        ranges=[pb.ReadRange(topic="s")], tag_filter=" || "))
    assert (code, reason, received) == (INVALID, "INVALID_ARGUMENT", 0) and "names no tag" in details


def test_the_tag_filter_on_inner_batches_and_with_a_budget(client):
    client.create("b", 1, pb.BATCH_CQ)
    for tag in ("X", "Y", "X", "Y"):
        client.send_inner("b", 0, [(b"z" * 500, {}, 0)] * 4, tags=tag)
    client.wait_readable("b", 0, 16)
    [read] = client.read([("b", 0, 2, 0)], tag_filter="Y")
    assert [r.queue_offset for r in read.records] == [4, 12] and read.next_offset == 16
    both = sum(r.total_size for r in read.records)
    # Filtered records do not spend the budget: both Y records fit a budget of their size.
    [read] = client.read([("b", 0, 0, 0)], tag_filter="Y", max_bytes=both)
    assert [r.queue_offset for r in read.records] == [4, 12] and read.next_offset == 16
    [read] = client.read([("b", 0, 0, 0)], tag_filter="Y", max_bytes=both - 1)
    assert [r.queue_offset for r in read.records] == [4] and read.next_offset == 12


READ_REFUSALS = [
    ("unknown topic", [("s", 0, 0, 0), ("nope", 0, 0, 0)], 0, grpc.StatusCode.NOT_FOUND, "TOPIC_NOT_FOUND",
     "existing topics: s"),
    ("unknown queue", [("s", 0, 0, 0), ("s", 3, 0, 0)], 0, grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND",
     "queues 0 to 1"),
    ("negative queue", [("s", -1, 0, 0)], 0, grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND", "no queue -1"),
    ("empty topic", [("", 0, 0, 0)], 0, INVALID, "INVALID_ARGUMENT", "topic name is empty"),
    ("negative start", [("s", 0, 0, 0), ("s", 0, -1, 0)], 0, INVALID, "BAD_OFFSET_RANGE", "start_offset -1"),
    ("negative end", [("s", 0, 0, -5)], 0, INVALID, "BAD_OFFSET_RANGE", "end_offset -5"),
    ("end equal to start", [("s", 0, 5, 5)], 0, INVALID, "BAD_OFFSET_RANGE", "not after start_offset 5"),
    ("end before start", [("s", 0, 5, 3)], 0, INVALID, "BAD_OFFSET_RANGE", "not after start_offset 5"),
    ("negative budget", [("s", 0, 0, 0)], -1, INVALID, "BAD_OFFSET_RANGE", "max_bytes -1"),
]


def read_request(ranges, max_bytes=0):
    return pb.ReadRangesRequest(ranges=[pb.ReadRange(topic=t, queue_id=q, start_offset=s, end_offset=e)
                                        for t, q, s, e in ranges], max_bytes=max_bytes)


@pytest.mark.parametrize("name, ranges, max_bytes, expected_code, expected_reason, text", READ_REFUSALS,
                         ids=[r[0] for r in READ_REFUSALS])
def test_read_refusals_come_before_any_response(client, name, ranges, max_bytes, expected_code, expected_reason,
                                                text):
    client.create("s", 2)
    client.send_single("s", 0, b"x")
    client.wait_readable("s", 0, 1)
    code, reason, details, received = stream_refusal(client, read_request(ranges, max_bytes))
    assert (code, reason, received) == (expected_code, expected_reason, 0) and text in details, details


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "deleted_and_created_again"])
def test_a_topic_deleted_during_a_read(broker, client, monkeypatch, recreate):
    """The deletion lands between two store reads of one range: the stream ends with
    TOPIC_NOT_FOUND, the broker serves on, and the topic created again is empty."""
    client.create("big", 1, pb.BATCH_CQ)
    for i in range(6):
        batch = pb.InnerBatch(payload=filler_batch(i, 1 << 20, 2), count=2, codec=pb.CODEC_RMQ)
        client.send("big", 0, inner_batch=batch)
    client.wait_readable("big", 0, 12)
    store, calls = broker.core.store, []
    original = store.get_messages

    def get_messages(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            assert store.delete_topic("big")
            if recreate:
                store.create_topic("big", 1, "BatchCQ")
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "get_messages", get_messages)
    code, reason, details, received = stream_refusal(client, read_request([("big", 0, 0, 0)]))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "TOPIC_NOT_FOUND") and received >= 1
    assert "'big' was deleted while it was being read" in details
    if recreate:
        [read] = client.read([("big", 0, 0, 0)])
        assert (read.status, read.records) == ("NO_MESSAGE", [])
    else:
        assert client.create("big", 2, pb.SIMPLE_CQ).created
