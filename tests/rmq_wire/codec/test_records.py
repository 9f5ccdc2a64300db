"""decode_records over hand-built stored records: every cut, inner batches of both codecs,
single-message records, mixes, and malformed records."""

import os
import struct
import zlib

import pyarrow as pa
import pytest

from codec_layout import MAGIC_V1, inner_record, message_batch, properties, record
from rmq_wire.codec import compress, encode_messages
from rmq_wire.codec.records import READ_SCHEMA, RecordFormatError, decode_records, iter_record_headers, read_schema

BORN, STORE = 1_700_000_000_000, 1_700_000_000_500


class Queue:
    """Stored records of one queue, and the rows decode_records must give for each offset."""

    def __init__(self, topic=b"topic-a", queue_id=3):
        self.topic, self.queue_id = topic, queue_id
        self.records, self.rows = [], []

    @property
    def buf(self) -> bytes:
        return b"".join(self.records)

    def single(self, body, tags=None, keys=None, user=(), born=BORN, store=STORE, raw_props=None):
        pairs = ([("TAGS", tags)] if tags is not None else []) + ([("KEYS", keys)] if keys is not None else [])
        props = raw_props if raw_props is not None else properties([*pairs, *user])
        self.records.append(record(queue_offset=len(self.rows), body=body, props=props, topic=self.topic,
                                   queue_id=self.queue_id, born=born, store=store))
        self._row(body, tags, keys, dict(user), born, store)

    def inner(self, msgs, codec="rmq", compression="none", tags=None, born=BORN, store=STORE):
        """``msgs``: (body, properties, keys, tags, born_ms) as encode_messages takes them."""
        payload = encode_messages(msgs, codec, compression)
        self.records.append(inner_record(base=len(self.rows), count=len(msgs), payload=payload, codec=codec,
                                         compression=compression, tags=tags, topic=self.topic,
                                         queue_id=self.queue_id, born=born, store=store))
        for body, props, keys, own_tags, own_born in msgs:
            own_born = own_born if codec == "arrow" and own_born is not None else born
            self._row(body, own_tags if own_tags is not None else tags, keys, props or {}, own_born, store)

    def _row(self, body, tags, keys, props, born, store):
        self.rows.append({"topic": self.topic.decode(), "queue_id": self.queue_id, "queue_offset": len(self.rows),
                          "body": body, "tags": tags, "keys": keys, "born_timestamp": born,
                          "store_timestamp": store, "properties": list(props.items())})


def rows_of(batch: pa.RecordBatch) -> list[dict]:
    """Rows with timestamps as ms, for comparing with the model."""
    columns = {name: batch.column(name) for name in batch.schema.names}
    for name in ("born_timestamp", "store_timestamp"):
        columns[name] = pa.compute.divide(columns[name].cast(pa.int64()), 1000)
    return pa.RecordBatch.from_pydict(columns).to_pylist()


def expected(queue: Queue, start: int, end, include_properties=True) -> list[dict]:
    rows = [r for r in queue.rows if r["queue_offset"] >= start and (end is None or r["queue_offset"] < end)]
    if not include_properties:
        rows = [{k: v for k, v in r.items() if k != "properties"} for r in rows]
    return rows


def mixed_queue(compression: str) -> Queue:
    queue = Queue()
    queue.single(b"single-0", tags="T0", keys="k0", user=[("u", "1")])
    queue.inner([(b"r1", {"a": "b"}, "k1", None, None), (b"", None, None, "own", None),
                 (os.urandom(300), {"x": "y", "z": ""}, "", "", None), (b"r4" * 7, None, "k4", None, 5),
                 ("ünïcødé".encode(), None, None, None, None)], "rmq", compression, tags="RecTag")
    queue.inner([(b"a6", {"p": "q"}, "k6", "T6", 111), (b"a7", None, None, None, None),
                 (os.urandom(2000), None, "k8", None, 222), (b"", {"m": "n"}, None, "T9", None)], "arrow",
                compression, tags="RecTag2", born=BORN + 7)
    queue.single(b"", born=BORN + 1, store=STORE + 1)
    queue.inner([(b"x11", None, None, None, None), (b"x12", None, "k12", None, None),
                 (b"x13", None, None, "T13", None)], "rmq", compression)
    queue.inner([(b"solo", None, None, None, None)], "arrow", compression)
    return queue


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_every_range_of_a_mixed_queue(compression):
    queue = mixed_queue(compression)
    buf, total = queue.buf, len(queue.rows)
    for start in range(total + 1):
        for end in [None, *range(start + 1, total + 2)]:
            batch = decode_records(buf, start, end, include_properties=True)
            assert batch.schema == read_schema(True)
            assert rows_of(batch) == expected(queue, start, end), (start, end)


