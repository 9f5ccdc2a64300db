"""Idempotent puts: a (producer id, sequence) stamp is stored once, also across reopening."""

from broker_sim.store import BatchPut, PutContext, PutStatus, QueueType
from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.paths import StorePaths
from broker_sim.store.producer_state import ProducerState
from rmq_wire import record as fmt


def early_payload(count: int, size: int = 100) -> bytes:
    return fmt.encode_message_batch([(b"%d" % i * size, {}, 0) for i in range(count)])


def topics(store):
    store.create_topic("simple", 2, QueueType.SIMPLE_CQ)
    store.create_topic("batch", 2, QueueType.BATCH_CQ)


def put_all_kinds(store, producer_id="p1"):
    return [
        store.put_message("simple", 0, b"one", context=PutContext(producer=(producer_id, 0))),
        store.put_early_batch("simple", 1, early_payload(5), context=PutContext(producer=(producer_id, 1))),
        store.put_inner_batch("batch", 0, BatchPut(b"payload" * 10, 7),
                              context=PutContext(producer=(producer_id, 2))),
    ]


def without_duplicate_flag(result):
    return (result.status, result.queue_id, result.queue_offset, result.count, result.physical_offsets,
            result.store_timestamp)


def test_a_repeated_stamp_gets_the_first_answer_and_stores_nothing(store):
    topics(store)
    first = put_all_kinds(store)
    end = store.commitlog.max_offset
    again = put_all_kinds(store)
    assert all(r.ok and not r.duplicate for r in first) and all(r.duplicate for r in again)
    assert [without_duplicate_flag(r) for r in again] == [without_duplicate_flag(r) for r in first]
    assert store.commitlog.max_offset == end
    store.wait_dispatched(5)
    assert [store.max_offset("simple", 0), store.max_offset("simple", 1), store.max_offset("batch", 0)] == [1, 5, 7]


def test_stamps_are_per_producer(store):
    topics(store)
    store.put_message("simple", 0, b"a", context=PutContext(producer=("p1", 0)))
    assert not store.put_message("simple", 0, b"b", context=PutContext(producer=("p2", 0))).duplicate
    assert not store.put_message("simple", 0, b"c").duplicate  # unstamped puts are never deduplicated
    assert not store.put_message("simple", 0, b"c").duplicate
    store.wait_dispatched(5)
    assert store.max_offset("simple", 0) == 4


def test_stamps_survive_a_clean_reopen_and_a_crash(open_store, tmp_path):
    store = open_store()
    topics(store)
    first = put_all_kinds(store)
    store.close()
    reopened = open_store()
    assert [without_duplicate_flag(r) for r in put_all_kinds(reopened)] == [without_duplicate_flag(r) for r in first]
    end = reopened.commitlog.max_offset
    reopened.close()
    StorePaths(tmp_path / "data").abort.touch()  # as a crash leaves it: recovery scans the log
    recovered = open_store()
    assert recovered.recovery.clean is False
    assert [without_duplicate_flag(r) for r in put_all_kinds(recovered)] == [without_duplicate_flag(r) for r in first]
    assert recovered.commitlog.max_offset == end


def test_a_failed_put_releases_its_stamp(store):
    topics(store)
    refused = store.put_inner_batch("simple", 0, BatchPut(b"x", 1), context=PutContext(producer=("p1", 5)))
    assert refused.status is PutStatus.WRONG_QUEUE_TYPE
    stored = store.put_message("simple", 0, b"x", context=PutContext(producer=("p1", 5)))
    assert stored.ok and not stored.duplicate


def test_a_stamp_being_stored_answers_send_in_progress():
    state = ProducerState()
    assert state.begin("p", 1) is None
    in_progress = state.begin("p", 1)
    assert in_progress.status is PutStatus.SEND_IN_PROGRESS and "retry" in in_progress.detail


def test_the_window_keeps_the_recent_sequences_of_the_recent_producers():
    state = ProducerState(sequences_per_producer=3, max_producers=2)
    from broker_sim.store.status import PutResult
    ok = PutResult(PutStatus.PUT_OK, "", 0, 0, 1, (0,), 0)
    for sequence in range(5):
        assert state.begin("a", sequence) is None
        state.end("a", sequence, ok)
    assert state.begin("a", 1) is None  # fell out of the window: stored again
    assert state.begin("a", 4).duplicate
    for producer in ("b", "c"):
        state.begin(producer, 0)
        state.end(producer, 0, ok)
    assert state.begin("a", 4) is None  # "a" was the least recently seen of three producers


def test_bad_stamps_are_refused_with_a_sentence(store):
    topics(store)
    for producer, words in ((("", 1), "producer id"), (("a:b", 1), "without ':'"), (("p", -1), "sequence -1")):
        result = store.put_message("simple", 0, b"x", context=PutContext(producer=producer))
        assert result.status is PutStatus.MESSAGE_ILLEGAL and words in result.detail


def test_recovery_cuts_off_a_stamped_early_batch_that_the_end_cut_short(open_store, tmp_path):
    store = open_store()
    topics(store)
    store.put_message("simple", 0, b"before")
    result = store.put_early_batch("simple", 0, early_payload(4), context=PutContext(producer=("p1", 9)))
    store.close()
    # Keep the batch's first two records: as if the process died while writing the others.
    cut = result.physical_offsets[2]
    segment = sorted(StorePaths(tmp_path / "data").commitlog.iterdir())[-1]
    start = int(segment.name)
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.seek(cut - start)
        f.write(bytes(size - (cut - start)))
    StorePaths(tmp_path / "data").abort.touch()
    # ... before the batch was flushed: recovery may cut only what lies past the flushed position.
    checkpoint = Checkpoint.load(StorePaths(tmp_path / "data").checkpoint)
    checkpoint.commitlog_flushed_offset = result.physical_offsets[0]
    checkpoint.save(StorePaths(tmp_path / "data").checkpoint)
    recovered = open_store()
    assert recovered.commitlog.max_offset == result.physical_offsets[0]
    recovered.wait_dispatched(5)
    assert recovered.max_offset("simple", 0) == 1  # nothing of the batch is served
    again = recovered.put_early_batch("simple", 0, early_payload(4), context=PutContext(producer=("p1", 9)))
    assert again.ok and not again.duplicate and again.queue_offset == 1
