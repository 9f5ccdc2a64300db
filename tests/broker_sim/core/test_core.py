"""BrokerCore without a door: what every front end gets from it (topics, sends with message ids,
range reads, offsets, pop, transactions, stats, refusals as reasons), and its lifecycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from broker_sim.core import (
    BrokerCore,
    BrokerFault,
    CoreOptions,
    EarlyBatchSend,
    InnerBatchSend,
    OffsetRange,
    RangeStatus,
    Reason,
    SendRequest,
    SingleSend,
)
from broker_sim.store import Compression, DataDirInUseError, MessageStore, QueueType, StoreConfig, decode_record
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt
from rmq_wire.codec import encode_messages
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "broker_sim"


@pytest.fixture
def core(tmp_path):
    opened = BrokerCore.open(tmp_path / "data", CoreOptions(StoreConfig(segment_bytes=4 << 20),
                                                            auto_create_topics=None))  # topics created first
    yield opened
    opened.close(5.0)


def read(core, topic, queue_id, start=0, end=None, tags="", max_bytes=1 << 20):
    """Copies of the records a range read hands out, and the cursor that says how it ended."""
    [cursor] = core.open_ranges([OffsetRange(topic, queue_id, start, end)], tags, max_bytes)
    records, done = [], False
    while not done:
        done = cursor.step(1 << 20, lambda views, last: (records.extend(bytes(v) for v in views), last)[1])
    return records, cursor


def test_topics_sends_and_range_reads(core):
    config, created = core.create_topic("orders", 2, QueueType.BATCH_CQ)
    assert created and config.queue_count == 2
    assert core.create_topic("orders", 2, QueueType.BATCH_CQ)[1] is False
    single = core.send(SendRequest("orders", 1, SingleSend(b"one", {"k": "v"}, tags="TagA", keys="id-1")))
    assert (single.queue_id, single.base_offset, single.count) == (1, 0, 1)
    assert len(single.message_ids) == 1 and len(single.message_ids[0]) == 32  # offsetMsgId: host, port, position
    payload = encode_messages([(b"a", None, None, None, 1), (b"b", None, None, None, 2)], "arrow", "lz4")
    inner = core.send(SendRequest("orders", 1, InnerBatchSend(payload, 2, "arrow", Compression.LZ4, tags="TagB")))
    assert inner.base_offset == 1 and inner.message_ids == [f"{inner.message_ids[0][:-2]}-{i}" for i in range(2)]
    assert core.store.wait_dispatched(10)

    records, cursor = read(core, "orders", 1)
    assert cursor.status is RangeStatus.FOUND and cursor.next_offset == 3 and cursor.max_offset == 3
    assert [decode_record(r).properties.get("TAGS") for r in records] == ["TagA", "TagB"]
    tagged, cursor = read(core, "orders", 1, tags="TagB || ")
    assert len(tagged) == 1 and cursor.next_offset == 3  # past the filtered record too
    _, cursor = read(core, "orders", 0)
    assert cursor.status is RangeStatus.NO_MESSAGE and cursor.next_offset == 0

    _config, queues = core.describe_topic("orders")
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in queues] == [(0, 0, 0), (1, 0, 3)]
    assert core.offsets_for_timestamp("orders", [1], 0) == [(1, 0)]


def test_early_batches_offsets_and_stats(core):
    core.create_topic("events", 1, QueueType.SIMPLE_CQ)
    batch = fmt.encode_message_batch([(b"x", {}, 0), (b"y", {}, 0), (b"z", {}, 0)])
    sent = core.send(SendRequest("events", 0, EarlyBatchSend(batch, 3), producer_id="p1", sequence=0))
    assert sent.count == 3 and len(set(sent.message_ids)) == 3
    again = core.send(SendRequest("events", 0, EarlyBatchSend(batch, 3), producer_id="p1", sequence=0))
    assert again.duplicate
    assert core.store.wait_dispatched(10)
    core.commit_offsets("g", [("events", 0, 2)])
    assert core.query_offsets("g", ["events"]) == [("events", 0, 2)]
    stats = core.stats()
    assert (stats.topics, stats.queues, stats.messages_put) == (1, 1, 3)
    assert stats.commitlog_max_offset == stats.dispatched_offset > 0 and stats.corrupted == []


def test_offsets_come_in_pages_of_whole_topics(core):
    for name in ("a", "b", "c"):
        core.create_topic(name, 3, QueueType.SIMPLE_CQ)
    page, after = core.offsets_page([], "", 5)
    assert [config.name for config, _queues in page] == ["a"] and after == "b"
    page, after = core.offsets_page([], after, 6)
    assert [config.name for config, _queues in page] == ["b", "c"] and after is None
    page, after = core.offsets_page(["c", "a"], 0, 3)
    assert [config.name for config, _queues in page] == ["c"] and after == 1


def test_pop_ack_and_transactions(core):
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    core.send(SendRequest("t", 0, SingleSend(b"m")))
    prepared = core.send(SendRequest("t", 0, SingleSend(b"later"), transaction_id="txn-1"))
    assert prepared.message_ids == []  # given at the commit
    assert core.store.wait_dispatched(10)
    popped = core.pop("g", "t", -1, 4, 30_000, 0, "*", False, lambda result: result.deliveries)
    assert [d.checkpoint.offset for d in popped] == [0]
    assert core.ack("g", [popped[0].receipt_handle]) == []
    ended = core.commit_transactions([("txn-1", 1)], ("sink", 0))
    assert ended.outcomes[0].changed and core.sink_batch("sink", 0)[0] is not None
    [(txn, expires_ms)] = core.transaction_infos(["txn-1"])
    assert txn.message_count == 1 and txn.state.name == "COMMITTED" and expires_ms == 0  # ended: no expiry
    assert core.store.wait_dispatched(10)
    assert core.describe_topic("t")[1][0].max_offset == 2


@pytest.mark.parametrize("call, reason, words", [
    (lambda c: c.topic("nope"), Reason.TOPIC_NOT_FOUND, "existing topics: t"),
    (lambda c: c.create_topic("%RETRY%g+t", 1, QueueType.SIMPLE_CQ), Reason.INVALID_ARGUMENT, "%RETRY%"),
    (lambda c: c.send(SendRequest("t", 3, SingleSend(b"x"))), Reason.QUEUE_NOT_FOUND, "no queue 3"),
    (lambda c: c.send(SendRequest("t", 0, SingleSend(b"x", {"INNER_NUM": "2"}))), Reason.INVALID_ARGUMENT,
     "reserved"),
    (lambda c: c.send(SendRequest("t", 0, InnerBatchSend(b"p", 1))), Reason.WRONG_QUEUE_TYPE, "SimpleCQ"),
    (lambda c: c.open_ranges([OffsetRange("t", 0, 5, 2)], "", 100), Reason.BAD_OFFSET_RANGE, "not after"),
    (lambda c: c.open_ranges([OffsetRange("t", 0, 0, None)], "||", 100), Reason.INVALID_ARGUMENT, "names no tag"),
    (lambda c: c.commit_offsets("g", [("t", 0, 9)]), Reason.BAD_OFFSET_RANGE, "past the queue's end"),
    (lambda c: c.query_offsets("bad group!", None), Reason.INVALID_ARGUMENT, "consumer group"),
])
def test_refusals_are_reasons_with_sentences(core, call, reason, words):
    core.create_topic("t", 1, QueueType.SIMPLE_CQ)
    with pytest.raises(BrokerFault) as refused:
        call(core)
    assert refused.value.reason is reason and words in refused.value.message


def test_a_closed_core_refuses_calls_and_frees_its_data_dir(tmp_path):
    core = BrokerCore.open(tmp_path, CoreOptions())
    core.close(5.0)
    with pytest.raises(BrokerFault) as refused:
        core.list_topics()
    assert refused.value.reason is Reason.SERVICE_NOT_AVAILABLE
    BrokerCore.open(tmp_path, CoreOptions()).close(5.0)


def test_a_failed_open_closes_what_it_opened(tmp_path):
    MessageStore(tmp_path).close()  # a data directory the broker made
    txn = StorePaths(tmp_path).txn
    txn.write_text("a file where the transaction service wants its directory")
    with pytest.raises(OSError):
        BrokerCore.open(tmp_path, CoreOptions())
    # The store opened before the failure was closed: its data directory is free again.
    txn.unlink()
    core = BrokerCore.open(tmp_path, CoreOptions())
    try:
        with pytest.raises(DataDirInUseError):  # while it is open, it is locked
            BrokerCore.open(tmp_path, CoreOptions())
    finally:
        core.close(5.0)


def _reached_names(path: Path) -> set[str]:
    """What of the store a module reaches past its exports: imports of its modules (but its
    record format), and its commitlog, topics or dispatcher reached through a store."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("broker_sim.store.") \
                and node.module != "rmq_wire.record":
            found.add(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in INTERNALS and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "store":
            found.add(f"store.{node.attr}")
    return found


INTERNALS = {"commitlog", "topics", "dispatcher"}


@pytest.mark.parametrize("package", ["server", "pop", "txn", "core"])
def test_siblings_of_the_store_use_only_what_it_exports(package):
    reached = {str(p.relative_to(PACKAGE)): _reached_names(p) for p in (PACKAGE / package).glob("*.py")}
    assert {name: found for name, found in reached.items() if found} == {}
