"""What broker_sim's store writes, the client reads: records from MessageStore.get_messages
through decode_records (the SDK itself never imports broker_sim; this test may)."""

from datetime import datetime, timedelta, timezone

import pytest

from broker_sim.store import BatchPut, PutContext, StoreConfig
from rmq_wire.codec import encode_messages
from rmq_wire.codec.records import decode_records


@pytest.fixture
def store(open_store):
    return open_store(StoreConfig(segment_bytes=1 << 20))


def read(store, topic, start, end=None, include_properties=True):
    assert store.wait_dispatched(10)
    result = store.get_messages(topic, 0, start, end)
    buf = b"".join(bytes(batch.data) for batch in result.batches)
    return decode_records(buf, start, end, include_properties).to_pylist()


@pytest.mark.parametrize("codec", ["rmq", "arrow"])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_inner_batches_and_single_messages_of_a_batch_cq_topic(store, codec, compression):
    store.create_topic("orders", 1, "BatchCQ")
    first = [(f"m{i}".encode(), {"i": str(i)} if i % 2 else None, f"k{i}", "own" if i == 3 else None, 1000 + i)
             for i in range(5)]
    batch = BatchPut(encode_messages(first, codec, compression), 5, codec=codec, compression=compression,
                       properties={"TAGS": "batch-tag"})
    assert store.put_inner_batch("orders", 0, batch, context=PutContext(born_timestamp_ms=77)).ok
    assert store.put_message("orders", 0, b"single", properties={"TAGS": "s", "KEYS": "sk", "u": "v"},
                             context=PutContext(born_timestamp_ms=88)).ok
    rows = read(store, "orders", 0)
    assert [r["queue_offset"] for r in rows] == list(range(6))
    assert [r["body"] for r in rows] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"single"]
    assert [r["tags"] for r in rows] == ["batch-tag"] * 3 + ["own", "batch-tag", "s"]
    assert [r["keys"] for r in rows] == ["k0", "k1", "k2", "k3", "k4", "sk"]
    assert [r["properties"] for r in rows] == [[], [("i", "1")], [], [("i", "3")], [], [("u", "v")]]
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    born = [(r["born_timestamp"] - epoch) // timedelta(milliseconds=1) for r in rows]
    assert born == ([1000, 1001, 1002, 1003, 1004] if codec == "arrow" else [77] * 5) + [88]
    assert {r["topic"] for r in rows} == {"orders"} and {r["queue_id"] for r in rows} == {0}
    assert [r["body"] for r in read(store, "orders", 2, 4)] == [b"m2", b"m3"]


def test_early_batches_of_a_simple_cq_topic(store):
    store.create_topic("events", 1, "SimpleCQ")
    msgs = [(f"e{i}".encode(), {"n": str(i)}, f"k{i}", "T" if i % 2 else None, None) for i in range(10)]
    assert store.put_early_batch("events", 0, encode_messages(msgs, "rmq", "none")).ok
    rows = read(store, "events", 3, 7)
    assert [r["body"] for r in rows] == [b"e3", b"e4", b"e5", b"e6"]
    assert [r["tags"] for r in rows] == ["T", None, "T", None]
    assert [r["properties"] for r in rows] == [[("n", "3")], [("n", "4")], [("n", "5")], [("n", "6")]]
