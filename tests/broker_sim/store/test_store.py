"""Topics and the three ways in: single messages, early batches and inner batches, with their
rules and the sentences that explain a refusal."""

import json

import pytest

from broker_sim.store import (
    BatchPut,
    CreateStatus,
    MessageStore,
    PutContext,
    PutStatus,
    QueueType,
    StoreClosedError,
    UnknownTopicError,
    decode_record,
)
from rmq_wire import record as fmt


def test_topics_are_fixed_at_creation_and_persisted(open_store):
    store = open_store()
    assert store.create_topic("a", 4, "BatchCQ") == (CreateStatus.CREATED, "")
    assert store.create_topic("a", 4, QueueType.BATCH_CQ)[0] is CreateStatus.ALREADY_EXISTS
    status, detail = store.create_topic("a", 8, "SimpleCQ")
    assert status is CreateStatus.CONFLICT and "4 queues of type BatchCQ" in detail
    store.create_topic("b", 1)
    store.close()
    saved = json.loads(store.paths.topics.read_text())
    assert saved["topics"] == [{"name": "a", "queue_count": 4, "queue_type": "BatchCQ"},
                               {"name": "b", "queue_count": 1, "queue_type": "SimpleCQ"}]
    reopened = open_store()
    assert reopened.topic("a").queue_type is QueueType.BATCH_CQ and reopened.topic("b").queue_count == 1


@pytest.mark.parametrize("name, queues, queue_type, expected", [
    ("", 1, "SimpleCQ", "empty"),
    ("bad name", 1, "SimpleCQ", "letters, digits"),
    ("x" * 128, 1, "SimpleCQ", "127 bytes"),
    ("ok", 0, "SimpleCQ", "use 1 to 65536"),
    ("ok", 70000, "SimpleCQ", "use 1 to 65536"),
    ("ok", 1, "Kafka", "BatchCQ or SimpleCQ"),
])
def test_bad_topics_are_explained(store, name, queues, queue_type, expected):
    status, detail = store.create_topic(name, queues, queue_type)
    assert status is CreateStatus.INVALID and expected in detail
    assert store.topics.all() == []


def test_unknown_topic_and_queue_are_explained(store):
    store.create_topic("orders", 2)
    result = store.put_message("order", 0, b"x")
    assert result.status is PutStatus.TOPIC_NOT_FOUND
    assert "'order' does not exist" in result.detail and "orders" in result.detail
    result = store.put_message("orders", 2, b"x")
    assert result.status is PutStatus.QUEUE_NOT_FOUND and "queues 0 to 1" in result.detail
    with pytest.raises(UnknownTopicError, match="existing topics: orders"):
        store.max_offset("nope", 0)
    with pytest.raises(UnknownTopicError, match="no queue 7"):
        store.min_offset("orders", 7)
    assert store.commitlog.max_offset == 0


def test_early_batch_is_unpacked_into_consecutive_records(store):
    store.create_topic("s", 1)
    store.put_message("s", 0, b"before")
    messages = [(b"body-%d" % i, {"KEYS": "k%d" % i, "TAGS": "T"}, i) for i in range(32)]
    result = store.put_early_batch("s", 0, fmt.encode_message_batch(messages), context=PutContext(born_timestamp_ms=77))
    assert result.ok and (result.queue_offset, result.count) == (1, 32)
    assert len(result.physical_offsets) == 32
    store.wait_dispatched(5)
    read = store.get_messages("s", 0, 1, max_bytes=1 << 20)
    records = [decode_record(b.data) for b in read.batches]
    assert [(bytes(r.body), r.properties, r.flag, r.queue_offset, r.born_timestamp) for r in records] == [
        (body, props, flag, 1 + i, 77) for i, (body, props, flag) in enumerate(messages)]
    assert all(r.sys_flag == 0 for r in records)


def test_early_batch_into_a_batch_cq_topic_indexes_each_message(store):
    store.create_topic("b", 1, "BatchCQ")
    assert store.put_early_batch("b", 0, fmt.encode_message_batch([(b"m", {}, 0)] * 5)).ok
    store.wait_dispatched(5)
    assert store.queues.find("b", 0).unit_count == 5 and store.max_offset("b", 0) == 5


