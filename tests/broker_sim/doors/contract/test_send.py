"""Send: single messages, early batches and inner batches as stored, their message ids, and
each refusal with its code and rmq-reason. A refused send stores nothing."""

import socket
import struct

import grpc
import pytest

from broker_sim.store import encode_message_batch
from rmq_wire import record as fmt
from rmq_wire.codec import encode_messages
from rmq_wire.contract import broker_pb2 as pb
from support.grpc_client import refusal

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def decode_id(message_id: str) -> tuple[str, int, int]:
    raw = bytes.fromhex(message_id.split("-")[0])
    assert len(raw) == 16 and message_id.split("-")[0] == raw.hex().upper()
    return socket.inet_ntoa(raw[:4]), struct.unpack(">i", raw[4:8])[0], struct.unpack(">q", raw[8:])[0]


def read_queue(client, topic, queue_id, count):
    client.wait_readable(topic, queue_id, count)
    [read] = client.read([(topic, queue_id, 0, 0)])
    return read.records


def test_single_message_is_stored_with_its_fields(client, broker):
    client.create("s", 2)
    client.send_single("s", 1, b"first")
    answer = client.send_single("s", 1, b"hello", tags="TagA", keys="k1 k2", properties={"p": "v", "DELAY": "0"},
                                flag=7, born_timestamp_ms=1234)
    assert (answer.queue_id, answer.base_offset, answer.count) == (1, 1, 1)
    [message_id] = answer.message_ids
    _first, record = read_queue(client, "s", 1, 2)
    assert bytes(record.body) == b"hello" and record.flag == 7 and record.born_timestamp == 1234
    assert record.properties == {"p": "v", "DELAY": "0", "TAGS": "TagA", "KEYS": "k1 k2"}
    assert record.store_timestamp == answer.store_timestamp_ms
    assert fmt.decode_host(record.born_host)[0] == "127.0.0.1"  # the client's address
    # offsetMsgId: the store host (the broker's address) and the record's commitlog offset.
    assert decode_id(message_id) == ("127.0.0.1", broker.port, record.physical_offset)
    assert fmt.decode_host(record.store_host) == ("127.0.0.1", broker.port)


def test_born_timestamp_zero_is_the_brokers_time(client):
    client.create("s")
    answer = client.send_single("s", 0, b"x")
    [record] = read_queue(client, "s", 0, 1)
    assert abs(record.born_timestamp - answer.store_timestamp_ms) < 5000


def test_early_batch_is_one_record_per_message(client, broker):
    client.create("s", 1)
    client.send_single("s", 0, b"before")
    messages = [(b"m%d" % i, {"TAGS": "T", "KEYS": "k%d" % i}, i) for i in range(20)]
    answer = client.send("s", 0, early_batch=pb.EarlyBatch(payload=encode_message_batch(messages), count=20))
    assert (answer.base_offset, answer.count, len(answer.message_ids)) == (1, 20, 20)
    records = read_queue(client, "s", 0, 21)[1:]
    assert [(bytes(r.body), r.properties, r.flag, r.queue_offset) for r in records] == [
        (body, props, flag, 1 + i) for i, (body, props, flag) in enumerate(messages)]
    assert [decode_id(i) for i in answer.message_ids] == [("127.0.0.1", broker.port, r.physical_offset)
                                                          for r in records]


@pytest.mark.parametrize("codec, compression, name, level", [
    (pb.CODEC_RMQ, pb.COMPRESSION_NONE, "rmq", fmt.Compression.NONE),
    (pb.CODEC_ARROW, pb.COMPRESSION_ZSTD, "arrow", fmt.Compression.ZSTD),
    (pb.CODEC_RMQ, pb.COMPRESSION_LZ4, "rmq", fmt.Compression.LZ4),
])
def test_inner_batch_is_one_record_stored_as_sent(client, broker, codec, compression, name, level):
    client.create("b", 2, pb.BATCH_CQ)
    client.send_inner("b", 1, [(b"x", {}, 0)] * 2)
    # Checked, never unpacked: the stored body is the payload as sent.
    payload = encode_messages([(b"m%d" % i, None, None, None, None) for i in range(5)], name, level.name)
    answer = client.send("b", 1, inner_batch=pb.InnerBatch(payload=payload, count=5, codec=codec,
                                                           compression=compression, tags="TagB",
                                                           properties={"src": "test"}))
    assert (answer.queue_id, answer.base_offset, answer.count) == (1, 2, 5)
    _first, record = read_queue(client, "b", 1, 7)
    assert bytes(record.body) == payload and record.inner_count == 5 and record.queue_offset == 2
    assert record.sys_flag & fmt.SysFlag.INNER_BATCH and record.compression is level
    assert record.properties["BATCH_CODEC"] == name and record.properties["TAGS"] == "TagB"
    assert record.properties["src"] == "test" and record.properties["INNER_BASE"] == "2"
    # One record: its id, once for the batch (each message's is it suffixed with the index).
    base_id = answer.batch_message_id
    assert not answer.message_ids and decode_id(base_id) == ("127.0.0.1", broker.port, record.physical_offset)


