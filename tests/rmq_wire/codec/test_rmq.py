"""The rmq codec against hand-built MessageBatch payloads: the exact bytes, other producers'
property layouts, and malformed payloads."""

import os
import random
import struct

import pyarrow as pa
import pytest

from codec_layout import message_batch, properties
from rmq_wire.codec import check_batch, decode_batch, encode_messages, rmq
from rmq_wire.codec.rmq import BatchFormatError


def decode(payload: bytes, count=None):
    return decode_batch(payload, "rmq", "none", count)


def test_encoding_is_rocketmqs_message_batch_byte_for_byte():
    msgs = [(b"body-1", {"a": "1", "b": "2"}, "key-1", "TagA", None), (b"", None, None, None, None),
            (b"\x00\x01\x02", {}, "", "", None)]
    expected = message_batch([
        (b"body-1", properties([("TAGS", "TagA"), ("KEYS", "key-1"), ("a", "1"), ("b", "2")])),
        (b"", b""),
        (b"\x00\x01\x02", properties([("TAGS", ""), ("KEYS", "")])),
    ])
    assert encode_messages(msgs, "rmq", "none") == expected


def test_layout_fields():
    payload = encode_messages([(b"xyz", {"p": "q"}, None, "T", None)], "rmq", "none")
    total, magic, crc, flag, body_len = struct.unpack_from(">iiiii", payload)
    assert (total, magic, crc, flag, body_len) == (len(payload), 0, 0, 0, 3)
    (props_len,) = struct.unpack_from(">h", payload, 23)
    assert payload[25:] == b"TAGS\x01T\x02p\x01q\x02" and props_len == len(payload) - 25


def test_other_producers_property_layouts():
    payload = message_batch([
        (b"a", properties([("KEYS", "k"), ("user", "u"), ("TAGS", "t")])),  # any order
        (b"b", b"TAGS\x01t2\x02KEYS\x01k2"),  # no separator after the last entry
        (b"c", b"\x02\x02TAGS\x01t3\x02junk\x02\x01nameless\x02x\x01y"),  # empty, no-\x01, nameless entries
        (b"d", properties([("UNIQ_KEY", "id"), ("WAIT", "true"), ("__HCRC32#", "0"), ("z", "")])),
        (b"e", b"k\x01v", 7),  # a flag, and one entry without its separator
        (b"f", b"TAGS\x01first\x02TAGS\x01second\x02"),  # a duplicate: the first one counts
    ])
    batch = decode(payload, 6)
    assert batch.column("body").to_pylist() == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert batch.column("tags").to_pylist() == ["t", "t2", "t3", None, None, "first"]
    assert batch.column("keys").to_pylist() == ["k", "k2", None, None, None, None]
    assert batch.column("properties").to_pylist() == [[("user", "u")], [], [("x", "y")], [("z", "")], [("k", "v")],
                                                      []]


def test_a_property_name_that_ends_like_tags_is_not_tags():
    batch = decode(message_batch([(b"a", properties([("MYTAGS", "no"), ("XKEYS", "no")]))]))
    assert batch.column("tags").to_pylist() == [None] and batch.column("keys").to_pylist() == [None]
    assert batch.column("properties").to_pylist() == [[("MYTAGS", "no"), ("XKEYS", "no")]]


@pytest.mark.parametrize("sizes", [
    [100] * 50,  # one run of equal sizes
    [1, 2, 3, 5, 8, 13, 21, 34, 55, 89] * 30,  # sizes vary: the walk goes one entry at a time
    [7] * 5 + [9, 11] * 40 + [64] * 200 + [3],  # both, in turn
])
def test_entries_are_found_whatever_their_sizes(sizes):
    bodies = [os.urandom(n) for n in sizes]
    batch = decode(message_batch([(b, b"") for b in bodies]), len(bodies))
    assert batch.column("body").to_pylist() == bodies


def test_random_layouts_match_a_plain_python_decoder():
    rng = random.Random(3)
    for _ in range(30):
        msgs = []
        for _i in range(rng.randrange(1, 80)):
            pairs = [(rng.choice(["TAGS", "KEYS", "a", "bb", "TAG", "KEYSX"]), rng.choice(["", "v", "vv" * 9]))
                     for _ in range(rng.randrange(0, 4))]
            msgs.append((os.urandom(rng.randrange(0, 40)), properties(pairs), pairs))
        batch = decode(message_batch([(b, p) for b, p, _ in msgs]), len(msgs))
        for row, (body, _, pairs) in zip(batch.to_pylist(), msgs):
            first = {}
            for name, value in pairs:
                first.setdefault(name, value)
            assert row["body"] == body
            assert row["tags"] == first.get("TAGS") and row["keys"] == first.get("KEYS")
            assert row["properties"] == [(n, v) for n, v in pairs if n not in ("TAGS", "KEYS")]


GOOD = message_batch([(b"hello", b"TAGS\x01t\x02"), (b"world!", b"")])
SECOND = 20 + 5 + 2 + 7  # where the second entry starts; it takes 28 bytes


def patch(at: int, fmt: str, value) -> bytes:
    return GOOD[:at] + struct.pack(fmt, value) + GOOD[at + struct.calcsize(fmt):]