@pytest.mark.parametrize("messages, expected", [
    ([(b"a", {}, 0), (b"b", {"DELAY": "3"}, 0)], "message 1 of the batch is delayed"),
    ([(b"a", {"__STARTDELIVERTIME": "99"}, 0)], "message 0 of the batch is delayed"),
    ([(b"a", {"TRAN_MSG": "true"}, 0)], "transactional"),
    ([(b"a", {"WAIT": "true"}, 0), (b"b", {"WAIT": "false"}, 0)], "waitStoreMsgOK"),
    ([(b"a", {}, 0), (b"b", {"WAIT": "false"}, 0)], "waitStoreMsgOK"),
    ([(b"a", {"p": "v" * 32760}, 0)], "properties"),
])
def test_early_batch_rules(store, messages, expected):
    store.create_topic("s", 1)
    result = store.put_early_batch("s", 0, fmt.encode_message_batch(messages))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and expected in result.detail
    assert store.commitlog.max_offset == 0  # nothing of the batch is written


def test_early_batch_refuses_retry_topics_and_malformed_payloads(store):
    store.create_topic("%RETRY%g+t", 1)
    result = store.put_early_batch("%RETRY%g+t", 0, fmt.encode_message_batch([(b"a", {}, 0)]))
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "retry topic" in result.detail
    store.create_topic("s", 1)
    good = fmt.encode_message_batch([(b"a", {}, 0), (b"b", {}, 0)])
    for payload, expected in [(good[:-3], "malformed batch payload"), (b"", "empty"), (good + b"\x00", "bytes left")]:
        result = store.put_early_batch("s", 0, payload)
        assert result.status is PutStatus.MESSAGE_ILLEGAL and expected in result.detail, payload
    assert store.commitlog.max_offset == 0


def test_inner_batch_is_one_record(store):
    store.create_topic("b", 1, "BatchCQ")
    payload = fmt.encode_message_batch([(b"m%d" % i, {}, 0) for i in range(32)])
    result = store.put_inner_batch("b", 0, BatchPut(payload, 32, compression=fmt.Compression.LZ4))
    assert result.ok and (result.queue_offset, result.count, len(result.physical_offsets)) == (0, 32, 1)
    store.wait_dispatched(5)
    [batch] = store.get_messages("b", 0, 0).batches
    record = decode_record(batch.data)
    assert bytes(record.body) == payload  # opaque: stored as sent
    assert record.sys_flag & fmt.SysFlag.INNER_BATCH and record.sys_flag & fmt.SysFlag.NEED_UNWRAP
    assert record.compression is fmt.Compression.LZ4
    assert record.properties["BATCH_CODEC"] == "rmq" and record.properties["INNER_NUM"] == "32"


@pytest.mark.parametrize("kwargs, status, expected", [
    (dict(count=0), PutStatus.MESSAGE_ILLEGAL, "batch count 0"),
    (dict(count=40000), PutStatus.MESSAGE_ILLEGAL, "use 1 to 32767"),
    (dict(count=2, codec="avro"), PutStatus.MESSAGE_ILLEGAL, "unknown batch codec 'avro'"),
    (dict(count=2, compression="snappy"), PutStatus.MESSAGE_ILLEGAL, "unknown compression 'snappy'"),
    (dict(count=2, payload=b""), PutStatus.MESSAGE_ILLEGAL, "empty"),
    (dict(count=2, topic="s"), PutStatus.WRONG_QUEUE_TYPE, "SimpleCQ topic"),
])
def test_inner_batch_rules(store, kwargs, status, expected):
    store.create_topic("b", 1, "BatchCQ")
    store.create_topic("s", 1, "SimpleCQ")
    args = dict(topic="b", payload=b"payload", count=2) | kwargs
    topic = args.pop("topic")
    result = store.put_inner_batch(topic, 0, BatchPut(**args))
    assert result.status is status and expected in result.detail
    assert store.commitlog.max_offset == 0


def test_a_closed_store_refuses_puts(tmp_path):
    store = MessageStore(tmp_path)
    store.create_topic("t", 1)
    store.close()
    assert store.put_message("t", 0, b"x").status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreClosedError, match="closed"):
        store.get_messages("t", 0, 0)
    store.close()  # twice is harmless