def test_without_properties_the_read_schema_has_no_properties_column():
    queue = mixed_queue("lz4")
    batch = decode_records(queue.buf, 2, 12)
    assert batch.schema == READ_SCHEMA == read_schema(False)
    assert rows_of(batch) == expected(queue, 2, 12, include_properties=False)


def test_read_schema_types():
    assert [(f.name, str(f.type)) for f in read_schema(True)] == [
        ("topic", "string"), ("queue_id", "int32"), ("queue_offset", "int64"), ("body", "binary"),
        ("tags", "string"), ("keys", "string"), ("born_timestamp", "timestamp[us, tz=UTC]"),
        ("store_timestamp", "timestamp[us, tz=UTC]"), ("properties", "map<string, string>")]


def test_a_buffer_that_starts_and_ends_inside_the_queue():
    queue = mixed_queue("none")
    buf = b"".join(queue.records[2:4])  # the arrow batch (6..9) and the single record (10)
    assert rows_of(decode_records(buf, 0, None, True)) == expected(queue, 6, 11)
    assert rows_of(decode_records(buf, 8, 9, True)) == expected(queue, 8, 9)
    assert decode_records(buf, 11, None).num_rows == 0
    assert decode_records(buf, 0, 6).num_rows == 0


@pytest.mark.parametrize("sizes", [[40] * 300, list(range(300)), [5] * 50 + list(range(100)) + [7] * 50])
def test_runs_of_single_message_records(sizes):
    queue = Queue(topic=b"simple")
    for i, size in enumerate(sizes):
        queue.single(os.urandom(size), tags=f"t{i % 3}" if i % 5 else None, keys=str(i), user=[("i", str(i))] * (i % 2),
                     born=BORN + i, store=STORE + i)
    for start, end in [(0, None), (17, 18), (13, 250), (299, 300), (0, 1)]:
        assert rows_of(decode_records(queue.buf, start, end, True)) == expected(queue, start, end)


def test_records_of_other_topics_and_queues_keep_their_own():
    first, second = Queue(topic=b"t1", queue_id=0), Queue(topic=b"another-topic", queue_id=9)
    first.single(b"a")
    second.single(b"b")
    second.single(b"c")
    buf = first.records[0] + second.records[1]
    batch = decode_records(buf, 0, None)
    assert batch.column("topic").to_pylist() == ["t1", "another-topic"]
    assert batch.column("queue_id").to_pylist() == [0, 9]
    assert batch.column("queue_offset").to_pylist() == [0, 1]


def test_user_properties_exclude_system_ones():
    queue = Queue()
    queue.single(b"x", raw_props=properties([("TAGS", "t"), ("KEYS", "k"), ("UNIQ_KEY", "id"), ("WAIT", "true"),
                                             ("color", "red")]))
    batch = decode_records(queue.buf, 0, None, include_properties=True)
    assert batch.column("properties").to_pylist() == [[("color", "red")]]
    assert batch.column("tags").to_pylist() == ["t"] and batch.column("keys").to_pylist() == ["k"]


def test_an_inner_batch_without_batch_codec_is_rmq():
    payload = message_batch([(b"one", properties([("TAGS", "t")])), (b"two", b"")])
    buf = inner_record(base=0, count=2, payload=payload, codec=None, tags="outer")
    batch = decode_records(buf, 0, None)
    assert batch.column("body").to_pylist() == [b"one", b"two"]
    assert batch.column("tags").to_pylist() == ["t", "outer"]


def test_an_empty_buffer_gives_an_empty_batch():
    assert decode_records(b"", 0, None).schema == READ_SCHEMA
    assert decode_records(b"", 0, None, True).num_rows == 0


