"""Every field of the commitlog record and the batch encoding round-trips."""

import struct
import zlib

import pytest

from broker_sim.store import BatchPut, PutContext
from rmq_wire import record as fmt


def test_record_round_trips_every_field(store):
    store.create_topic("orders", 4, "BatchCQ")
    born_host = fmt.encode_host("10.1.2.3", 4567)
    batch = BatchPut(b"payload-bytes", 5, codec="arrow", compression="zstd",
                       properties={"TAGS": "TagA", "KEYS": "k1 k2", "user": "v"}, flag=7)
    result = store.put_inner_batch("orders", 3, batch, context=PutContext(born_timestamp_ms=1234, born_host=born_host))
    assert result.ok, result.detail
    store.wait_dispatched(5)
    [batch] = store.get_messages("orders", 3, 0).batches
    record = fmt.decode_record(batch.data)

    assert record.total_size == len(batch.data) == batch.data.nbytes
    assert record.body_crc == zlib.crc32(b"payload-bytes") & 0x7FFFFFFF  # RocketMQ's UtilAll.crc32: 31 bits
    assert (record.queue_id, record.flag, record.queue_offset) == (3, 7, 0)
    assert record.physical_offset == result.physical_offsets[0] == batch.physical_offset
    assert record.sys_flag == fmt.SysFlag.INNER_BATCH | fmt.SysFlag.NEED_UNWRAP | fmt.SysFlag.COMPRESSED | (2 << 8)
    assert record.compression is fmt.Compression.ZSTD
    assert record.born_timestamp == 1234 and fmt.decode_host(record.born_host) == ("10.1.2.3", 4567)
    assert record.store_timestamp == result.store_timestamp
    assert fmt.decode_host(record.store_host) == ("127.0.0.1", 10911)
    assert (record.reconsume_times, record.prepared_transaction_offset) == (0, 0)
    assert bytes(record.body) == b"payload-bytes"
    assert record.topic == "orders"
    assert record.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "user": "v", "INNER_NUM": "5",
                                 "BATCH_CODEC": "arrow", "INNER_BASE": "0"}
    assert record.inner_count == 5
    assert batch.tags_code == fmt.java_string_hash("TagA")


def test_layout_matches_rocketmq_offsets(store):
    """The fixed part is 91 bytes, fields at RocketMQ's positions, the CRC property last."""
    store.create_topic("t", 1)
    store.put_message("t", 0, b"abc", properties={"TAGS": "x"})
    store.wait_dispatched(5)
    raw = bytes(store.get_messages("t", 0, 0).batches[0].data)
    assert fmt.FIXED_BYTES == 91
    total, magic = struct.unpack_from(">iI", raw, 0)
    assert total == len(raw) == 91 + len("abc") + len("t") + len("TAGS\x01x\x02") + fmt.CRC_RESERVED_BYTES
    assert magic == 0xDAA320A7
    assert struct.unpack_from(">i", raw, 84)[0] == 3  # BODYLEN
    assert raw[88:91] == b"abc" and raw[91] == 1 and raw[92:93] == b"t"
    assert struct.unpack_from(">h", raw, 93)[0] == len(raw) - 95  # PROPLEN
    crc_at = len(raw) - fmt.CRC_RESERVED_BYTES
    # The record CRC covers everything but the body (BODYCRC's) and itself.
    assert raw[crc_at:] == b"__HCRC32#\x01" + b"%010d" % zlib.crc32(raw[:88] + raw[91:crc_at]) + b"\x02"
    assert fmt.check_record(raw, 0, len(raw)) == (fmt.Check.OK, len(raw), "")


def test_java_string_hash_matches_java():
    # Values of "…".hashCode() in Java.
    assert fmt.java_string_hash("") == 0
    assert fmt.java_string_hash("TagA") == 2598919
    assert fmt.java_string_hash("hello world") == 1794106052
    assert fmt.java_string_hash("polygenelubricants") == -2147483648
    # UTF-16 code units, as Java: (0xE9 * 31 + 0xD83D) * 31 + 0xDE00
    assert fmt.java_string_hash("é😀") == 1996812


def test_properties_round_trip():
    props = {"TAGS": "a", "KEYS": "k", "empty": ""}
    raw = fmt.encode_properties(props)
    assert raw == b"TAGS\x01a\x02KEYS\x01k\x02empty\x01\x02"
    assert fmt.decode_properties(raw) == props
    assert fmt.find_property(raw, b"KEYS") == b"k"
    assert fmt.find_property(b"XTAGS\x01no\x02TAGS\x01yes\x02", b"TAGS") == b"yes"
    assert fmt.find_property(raw, b"missing") is None


def test_properties_decode_as_rocketmqs_decoder_and_as_the_readers():
    # One decoder for the store, the doors and the readers: RocketMQ's skips an entry without
    # \x01 or without a name, and takes a last entry without its \x02; the remoting door's
    # header text decodes the same.
    raw = b"TAGS\x01a\x02lone\x02\x01nameless\x02KEYS\x01k"
    assert fmt.decode_properties(raw) == {"TAGS": "a", "KEYS": "k"}
    assert fmt.decode_properties(raw.decode()) == {"TAGS": "a", "KEYS": "k"}


def test_one_compression_for_the_store_and_the_codecs():
    from rmq_wire import codec

    assert codec.Compression is fmt.Compression
    # SYSFLAG's COMPRESSED bit alone is RocketMQ 4.x's zlib, for a stored record as for a reader.
    assert fmt.Compression.from_sys_flag(fmt.SysFlag.COMPRESSED) is fmt.Compression.ZLIB
    assert fmt.Compression.parse(" LZ4 ") is fmt.Compression.LZ4


def test_message_batch_round_trip():
    messages = [(b"one", {"KEYS": "1"}, 0), (b"", {}, 3), (b"x" * 1000, {"TAGS": "t"}, 9)]
    decoded = list(fmt.iter_message_batch(fmt.encode_message_batch(messages), 10))
    assert [(bytes(body), fmt.decode_properties(props), flag) for flag, body, props in decoded] == messages


@pytest.mark.parametrize("mangle, message", [
    (lambda raw: raw[:24] + struct.pack(">h", 0) + raw[26:], "PROPLEN 0"),
    (lambda raw: raw + b"\0" * 3, "bytes left"),
    (lambda raw: struct.pack(">i", 10) + raw[4:], "TOTALSIZE 10"),
    (lambda raw: raw[:16] + struct.pack(">i", 999) + raw[20:], "BODYLEN 999"),
    (lambda raw: b"", "empty"),
])
def test_malformed_batches_are_explained(mangle, message):
    raw = fmt.encode_message_batch([(b"body", {"KEYS": "k"}, 0)])
    with pytest.raises(fmt.BatchFormatError, match=message):
        list(fmt.iter_message_batch(mangle(raw), 10))


def test_batch_count_is_bounded():
    raw = fmt.encode_message_batch([(b"b", {}, 0)] * 5)
    with pytest.raises(fmt.BatchFormatError, match="more than 4"):
        list(fmt.iter_message_batch(raw, 4))