@pytest.mark.parametrize("payload, match", [
    (b"", "payload is empty"),
    (GOOD[:-1], f"message 1 at byte {SECOND}: TOTALSIZE 28 with 27 bytes left"),
    (GOOD + b"\x00\x00", f"message 2 at byte {SECOND + 28}: 2 bytes left, fewer than the 4 of TOTALSIZE"),
    (patch(0, ">i", 21), "message 0 at byte 0: TOTALSIZE 21 .* at least 22"),
    (patch(0, ">i", -1), "message 0 at byte 0: TOTALSIZE -1"),
    (patch(16, ">i", 13), "message 0 at byte 0: BODYLEN 13 does not fit its TOTALSIZE 34"),
    (patch(16, ">i", -3), "message 0 at byte 0: BODYLEN -3"),
    (patch(SECOND + 16, ">i", 5), f"message 1 at byte {SECOND}: PROPLEN"),
    (patch(25, ">h", 2), "message 0 at byte 0: PROPLEN 2 disagrees"),
])
def test_malformed_payloads_say_where_and_why(payload, match):
    with pytest.raises(BatchFormatError, match=match):
        decode(payload)
    with pytest.raises(BatchFormatError, match=match):  # the broker's check of every batch says the same
        check_batch(payload, "rmq", "none", 2)


@pytest.mark.parametrize("sizes", [[100] * 50, [1, 2, 3, 5, 8] * 30, [64] * 200])
def test_the_broker_s_count_walks_short_payloads_and_scans_long_ones_alike(sizes):
    payload = message_batch([(os.urandom(n), b"") for n in sizes])
    assert rmq.count(payload) == len(rmq.scan(payload)) == len(sizes)


def test_malformed_utf8_in_a_property_is_an_error():
    with pytest.raises(ValueError, match="UTF-8"):
        decode(message_batch([(b"a", b"TAGS\x01\xff\xfe\x02")]))


@pytest.mark.parametrize("msg, match", [
    ((b"a", {"TAGS": "x"}, None, None, None), "system names"),
    ((b"a", {"INNER_NUM": "x"}, None, None, None), "system names"),
    ((b"a", {"": "x"}, None, None, None), "non-empty"),
    ((b"a", {"k": None}, None, None, None), "is null"),
    ((b"a", {"k\x01": "v"}, None, None, None), "separators"),
    ((b"a", {"k": "v\x02"}, None, None, None), "separators"),
    ((b"a", None, "key\x02", None, None), "keys .* separators"),
    ((b"a", None, None, "t\x01", None), "tags .* separators"),
    ((b"a", {"k": "v" * 40_000}, None, None, None), "limit is 32767"),
])
def test_properties_rocketmq_cannot_carry_are_refused(msg, match):
    with pytest.raises(ValueError, match=match):
        encode_messages([(b"fine", None, None, None, None), msg], "rmq", "none")


def test_the_row_of_a_refused_property_is_named():
    with pytest.raises(ValueError, match="message 2"):
        encode_messages([(b"", {"a": "1"}, None, None, None)] * 2 + [(b"", {"a": "\x02"}, None, None, None)],
                        "rmq", "none")


def test_the_producer_path_writes_what_the_column_path_writes():
    """encode_messages (rows joined in Python) and encode_batch (Arrow columns) agree byte for byte."""
    from rmq_wire.codec import Codec, Compression, encode_batch, encode_messages
    from rmq_wire.codec.columns import BATCH_SCHEMA, PROPERTIES_TYPE

    rows = [(b"a", {"x": "1", "y": ""}, "k1 k2", "TagA", None), (b"", None, None, None, None),
            ("ü body", {"z": "é"}, None, "T", 5)]
    table = pa.RecordBatch.from_arrays([
        pa.array([r[0].encode() if isinstance(r[0], str) else r[0] for r in rows], pa.binary()),
        pa.array([r[2] for r in rows], pa.string()), pa.array([r[3] for r in rows], pa.string()),
        pa.array([list((r[1] or {}).items()) for r in rows], PROPERTIES_TYPE),
        pa.array([r[4] for r in rows], pa.int64())], schema=BATCH_SCHEMA)
    assert encode_messages(rows, Codec.RMQ, Compression.NONE) == encode_batch(table, Codec.RMQ, Compression.NONE)


@pytest.mark.parametrize("row, expected", [
    ((b"a", {"TAGS": "x"}, None, None, None), "system names"),
    ((b"a", {"": "x"}, None, None, None), "non-empty name"),
    ((b"a", {"n": None}, None, None, None), "is null"),
    ((b"a", {"n\x01": "v"}, None, None, None), "separators"),
    ((b"a", None, "k\x02", None, None), "separators"),
    ((b"a", {"n": "v" * 40000}, None, None, None), "32767"),
])
def test_the_producer_path_refuses_what_rocketmq_cannot_carry(row, expected):
    from rmq_wire.codec import Codec, Compression, encode_messages

    with pytest.raises(ValueError, match=expected):
        encode_messages([(b"ok", None, None, None, None), row], Codec.RMQ, Compression.NONE)


@pytest.mark.parametrize("tags", [None, "TagA", "ü"])
def test_plain_messages_encode_as_their_rows_do(tags):
    """encode_plain (the producer's batches of bodies and one tag) writes what encode_rows writes,
    whatever the bodies' sizes and their runs."""
    bodies = [b"x" * 1024] * 3 + [b"", b"ab", b"ab", os.urandom(5000), b"x" * 1024]
    assert rmq.encode_plain(bodies, tags) == rmq.encode_rows([(body, None, None, tags) for body in bodies])


def test_a_plain_tag_rocketmq_cannot_carry_is_refused():
    with pytest.raises(ValueError, match="separators"):
        rmq.encode_plain([b"a"], "Tag\x01")