def test_columns_do_not_refer_to_the_buffer():
    queue = mixed_queue("none")
    buf = bytearray(queue.buf)
    batch = decode_records(buf, 0, None, True)
    buf[:] = bytes(len(buf))
    assert rows_of(batch) == expected(queue, 0, None)


@pytest.mark.parametrize("codec", ["rmq", "arrow"])
def test_a_single_uncompressed_batch_is_copied_too(codec):
    queue = Queue()
    queue.inner([(b"body-%d" % i * 3, {"k": str(i)}, f"key{i}", "t", 9) for i in range(4)], codec, "none")
    buf = bytearray(queue.buf)
    batch = decode_records(buf, 0, None, True)
    buf[:] = bytes(len(buf))
    assert rows_of(batch) == expected(queue, 0, None)


def test_iter_record_headers():
    queue = mixed_queue("lz4")
    headers = list(iter_record_headers(queue.buf))
    assert [h.queue_offset for h in headers] == [0, 1, 6, 10, 11, 14]
    assert [h.count for h in headers] == [1, 5, 4, 1, 3, 1]
    assert [h.inner_batch for h in headers] == [False, True, True, False, True, True]
    assert headers[0].position == 0 and headers[1].position == len(queue.records[0])
    assert headers[0].topic == "topic-a" and headers[0].queue_id == 3
    assert bytes(headers[0].body) == b"single-0"
    assert headers[2].properties["BATCH_CODEC"] == "arrow" and headers[2].properties["TAGS"] == "RecTag2"
    assert headers[2].born_timestamp_ms == BORN + 7 and headers[2].store_timestamp_ms == STORE
    assert headers[2].sys_flag == 0x80 | 0x40 | 0x101


# --- malformed records ------------------------------------------------------------------------

ONE = record(queue_offset=0, body=b"hello", props=properties([("TAGS", "t")]))
TWO = ONE + record(queue_offset=1, body=b"again")


def patch(raw: bytes, at: int, fmt: str, value) -> bytes:
    return raw[:at] + struct.pack(fmt, value) + raw[at + struct.calcsize(fmt):]


def inner(payload=None, count=2, **kwargs):
    payload = payload if payload is not None else message_batch([(b"a", b""), (b"b", b"")])
    return ONE + inner_record(base=1, count=count, payload=payload, **kwargs)


@pytest.mark.parametrize("buf, match", [
    (TWO[:-1], f"record 1 at byte {len(ONE)}: TOTALSIZE"),
    (TWO + b"\x00\x00", f"record 2 at byte {len(TWO)}: 2 bytes left"),
    (patch(TWO, 0, ">i", 50), "record 0 at byte 0: TOTALSIZE 50"),
    (patch(TWO, len(ONE) + 4, ">I", 0xDAA320AB), f"record 1 at byte {len(ONE)}: magic 0xdaa320ab is a V2 record"),
    (patch(TWO, 4, ">I", 0xCBD43194), "record 0 at byte 0: magic 0xcbd43194 is a BLANK"),
    (patch(TWO, 4, ">I", 0x12345678), "magic 0x12345678 is unknown"),
    (patch(TWO, 36, ">i", 0x10), "SYSFLAG 0x10 marks IPv6 hosts"),
    (patch(TWO, 84, ">i", 5000), "record 0 at byte 0: BODYLEN 5000 does not fit"),
    (patch(TWO, 84, ">i", -1), "record 0 at byte 0: BODYLEN -1"),
    (patch(TWO, 84, ">i", 4), "record 0 at byte 0: .*TOPICLEN|PROPLEN"),
    (patch(TWO, 88 + 5, ">B", 200), "record 0 at byte 0: TOPICLEN 200 does not fit"),
    (patch(TWO, 88 + 5 + 1 + 7, ">h", 3), "record 0 at byte 0: PROPLEN 3 disagrees"),
    (inner(count=3), f"record 1 at byte {len(ONE)}: the inner batch holds 2 messages but its INNER_NUM says 3"),
    (inner(payload=b"\x00\x00\x00\x05junk"), f"record 1 at byte {len(ONE)}, an inner batch \\(rmq, none\\): "
                                             "rmq batch: message 0 at byte 0: TOTALSIZE 5"),
    (inner(compression="lz4"), "an inner batch \\(rmq, lz4\\): payload of .* is not a valid lz4 frame"),
    (inner(codec="json"), "unknown BATCH_CODEC 'json'"),
    (inner(payload=encode_messages([(b"a", None, None, None, None)] * 2, "arrow", "none")[:-30], codec="arrow"),
     "an inner batch \\(arrow, none\\)"),
    (inner(inner_base=7), "QUEUEOFFSET 1 but INNER_BASE 7"),
])
def test_malformed_records_say_which_record_where_and_why(buf, match):
    with pytest.raises(RecordFormatError, match=match):
        decode_records(buf, 0, None)


