"""The concurrent dispatch mode (RIP-52) against the serial one: the same commitlog gives
byte-identical index files, while the store runs (early batches, inner batches, segment ends,
small chunks and a small ring) and after a crash (torn tail, a queue that lost units, a
re-dispatch over units already written); messages are readable only once indexed; the orderly
ring releases in id order with back-pressure."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from broker_sim.store import (
    BatchPut,
    GetStatus,
    MessageStore,
    PutContext,
    QueueType,
    StoreConfig,
    concurrent_dispatcher,
)
from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.chunk_index import parse_records
from broker_sim.store.concurrent_dispatcher import ConcurrentDispatcher, OrderlyRing
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt

SERIAL = StoreConfig(segment_bytes=64 * 1024, simple_cq_units_per_file=16, batch_cq_units_per_file=8,
                     flush_interval_ms=60_000, index_flush_interval_ms=60_000)
# Chunks of a few records and a ring of 3 slots: many chunks in flight, cut anywhere.
CONCURRENT = {
    pool: dataclasses.replace(SERIAL, dispatch_mode="concurrent", dispatch_pool=pool, dispatch_chunk_bytes=6000,
                              dispatch_ring_slots=3)
    for pool in ("process", "thread")
}
CLOCK_MS = 1_700_000_000_000


def fixed_clock():
    return CLOCK_MS


def fill(store: MessageStore, seed: int = 7) -> list[int]:
    """A mixed, deterministic log; returns the physical offsets of the records, in order."""
    rng = np.random.default_rng(seed)
    store.create_topic("S", 3)
    store.create_topic("B", 3, "BatchCQ")
    store.create_topic("G", 1)
    physical = []
    for i in range(260):
        queue_id = int(rng.integers(3))
        size = int(rng.choice([40, 300, 1500, 5000]))
        tags = [None, "TagA", "TagB", "Tag-" + str(i % 7)][i % 4]
        props = {"TAGS": tags} if tags else {}
        kind = i % 5
        if kind == 0:
            result = store.put_message("S", queue_id, bytes([i % 251]) * size, properties={**props, "KEYS": f"k{i}"},
                                       context=PutContext(born_timestamp_ms=CLOCK_MS))
        elif kind in (1, 2):
            n = int(rng.integers(1, 6))
            payload = fmt.encode_message_batch([(bytes([j]) * (size // n + 1), props, j) for j in range(n)])
            result = store.put_early_batch("S", queue_id, payload,
                                       context=PutContext(born_timestamp_ms=CLOCK_MS))
        elif kind == 3:
            n = int(rng.integers(1, 9))
            result = store.put_inner_batch("B", queue_id, BatchPut(b"b%d" % i * (size // 4 + 1), n, properties=props),
                                       context=PutContext(born_timestamp_ms=CLOCK_MS))
        else:
            result = store.put_message("G", 0, b"g" * size,
                                       context=PutContext(born_timestamp_ms=CLOCK_MS))
        assert result.ok, result.detail
        physical += result.physical_offsets
        if i == 130:  # records of the deleted G stay in the log and are never indexed again
            assert store.wait_dispatched(10)
            store.delete_topic("G")
            store.create_topic("G", 1)
    assert store.wait_dispatched(10)
    return physical


def index_files(data_dir: Path) -> dict:
    root = Path(data_dir)
    return {str(p.relative_to(root)): p.read_bytes()
            for kind in QueueType for p in StorePaths(root).index_root(kind).rglob("*") if p.is_file()}


def commitlog_files(data_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in StorePaths(data_dir).commitlog.iterdir()}


def assert_same_index_files(a: Path, b: Path) -> None:
    files_a, files_b = index_files(a), index_files(b)
    assert sorted(files_a) == sorted(files_b)
    differ = [name for name in files_a if files_a[name] != files_b[name]]
    assert not differ, f"index files differ: {differ}"
    for kind in QueueType:
        assert any(name.startswith(StorePaths(a).index_root(kind).name + "/") for name in files_a), kind


@pytest.fixture(params=["vector", "scalar", "in-place"])
def runs(request, monkeypatch):
    """The writer's three ways: every chunk parsed by the pool and every queue's run written
    with numpy, or unit by unit; or every chunk left to the writer, record by record."""
    vector_run, pooled_chunk = {"vector": (1, 1), "scalar": (1 << 30, 1), "in-place": (1, 1 << 30)}[request.param]
    monkeypatch.setattr(concurrent_dispatcher, "_SHORTEST_VECTOR_RUN", vector_run)
    monkeypatch.setattr(concurrent_dispatcher, "_SMALLEST_POOLED_CHUNK", pooled_chunk)
    return request.param


@pytest.mark.parametrize("pool", ["process", "thread"])
def test_both_modes_write_the_same_index_files(tmp_path, pool, runs):
    for name, config in (("serial", SERIAL), ("concurrent", CONCURRENT[pool])):
        with MessageStore(tmp_path / name, config, now_ms=fixed_clock) as store:
            fill(store)
            assert store.dispatch_lag() == (0, 0)
            if name == "concurrent":
                assert isinstance(store.dispatcher, ConcurrentDispatcher) and store.dispatcher._ring.next_out > 20
    assert commitlog_files(tmp_path / "serial") == commitlog_files(tmp_path / "concurrent")
    assert len(commitlog_files(tmp_path / "serial")) >= 5  # segment ends (BLANK) were crossed
    assert_same_index_files(tmp_path / "serial", tmp_path / "concurrent")


def crash_image(tmp_path: Path) -> Path:
    """A data directory as a crash leaves it: abort marker, a torn last record, a checkpoint
    past records whose units one queue lost, and units already written past the checkpoint."""
    live = tmp_path / "live"
    store = MessageStore(live, SERIAL, now_ms=fixed_clock)
    try:
        physical = fill(store)
        image = tmp_path / "image"
        shutil.copytree(live, image, copy_function=shutil.copyfile)  # the store is still open: abort is there
    finally:
        store.close()
    assert StorePaths(image).abort.exists()
    middle = physical[len(physical) // 2]
    checkpoint = Checkpoint(commitlog_flushed_offset=middle, index_flushed_offset=middle, updated_ms=CLOCK_MS)
    checkpoint.save(StorePaths(image).checkpoint)
    kept, *lost = sorted(StorePaths(image).queue_index(QueueType.SIMPLE_CQ, "S", 1).iterdir())
    assert len(lost) >= 3
    for path in lost:  # units of records before the checkpoint: the queue is rebuilt from the log
        path.unlink()
    last = sorted(StorePaths(image).commitlog.iterdir())[-1]
    tail = physical[-1] - int(last.name)
    with open(last, "r+b") as f:  # tear the last record
        f.seek(tail + 20)
        f.write(bytes(32))
    return image


def test_recovery_rebuilds_the_same_index_files_in_both_modes(tmp_path, runs):
    image = crash_image(tmp_path)
    reports = {}
    for name, config in (("serial", SERIAL), ("concurrent", CONCURRENT["process"])):
        shutil.copytree(image, tmp_path / name, copy_function=shutil.copyfile)
        with MessageStore(tmp_path / name, config, now_ms=fixed_clock) as store:
            reports[name] = store.recovery
    assert reports["serial"] == reports["concurrent"]
    report = reports["serial"]
    assert not report.clean and report.stop_reason.endswith("mismatch") and report.redispatched_records > 0
    assert_same_index_files(tmp_path / "serial", tmp_path / "concurrent")
    assert commitlog_files(tmp_path / "serial") == commitlog_files(tmp_path / "concurrent")


@pytest.fixture
def concurrent_store(tmp_path, monkeypatch):
    monkeypatch.setattr(concurrent_dispatcher, "_SMALLEST_POOLED_CHUNK", 1)
    store = MessageStore(tmp_path / "data", CONCURRENT["process"])
    yield store
    store.close()


def test_a_message_is_readable_only_once_indexed(concurrent_store):
    store = concurrent_store
    store.create_topic("s", 1)
    store.dispatcher.stop()
    store.put_message("s", 0, b"x")
    assert store.max_offset("s", 0) == 0
    assert store.get_messages("s", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    lag_bytes, _lag_ms = store.dispatch_lag()
    assert lag_bytes == store.commitlog.max_offset > 0
    assert store.dispatcher.dispatch() == 1
    assert store.max_offset("s", 0) == 1 and store.dispatch_lag() == (0, 0)
    store.dispatcher.start()


def test_waiters_are_woken_by_the_concurrent_dispatcher(concurrent_store):
    store = concurrent_store
    store.create_topic("b", 2, "BatchCQ")
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait_for_messages("b", 1, 2, timeout_s=10)))
    waiter.start()
    for _ in range(3):
        assert store.put_inner_batch("b", 1, BatchPut(b"x" * 100, 1)).ok
    waiter.join(10)
    assert woke == [True]


def test_dispatch_lag_in_time_is_the_age_of_the_oldest_unindexed_record(tmp_path):
    now = [CLOCK_MS]
    with MessageStore(tmp_path / "data", SERIAL, now_ms=lambda: now[0]) as store:
        store.create_topic("s", 1)
        store.dispatcher.stop()
        store.put_message("s", 0, b"first")
        now[0] += 250
        store.put_message("s", 0, b"second")
        now[0] += 100
        assert store.dispatch_lag() == (store.commitlog.max_offset, 350)
        store.dispatcher.dispatch()
        assert store.dispatch_lag() == (0, 0)


def test_orderly_ring_releases_in_id_order_with_back_pressure():
    ring = OrderlyRing(3)
    ids = [ring.reserve() for _ in range(3)]
    assert ids == [0, 1, 2] and ring.reserve() is None  # a fourth would run 3 ahead of the writer
    ring.put(2, "c")
    ring.put(0, "a")
    with pytest.raises(ValueError):
        ring.put(3, "d")  # not reserved
    assert ring.take() == "a"
    assert ring.reserve() == 3
    taken = []
    taker = threading.Thread(target=lambda: taken.extend(ring.take() for _ in range(3)))
    taker.start()
    ring.put(3, "d")
    ring.put(1, "b")
    taker.join(10)
    assert taken == ["b", "c", "d"] and ring.pending == 0
    with pytest.raises(LookupError):
        ring.take()


def test_parse_finds_properties_as_find_property_does():
    """TAGS inside a body or a property value is not a TAGS property; the first one counts."""
    props = [b"KEYS\x01xTAGS\x01no\x02TAGS\x01yes\x02TAGS\x01again\x02", b"TAGS\x01first\x02", b"", b"XTAGS\x01no\x02"]
    records, positions = b"", []
    for i, raw in enumerate(props):
        positions.append(len(records))
        body = b"TAGS\x01inbody\x02" * (i + 1)
        header = fmt.HEADER.pack(0, fmt.MAGIC_V1, 0, i, 0, i, len(records), 0, 0, bytes(8), 0, bytes(8), 0, 0,
                                 len(body))
        record = bytearray(header + body + b"\x01t" + len(raw).to_bytes(2, "big") + raw)
        record[0:4] = len(record).to_bytes(4, "big")
        records += bytes(record)
    index = parse_records(records, 0, 0, 0, len(records), np.array(positions, dtype=np.int64))
    expected = [fmt.find_property(raw, b"TAGS") for raw in props]
    assert expected == [b"yes", b"first", None, None]
    assert index.tags_codes.tolist() == [fmt.java_string_hash("yes"), fmt.java_string_hash("first"), 0, 0]
    assert index.queue_ids.tolist() == [0, 1, 2, 3] and index.topics == (b"t",)
    assert index.sizes.tolist() == np.diff(positions + [len(records)]).tolist()


def test_bad_dispatch_options_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="dispatch_mode='parallel': use one of serial, concurrent"):
        StoreConfig(dispatch_mode="parallel")
    with pytest.raises(ValueError, match="dispatch_workers=0: must be positive"):
        StoreConfig(dispatch_workers=0)


def test_a_dead_worker_process_is_replaced_and_indexing_goes_on(concurrent_store, caplog):
    store = concurrent_store
    store.create_topic("s", 1)
    assert store.put_message("s", 0, b"before").ok and store.wait_dispatched(10)
    workers = list(store.dispatcher._executor._processes.values())
    assert workers, "the worker processes were started with the store"
    for worker in workers:
        worker.kill()
        worker.join(10)
    for i in range(5):
        assert store.put_message("s", 0, b"after %d" % i).ok
    assert store.wait_dispatched(30), "indexing did not resume after the workers died"
    assert store.max_offset("s", 0) == 6
    assert "dispatch failed" in caplog.text


def test_concurrent_dispatch_in_sync_flush_mode_indexes_what_is_flushed(tmp_path, monkeypatch):
    monkeypatch.setattr(concurrent_dispatcher, "_SMALLEST_POOLED_CHUNK", 1)
    config = dataclasses.replace(CONCURRENT["thread"], flush_mode="sync")
    with MessageStore(tmp_path / "data", config) as store:
        store.create_topic("s", 2)
        payload = fmt.encode_message_batch([(b"m%d" % i, {"TAGS": "T"}, 0) for i in range(50)])
        for queue_id in (0, 1, 0):
            assert store.put_early_batch("s", queue_id, payload).ok
        assert store.wait_dispatched(10)
        assert store.dispatcher.position == store.commitlog.flushed_offset == store.commitlog.max_offset
        assert (store.max_offset("s", 0), store.max_offset("s", 1)) == (100, 50)
        assert store.lookup("s", 0, 99).tags_code == fmt.java_string_hash("T")