def test_store_refusals_with_code_and_reason(client):
    client.create("s", 2)
    client.create("b", 1, pb.BATCH_CQ)
    before = client.stats().commitlog_max_offset
    single = pb.SingleMessage(body=b"x")
    cases = [
        (dict(topic="nope", single=single), grpc.StatusCode.NOT_FOUND, "TOPIC_NOT_FOUND", "existing topics: b, s"),
        (dict(topic="s", queue_id=2, single=single), grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND", "queues 0 to 1"),
        (dict(topic="s", queue_id=-1, single=single), grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND", "no queue -1"),
        (dict(topic="s", single=pb.SingleMessage(body=bytes((4 << 20) + 1))), INVALID, "MESSAGE_TOO_LARGE",
         "largest accepted is 4194304"),
        (dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"big": "v" * 33000})), INVALID,
         "PROPERTIES_SIZE_EXCEEDED", "the limit is 32767"),
        (dict(topic="s", early_batch=pb.EarlyBatch(
            payload=encode_message_batch([(b"a", {}, 0), (b"b", {"DELAY": "3"}, 0)]), count=2)),
         INVALID, "MESSAGE_ILLEGAL", "delayed messages cannot be batched"),
        (dict(topic="s", inner_batch=pb.InnerBatch(payload=b"p", count=2, codec=pb.CODEC_RMQ)),
         grpc.StatusCode.FAILED_PRECONDITION, "WRONG_QUEUE_TYPE", "need a BatchCQ topic"),
        (dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=40000, codec=pb.CODEC_RMQ)),
         INVALID, "MESSAGE_ILLEGAL", "use 1 to 32767"),
        (dict(topic="b", inner_batch=pb.InnerBatch(payload=b"", count=2, codec=pb.CODEC_RMQ)),
         INVALID, "MESSAGE_ILLEGAL", "empty"),
    ]
    for fields, expected_code, expected_reason, text in cases:
        code, reason, details = refusal(client.messaging.Send, pb.SendRequest(**fields))
        assert (code, reason) == (expected_code, expected_reason) and text in details, (fields.keys(), details)
    assert client.stats().commitlog_max_offset == before


GOOD_BATCH = encode_message_batch([(b"a" * 100, {}, 0), (b"b" * 100, {}, 0)])