def test_an_inner_batch_without_a_count():
    raw = record(queue_offset=0, body=message_batch([(b"a", b"")]), props=properties([("BATCH_CODEC", "rmq")]),
                 sys_flag=0xC0)
    with pytest.raises(RecordFormatError, match="INNER_NUM None"):
        decode_records(raw, 0, None)


def test_zlib_compressed_inner_batches_and_bodies_are_read():
    """RocketMQ's own compression: a batch of type 3, and a message body its Java or C++ client
    compressed (the COMPRESSED bit alone, as 4.x writes it, is zlib too)."""
    raw = inner_record(base=0, count=1, payload=compress(message_batch([(b"a", b"")]), "zstd"), compression="zstd")
    zlib_batch = inner_record(base=0, count=1, payload=zlib.compress(message_batch([(b"a", b"")])))
    zlib_batch = patch(zlib_batch, 36, ">i", 0x80 | 0x40 | 0x1 | (3 << 8))
    assert decode_records(zlib_batch, 0, None).column("body").to_pylist() == [b"a"]
    big = b"payload " * 1000
    single = record(queue_offset=1, body=zlib.compress(big), props=properties([("TAGS", "t")]), sys_flag=0x1)
    table = decode_records(raw + single, 0, None)
    assert table.column("body").to_pylist() == [b"a", big] and table.column("tags").to_pylist() == [None, "t"]
    broken = record(queue_offset=1, body=b"not zlib", sys_flag=0x1)
    with pytest.raises(RecordFormatError, match="record 0 at byte 0: its compressed body does not decompress"):
        decode_records(broken, 0, None)


def test_a_record_without_the_crc_property_reads_too():
    raw = record(queue_offset=4, body=b"b", props=properties([("KEYS", "k")]), crc_property=False)
    assert decode_records(raw, 0, None).column("keys").to_pylist() == ["k"]


def test_magic_is_v1():
    assert struct.unpack_from(">I", ONE, 4)[0] == MAGIC_V1


def test_records_whose_topic_or_inner_batch_properties_are_not_utf8_are_refused():
    """Found by the long fuzz: UnicodeDecodeError and ArrowInvalid escaped instead of RecordFormatError."""
    good = record(queue_offset=0, body=b"a")
    with pytest.raises(RecordFormatError, match="topic is not UTF-8"):
        decode_records(good + record(queue_offset=1, body=b"b", topic=b"t\xff"), 0)
    bad_properties = inner_record(base=0, count=1, payload=message_batch([(b"a", b"")]), extra=[("x", "y")])
    bad_properties = bad_properties.replace(b"x\x01y", b"\x80\x01y")
    with pytest.raises(RecordFormatError, match="properties are not UTF-8"):
        decode_records(bad_properties, 0)


@pytest.mark.parametrize("offsets", [(0, 1, 304), (0, 2, 1)], ids=["past its buffer", "backwards"])
def test_an_arrow_batch_whose_offsets_leave_their_buffer_is_refused(offsets):
    """Found by the fuzz in CI: a tags column whose offsets point past its data (or back) reached
    the column gatherer, which indexed out of bounds (IndexError, ArrowIndexError)."""
    payload = encode_messages([(b"aaa", None, None, "T", None), (b"bbbbb", None, None, "T", None)], "arrow", "none")
    tags_offsets = struct.pack("<3i", 0, 1, 2)  # the bodies' are 0, 3, 8; the keys' 0, 0, 0
    assert payload.count(tags_offsets) == 1
    bad = payload.replace(tags_offsets, struct.pack("<3i", *offsets))
    buf = inner_record(base=0, count=2, payload=bad, codec="arrow")
    with pytest.raises(RecordFormatError, match="an inner batch \\(arrow, none\\): arrow batch payload has invalid"):
        decode_records(buf, 0, None)
