"""encode_batch / encode_messages / decode_batch: round trips of both codecs x every compression."""

import os
import random

import numpy as np
import pyarrow as pa
import pytest

from rmq_wire.codec import (
    BATCH_SCHEMA,
    PROPERTIES_TYPE,
    Codec,
    Compression,
    decode_batch,
    encode_batch,
    encode_messages,
)

CODECS = ["rmq", "arrow"]
COMPRESSIONS = ["none", "lz4", "zstd"]


def messages(count: int, seed: int = 7, body_size=None):
    """Messages with every shape a batch can hold: empty bodies, absent / empty keys and tags,
    unicode, properties or none, born times or none."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        size = body_size if body_size is not None else rng.choice([0, 1, 4, 12, 13, 100, 1024])
        body = os.urandom(size) if i % 3 else ("ü€𝄞" * 40).encode()[:size]
        props = rng.choice([None, {}, {"a": "1"}, {"ключ": "значение", "empty": "", "long": "v" * 300},
                            {f"p{j}": str(j) for j in range(rng.randrange(1, 5))}])
        keys = rng.choice([None, "", f"key-{i}", "k1 k2", "ключ-" + "x" * 20])
        tags = rng.choice([None, "", "TagA", "标签"])
        born = rng.choice([None, 1_700_000_000_000 + i, 0])
        out.append((body, props, keys, tags, born))
    return out


def expected_rows(msgs, codec: str):
    return [{"body": body, "keys": keys, "tags": tags, "properties": list((props or {}).items()),
             "born_timestamp": born if codec == "arrow" else None} for body, props, keys, tags, born in msgs]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("count", [1, 2, 257, 10_000])
def test_round_trip_of_mixed_messages(codec, compression, count):
    msgs = messages(count, seed=count)
    payload = encode_messages(msgs, codec, compression)
    batch = decode_batch(payload, codec, compression, count)
    assert batch.schema == BATCH_SCHEMA
    assert batch.to_pylist() == expected_rows(msgs, codec)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_large_bodies(codec, compression):
    msgs = [(os.urandom(1 << 20), {"part": str(i)}, f"k{i}", "big", None) for i in range(3)]
    msgs.append((b"z" * (1 << 20), None, None, None, None))
    batch = decode_batch(encode_messages(msgs, codec, compression), codec, compression, 4)
    assert batch.column("body").to_pylist() == [m[0] for m in msgs]
    assert batch.column("keys").to_pylist() == ["k0", "k1", "k2", None]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_equal_messages_and_every_body_size_around_the_inline_limit(codec, compression):
    # Equal sizes take the chain walk's fast path; 0..40 bytes cross binary_view's 12-byte limit.
    msgs = [(b"m" * 64, {"x": "y"}, "k", "t", None)] * 300 + [(bytes(range(n)), None, "k" * n, None, None)
                                                               for n in range(41)]
    batch = decode_batch(encode_messages(msgs, codec, compression), codec, compression, len(msgs))
    assert batch.column("body").to_pylist() == [m[0] for m in msgs]
    assert batch.column("keys").to_pylist() == [m[2] for m in msgs]
    assert batch.column("tags").to_pylist() == [m[3] for m in msgs]


@pytest.mark.parametrize("codec", CODECS)
def test_encode_batch_takes_tables_string_bodies_and_timestamps(codec):
    table = pa.table({
        "body": pa.chunked_array([["a", "bb"], ["ccc"]]),
        "tags": pa.array(["t", None, "t"], pa.large_string()),
        "born_timestamp": pa.array([1_000_500, None, 2_000_999], pa.timestamp("us", tz="UTC")),
        "properties": pa.array([[("k", "v")], None, []], PROPERTIES_TYPE),
        "topic": ["ignored"] * 3,
    })
    batch = decode_batch(encode_batch(table, codec, "lz4"), codec, "lz4", 3)
    assert batch.column("body").to_pylist() == [b"a", b"bb", b"ccc"]
    assert batch.column("tags").to_pylist() == ["t", None, "t"]
    assert batch.column("keys").to_pylist() == [None] * 3
    assert batch.column("properties").to_pylist() == [[("k", "v")], [], []]
    assert batch.column("born_timestamp").to_pylist() == ([1000, None, 2000] if codec == "arrow" else [None] * 3)


def test_encode_batch_from_a_record_batch_with_int_born():
    rb = pa.record_batch({"body": pa.array([b"x", b"y"]), "born_timestamp": pa.array([5, 6], pa.int32())})
    batch = decode_batch(encode_batch(rb, Codec.ARROW, Compression.NONE), "arrow", "none", 2)
    assert batch.column("born_timestamp").to_pylist() == [5, 6]


@pytest.mark.parametrize("columns, match", [
    (pa.table({"keys": ["k"]}), "need a 'body' column"),
    (pa.table({"body": pa.array([b"x", None])}), "null at row 1"),
    (pa.table({"body": [1, 2]}), "column 'body' is int64"),
    (pa.table({"body": [b"x"], "born_timestamp": ["yesterday"]}), "'born_timestamp' is string"),
    (pa.table({"body": [b"x"], "properties": [[1, 2]]}), "'properties' is list"),
    ({"body": [b"x"]}, "Table or RecordBatch"),
])
def test_encode_batch_rejects_bad_columns(columns, match):
    for codec in CODECS:
        with pytest.raises(ValueError, match=match):
            encode_batch(columns, codec, "none")


@pytest.mark.parametrize("codec", CODECS)
def test_empty_batch_round_trips_for_arrow_and_is_refused_by_rmq_decode(codec):
    payload = encode_messages([], codec, "none")
    if codec == "arrow":
        assert decode_batch(payload, codec, "none", 0).num_rows == 0
    else:
        with pytest.raises(ValueError, match="empty"):
            decode_batch(payload, codec, "none", 0)


@pytest.mark.parametrize("codec", CODECS)
def test_count_mismatch_is_an_error(codec):
    payload = encode_messages(messages(5), codec, "zstd")
    with pytest.raises(ValueError, match="holds 5 messages where 6 were expected"):
        decode_batch(payload, codec, "zstd", 6)
    assert decode_batch(payload, codec, "zstd", None).num_rows == 5


@pytest.mark.parametrize("codec", CODECS)
def test_compression_mismatch_is_a_value_error(codec):
    payload = encode_messages(messages(5), codec, "lz4")
    with pytest.raises(ValueError, match="zstd frame"):
        decode_batch(payload, codec, "zstd", 5)


def test_codec_parse():
    assert Codec.parse("RMQ") is Codec.RMQ and Codec.parse(" arrow") is Codec.ARROW
    assert Codec.parse(None) is Codec.RMQ and Codec.parse(Codec.ARROW) is Codec.ARROW
    for bad in ("json", "", 1):
        with pytest.raises(ValueError, match="use one of: rmq, arrow"):
            Codec.parse(bad)


def test_encode_messages_names_a_bad_tuple():
    with pytest.raises(ValueError, match="message 1: expected"):
        encode_messages([(b"a", None, None, None, None), (b"b", None)], "rmq", "none")


def test_decoded_columns_are_independent_of_the_payload_for_rmq():
    payload = bytearray(encode_messages([(b"hello world, long body", None, "key", "tag", None)], "rmq", "none"))
    batch = decode_batch(payload, "rmq", "none", 1)
    payload[:] = bytes(len(payload))
    assert batch.column("body")[0].as_py() == b"hello world, long body"
    assert batch.column("keys")[0].as_py() == "key"


def test_arrow_decode_is_zero_copy_when_uncompressed():
    payload = encode_messages([(b"x" * 1000, None, None, None, None)], "arrow", "none")
    body = decode_batch(payload, "arrow", "none", 1).column("body")
    data = np.frombuffer(payload, dtype=np.uint8)
    start = body.buffers()[2].address - data.ctypes.data
    assert 0 <= start < len(payload)


@pytest.mark.parametrize("codec", CODECS)
def test_sliced_columns_encode_only_their_rows(codec):
    msgs = messages(40, seed=5)
    full = pa.RecordBatch.from_pylist(
        [{"body": b, "properties": list((p or {}).items()), "keys": k, "tags": t, "born_timestamp": ms}
         for b, p, k, t, ms in msgs],
        schema=BATCH_SCHEMA)
    part = full.slice(7, 20)
    batch = decode_batch(encode_batch(part, codec, "lz4"), codec, "lz4", 20)
    assert batch.to_pylist() == expected_rows(msgs[7:27], codec)
