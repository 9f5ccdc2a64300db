"""Topic deletion and re-creation: the indexes go, the queues start again at 0, and the old
records never come back, not even when recovery re-dispatches the commitlog."""

import json
import shutil
import threading

import pytest

from broker_sim.store import (
    BatchPut,
    CreateStatus,
    GetStatus,
    PutStatus,
    QueueType,
    decode_record,
    encode_message_batch,
)
from broker_sim.store.checkpoint import Checkpoint, load_queue_table
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt

WAIT_S = 10.0


def served(store, topic, queue_id):
    """(queue offset, count, body, physical offset) of every record the queue serves."""
    assert store.wait_dispatched(WAIT_S)
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    out, offset = [], low
    while offset < high:
        result = store.get_messages(topic, queue_id, offset)
        assert result.status is GetStatus.FOUND, result
        for batch in result.batches:
            record = decode_record(batch.data)
            assert record.topic == topic and record.queue_id == queue_id
            out.append((record.queue_offset, record.inner_count, bytes(record.body), record.physical_offset))
        offset = result.next_begin_offset
    return out


def put_old(store, topic, queues, n=5):
    for q in range(queues):
        for i in range(n):
            assert store.put_message(topic, q, b"old-%d-%d" % (q, i), properties={"TAGS": "old"}).ok


