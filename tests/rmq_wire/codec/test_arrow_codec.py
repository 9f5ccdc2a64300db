"""The arrow codec: one IPC stream with one record batch; other producers' schemas; bad payloads."""

import pyarrow as pa
import pytest

from rmq_wire.codec import BATCH_SCHEMA, PROPERTIES_TYPE, check_batch, decode_batch, encode_messages
from rmq_wire.codec.arrow import ArrowPayloadError, decode_payloads


def ipc(*batches, schema=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema or batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_payload_is_one_ipc_stream_with_one_batch_in_the_batch_schema():
    payload = encode_messages([(b"x", {"a": "b"}, "k", "t", 42), (b"", None, None, None, None)], "arrow", "none")
    reader = pa.ipc.open_stream(payload)
    assert reader.schema == BATCH_SCHEMA
    batches = list(reader)
    assert len(batches) == 1
    assert batches[0].to_pylist() == [
        {"body": b"x", "keys": "k", "tags": "t", "properties": [("a", "b")], "born_timestamp": 42},
        {"body": b"", "keys": None, "tags": None, "properties": [], "born_timestamp": None}]


def test_other_schemas_are_normalized():
    batch = pa.record_batch({
        "born_timestamp": pa.array([1_500, None], pa.timestamp("ms")),
        "body": pa.array(["s", "t"], pa.large_string()),
        "tags": pa.array(["x", None], pa.string_view()),
        "other": [1, 2],
    })
    decoded = decode_batch(ipc(batch), "arrow", "none", 2)
    assert decoded.schema == BATCH_SCHEMA
    assert decoded.to_pylist() == [
        {"body": b"s", "keys": None, "tags": "x", "properties": [], "born_timestamp": 1500},
        {"body": b"t", "keys": None, "tags": None, "properties": [], "born_timestamp": None}]


def test_properties_with_null_maps_from_other_producers_read_as_empty():
    batch = pa.record_batch({"body": [b"a", b"b"], "properties": pa.array([None, [("k", "v")]], PROPERTIES_TYPE)})
    assert decode_batch(ipc(batch), "arrow", "none", 2).column("properties").to_pylist() == [[], [("k", "v")]]


GOOD = ipc(pa.record_batch({"body": [b"a"]}))


@pytest.mark.parametrize("payload, match", [
    (b"", "ends before its schema message"),
    (b"not arrow at all", "not a readable Arrow IPC stream"),
    (GOOD[:-20], "not a readable|ends before"),
    (ipc(pa.record_batch({"body": [b"a"]}), pa.record_batch({"body": [b"b"]})), "more than one record batch"),
    (ipc(schema=pa.schema([("body", pa.binary())])), "ends before its record batch"),
    (ipc(pa.record_batch({"payload": [b"a"]})), "need a 'body' column"),
    (ipc(pa.record_batch({"body": pa.array(["a"]).dictionary_encode()})), "dictionary"),
])
def test_bad_payloads(payload, match):
    with pytest.raises(ArrowPayloadError, match=match):
        decode_batch(payload, "arrow", "none", None)


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_a_stream_compressed_by_arrow_itself_is_refused_by_the_check_and_by_readers(compression):
    """Found by tests/fuzz: Arrow's IPC buffer compression inflates past the payload's bounded
    decompression (11 KiB became 300 MiB inside the broker's check)."""
    sink = pa.BufferOutputStream()
    batch = pa.record_batch({"body": [b"a" * 1000]})
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    payload = sink.getvalue().to_pybytes()
    for refuse in (lambda: check_batch(payload, "arrow", "none", 1), lambda: decode_batch(payload, "arrow", "none", 1),
                   lambda: decode_payloads([pa.py_buffer(payload)])):
        with pytest.raises(ArrowPayloadError, match="Arrow's own IPC compression"):
            refuse()