# Malformed sends: each refused with INVALID_ARGUMENT (shared with the concurrency test).
MALFORMED_SENDS = [
    ("no payload", dict(topic="s"), "INVALID_ARGUMENT", "carries no message"),
    ("empty topic", dict(topic="", single=pb.SingleMessage(body=b"x")), "INVALID_ARGUMENT", "topic name is empty"),
    ("negative born time", dict(topic="s", born_timestamp_ms=-5, single=pb.SingleMessage(body=b"x")),
     "INVALID_ARGUMENT", "negative"),
    ("early count too high", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH, count=3)),
     "INVALID_ARGUMENT", "holds 2 messages"),
    ("early count too low", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH, count=1)),
     "INVALID_ARGUMENT", "more than 1"),
    ("early count zero", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH, count=0)),
     "INVALID_ARGUMENT", "1 or more"),
    ("early count negative", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH, count=-2)),
     "INVALID_ARGUMENT", "1 or more"),
    ("early count huge", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH, count=2**31 - 1)),
     "INVALID_ARGUMENT", "cannot be right"),
    ("early payload shorter than its header", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH[:10],
                                                                                       count=1)),
     "INVALID_ARGUMENT", "cannot be right"),
    ("early payload cut in an entry", dict(topic="s", early_batch=pb.EarlyBatch(payload=GOOD_BATCH[:-3], count=2)),
     "MESSAGE_ILLEGAL", "malformed batch payload"),
    ("early entry with a lying TOTALSIZE", dict(topic="s", early_batch=pb.EarlyBatch(
        payload=struct.pack(">i", 10**6) + GOOD_BATCH[4:], count=1)), "MESSAGE_ILLEGAL", "TOTALSIZE"),
    ("inner count zero", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=0, codec=pb.CODEC_RMQ)),
     "INVALID_ARGUMENT", "1 or more"),
    ("inner count negative", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=-9, codec=pb.CODEC_RMQ)),
     "INVALID_ARGUMENT", "1 or more"),
    ("codec unspecified", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=1)),
     "INVALID_ARGUMENT", "CODEC_UNSPECIFIED"),
    ("codec unknown", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=1, codec=9)),
     "INVALID_ARGUMENT", "9 (unknown)"),
    ("compression unknown", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=1, codec=pb.CODEC_RMQ,
                                                                      compression=7)),
     "INVALID_ARGUMENT", "7 (unknown)"),
    ("reserved property", dict(topic="b", inner_batch=pb.InnerBatch(payload=b"p", count=1, codec=pb.CODEC_RMQ,
                                                                    properties={"INNER_NUM": "99"})),
     "INVALID_ARGUMENT", "reserved"),
    ("record CRC property", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"__HCRC32#": "1"})),
     "INVALID_ARGUMENT", "reserved"),
    ("TAGS as a property", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"TAGS": "A"})),
     "INVALID_ARGUMENT", "use the tags field"),
    ("separator in a property", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"a": "b\x02c\x01d"})),
     "INVALID_ARGUMENT", "separate stored properties"),
    ("separator in a name", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"a\x01": "b"})),
     "INVALID_ARGUMENT", "separate stored properties"),
    ("empty property name", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={"": "b"})),
     "INVALID_ARGUMENT", "empty name"),
    ("separator in tags", dict(topic="s", single=pb.SingleMessage(body=b"x", tags="A\x02B")),
     "INVALID_ARGUMENT", "tags"),
]


@pytest.mark.parametrize("name, fields, expected_reason, text", MALFORMED_SENDS, ids=[m[0] for m in MALFORMED_SENDS])
def test_malformed_sends_are_refused(client, name, fields, expected_reason, text):
    client.create("s", 1)
    client.create("b", 1, pb.BATCH_CQ)
    before = client.stats().commitlog_max_offset
    code, reason, details = refusal(client.messaging.Send, pb.SendRequest(**fields))
    assert (code, reason) == (INVALID, expected_reason) and text in details, details
    assert client.stats().commitlog_max_offset == before, "nothing is stored"


def test_a_stamped_send_is_stored_once_and_answered_as_first_stored(client):
    client.create("d", 1)
    stamp = {"producer_id": "3f2a", "sequence": 7}
    first = client.send("d", 0, single=pb.SingleMessage(body=b"once"), **stamp)
    again = client.send("d", 0, single=pb.SingleMessage(body=b"once"), **stamp)
    assert not first.duplicate and again.duplicate
    assert (again.base_offset, list(again.message_ids)) == (first.base_offset, list(first.message_ids))
    client.wait_readable("d", 0, 1)
    assert client.offsets("d")[0] == (0, 1)
    code, reason, sentence = refusal(lambda: client.send("d", 0, single=pb.SingleMessage(body=b"x"),
                                                         producer_id="a:b", sequence=1))
    assert (code, reason) == (INVALID, "MESSAGE_ILLEGAL") and "producer id" in sentence


def test_send_many_answers_each_send_on_its_own(client):
    client.create("m", 2)
    sends = [pb.SendRequest(topic="m", queue_id=0, single=pb.SingleMessage(body=b"a")),
             pb.SendRequest(topic="nope", queue_id=0, single=pb.SingleMessage(body=b"b")),
             pb.SendRequest(topic="m", queue_id=9, single=pb.SingleMessage(body=b"c")),
             pb.SendRequest(topic="m", queue_id=1, single=pb.SingleMessage(body=b"d"))]
    outcomes = client.messaging.SendMany(pb.SendManyRequest(sends=sends), timeout=10).outcomes
    assert [o.HasField("response") for o in outcomes] == [True, False, False, True]
    assert [o.reason for o in outcomes] == ["", "TOPIC_NOT_FOUND", "QUEUE_NOT_FOUND", ""]
    assert "'nope' does not exist" in outcomes[1].error and "queues 0 to 1" in outcomes[2].error
    assert (outcomes[0].response.queue_id, outcomes[3].response.queue_id) == (0, 1)