def test_delete_removes_the_topic_and_its_indexes(store):
    store.create_topic("t", 2, "SimpleCQ")
    store.create_topic("keep", 1, "BatchCQ")
    put_old(store, "t", 2)
    assert store.put_inner_batch("keep", 0, BatchPut(b"payload", 3)).ok
    served(store, "t", 0)
    assert store.paths.queue_index(QueueType.SIMPLE_CQ, "t", 0).is_dir()

    assert store.delete_topic("t") is True
    assert store.delete_topic("t") is False  # already gone
    assert store.delete_topic("never") is False
    assert [t.name for t in store.topics.all()] == ["keep"]
    assert not store.paths.topic_index(QueueType.SIMPLE_CQ, "t").exists()
    result = store.put_message("t", 0, b"x")
    assert result.status is PutStatus.TOPIC_NOT_FOUND and "existing topics: keep" in result.detail
    assert store.get_messages("t", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    store.flush()
    assert {entry[0] for entry in load_queue_table(store.paths.queue_table)} == {"keep"}
    assert [r[:3] for r in served(store, "keep", 0)] == [(0, 3, b"payload")]  # the others are untouched


def test_a_recreated_topic_starts_empty_at_offset_zero(store):
    store.create_topic("t", 2, "SimpleCQ")
    put_old(store, "t", 2)
    served(store, "t", 1)
    end = store.commitlog.max_offset
    assert store.delete_topic("t")
    assert store.create_topic("t", 1, "BatchCQ") == (CreateStatus.CREATED, "")
    assert store.topic("t").created_at_offset == end
    assert store.max_offset("t", 0) == 0
    result = store.put_inner_batch("t", 0, BatchPut(b"new", 4))
    assert result.ok and result.queue_offset == 0
    assert [r[:3] for r in served(store, "t", 0)] == [(0, 4, b"new")]
    store.close()  # folds the topic journal into topics.json
    saved = json.loads(store.paths.topics.read_text())
    assert saved["topics"] == [{"name": "t", "queue_count": 1, "queue_type": "BatchCQ", "created_at_offset": end}]


def test_created_at_offset_survives_a_restart_and_old_files_load_as_zero(open_store):
    store = open_store()
    store.create_topic("a", 1)
    store.put_message("a", 0, b"x")
    store.create_topic("b", 1)
    at = store.topic("b").created_at_offset
    assert at > 0 and store.topic("a").created_at_offset == 0
    store.close()
    topics = store.paths.topics
    reopened = open_store()
    assert reopened.topic("b").created_at_offset == at
    reopened.close()
    # A file written before the field existed.
    topics.write_text(json.dumps({"topics": [{"name": "a", "queue_count": 1, "queue_type": "SimpleCQ"}]}))
    again = open_store()
    assert again.topic("a").created_at_offset == 0
    assert [r[2] for r in served(again, "a", 0)] == [b"x"]


def crash(open_store, store, how):
    """Stop uncleanly: close, then bring the abort marker back, and lose what ``how`` says."""
    store.close()
    data = store.data_dir
    StorePaths(data).abort.touch()
    if how in ("checkpoint_and_indexes_lost", "checkpoint_lost"):
        StorePaths(data).checkpoint.unlink()
    if how in ("checkpoint_and_indexes_lost", "indexes_lost"):
        for kind in QueueType:
            shutil.rmtree(StorePaths(data).index_root(kind), ignore_errors=True)
    reopened = open_store()
    assert reopened.recovery.clean is False
    return reopened


@pytest.mark.parametrize("how", ["checkpoint_and_indexes_lost", "checkpoint_lost", "indexes_lost"])
@pytest.mark.parametrize("new_type, new_queues", [("SimpleCQ", 2), ("BatchCQ", 1), ("SimpleCQ", 1)])
def test_recovery_after_delete_and_recreate_serves_only_the_new_records(open_store, how, new_type, new_queues):
    store = open_store()
    store.create_topic("t", 2, "SimpleCQ")
    store.create_topic("other", 1, "SimpleCQ")
    put_old(store, "t", 2, n=20)  # enough to cross SimpleCQ index files (16 units each)
    store.put_message("other", 0, b"between")
    served(store, "t", 0)
    store.flush()
    assert store.delete_topic("t")
    assert store.create_topic("t", new_queues, new_type)[0] is CreateStatus.CREATED
    created_at = store.topic("t").created_at_offset
    expected = {}
    for q in range(new_queues):
        if new_type == "BatchCQ":
            assert store.put_inner_batch("t", q, BatchPut(b"new-%d" % q, 3)).ok
        else:
            for i in range(3):
                assert store.put_message("t", q, b"new-%d-%d" % (q, i)).ok
        expected[q] = [r[:3] for r in served(store, "t", q)]
    assert all(records and records[0][0] == 0 for records in expected.values())
    store.put_message("other", 0, b"after")

    reopened = crash(open_store, store, how)
    assert reopened.topic("t").created_at_offset == created_at
    for q in range(new_queues):
        records = served(reopened, "t", q)
        assert [r[:3] for r in records] == expected[q]
        assert all(r[3] >= created_at for r in records)
    assert [r[2] for r in served(reopened, "other", 0)] == [b"between", b"after"]
    # And the queues go on from where the new topic was.
    result = reopened.put_message("t", 0, b"more")
    assert result.ok and result.queue_offset == expected[0][-1][0] + expected[0][-1][1]


def test_a_deleted_topic_stays_deleted_after_recovery(open_store):
    store = open_store()
    store.create_topic("gone", 1, "BatchCQ")
    store.create_topic("kept", 1)
    assert store.put_inner_batch("gone", 0, BatchPut(b"p", 2)).ok
    assert store.put_message("kept", 0, b"k").ok
    served(store, "kept", 0)
    assert store.delete_topic("gone")
    reopened = crash(open_store, store, "checkpoint_and_indexes_lost")
    assert [t.name for t in reopened.topics.all()] == ["kept"]
    assert not reopened.paths.topic_index(QueueType.BATCH_CQ, "gone").exists()
    assert [r[2] for r in served(reopened, "kept", 0)] == [b"k"]


def test_index_files_left_by_an_interrupted_delete_are_not_reused(store):
    """A crash between saving topics.json and deleting the index files leaves them behind:
    creating the topic again removes them."""
    store.create_topic("t", 1)
    put_old(store, "t", 1)
    served(store, "t", 0)
    store.flush()
    saved = store.data_dir / "saved-index"
    shutil.copytree(store.paths.topic_index(QueueType.SIMPLE_CQ, "t"), saved)
    assert store.delete_topic("t")
    shutil.copytree(saved, store.paths.topic_index(QueueType.SIMPLE_CQ, "t"))  # as if never deleted
    store.create_topic("t", 1)
    assert store.max_offset("t", 0) == 0
    assert store.put_message("t", 0, b"fresh").queue_offset == 0
    assert [r[2] for r in served(store, "t", 0)] == [b"fresh"]


def test_a_topic_created_past_a_cut_tail_gets_the_tail(open_store):
    """Recovery cuts the log below a topic's creation offset (the last records before it were
    torn, past the flushed position): the topic then starts at the new tail, and what it is sent
    from there is indexed."""
    store = open_store()
    store.create_topic("a", 1)
    for i in range(3):
        assert store.put_message("a", 0, b"a-%d" % i).ok
    last = store.put_message("a", 0, b"torn").physical_offsets[0]
    store.create_topic("late", 1)
    assert store.topic("late").created_at_offset == store.commitlog.max_offset > last
    store.close()
    store.paths.abort.touch()
    checkpoint = Checkpoint.load(store.paths.checkpoint)  # a crash before the last record was flushed
    checkpoint.commitlog_flushed_offset = last
    checkpoint.save(store.paths.checkpoint)
    segment = store.paths.commitlog / ("0" * 20)
    with open(segment, "r+b") as f:  # flip a byte of the last record's body
        f.seek(last + fmt.HEADER.size)
        byte = f.read(1)
        f.seek(last + fmt.HEADER.size)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_store()
    assert reopened.recovery.tail == last
    assert reopened.topic("late").created_at_offset == last
    assert reopened.put_message("late", 0, b"first").physical_offsets == (last,)
    assert [r[2] for r in served(reopened, "late", 0)] == [b"first"]
    assert [r[2] for r in served(reopened, "a", 0)] == [b"a-0", b"a-1", b"a-2"]


def test_delete_and_recreate_under_concurrent_writers(open_store):
    """Writers keep sending while the topic is deleted and created again with other types and
    queue counts: no write lands in the wrong incarnation, and the dispatcher keeps indexing."""
    store = open_store()
    store.create_topic("t", 2, "SimpleCQ")
    stop = threading.Event()
    accepted = []  # (physical offsets, queue id) of every accepted write
    errors = []

    def writer(kind):
        i = 0
        try:
            while not stop.is_set():
                i += 1
                q = i % 2
                if kind == "single":
                    result = store.put_message("t", q, b"s%d" % i)
                elif kind == "early":
                    result = store.put_early_batch("t", q, encode_message_batch([(b"e%d" % i, {}, 0)] * 3))
                else:
                    result = store.put_inner_batch("t", q, BatchPut(b"i%d" % i, 4))
                if result.ok:
                    accepted.append((result.physical_offsets, q))
                elif result.status not in (PutStatus.TOPIC_NOT_FOUND, PutStatus.QUEUE_NOT_FOUND,
                                           PutStatus.WRONG_QUEUE_TYPE):
                    errors.append(result)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(kind,)) for kind in ("single", "early", "inner")]
    for thread in threads:
        thread.start()
    try:
        shapes = [(1, "BatchCQ"), (2, "SimpleCQ"), (2, "BatchCQ"), (1, "SimpleCQ"), (2, "BatchCQ")]
        for queues, qtype in shapes:
            threading.Event().wait(0.05)
            assert store.delete_topic("t")
            assert store.create_topic("t", queues, qtype)[0] is CreateStatus.CREATED
        threading.Event().wait(0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert not errors, errors[:3]
    assert store.wait_dispatched(WAIT_S)
    assert store.dispatcher.position == store.commitlog.max_offset
    created_at = store.topic("t").created_at_offset
    expected = {q: sorted(p for offsets, queue in accepted if queue == q for p in offsets if p >= created_at)
                for q in range(2)}
    assert expected[0] and expected[1]
    for q in range(2):
        records = served(store, "t", q)
        assert sorted(r[3] for r in records) == expected[q]
        offsets = [r[0] for r in records]
        assert offsets[0] == 0 and all(b[0] == a[0] + a[1] for a, b in zip(records, records[1:]))
    # The same after a recovery that re-dispatches everything.
    before = {q: served(store, "t", q) for q in range(2)}
    reopened = crash(open_store, store, "checkpoint_and_indexes_lost")
    assert reopened.topic("t").queue_type is QueueType.BATCH_CQ
    assert {q: served(reopened, "t", q) for q in range(2)} == before
