"""Recovery of lost or damaged index units (SimpleCQ, BatchCQ) and of a lost or corrupt
checkpoint: indexes are rebuilt from the CommitLog. Stops and helpers: recovery_helpers.py."""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_sim.store import (
    QueueType,
)
from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.paths import StorePaths
from recovery_helpers import (
    QUEUES,
    TOPICS,
    UNIT_BYTES,
    UNITS_PER_FILE,
    WAIT_S,
    Model,
    check_model,
    closing_quietly_on_failure,
    copy_dir,
    create_topics,
    fill,
    load_files,
    log_end,
    open_at,
    put_inner,
    put_single,
    restore,
    snapshot,
)

# --- 4: index loss and checkpoint loss -----------------------------------------------------------

LATE_TOPICS = {"LS": (1, QueueType.SIMPLE_CQ), "LB": (1, QueueType.BATCH_CQ)}  # written after the checkpoint
ALL_TOPICS = {**TOPICS, **LATE_TOPICS}
ALL_QUEUES = QUEUES + [(topic, 0) for topic in LATE_TOPICS]


@dataclass
class IndexImage:
    files: dict  # a copy taken while open: the checkpoint is mid-way
    snapshot: dict  # what the indexes served before the stop
    checkpoint_units: dict  # (topic, queue) -> units indexed at the checkpoint
    records: int  # commitlog records in all
    records_after_checkpoint: int
    log_end: int


def queue_type(topic):
    return ALL_TOPICS[topic][1]


def index_dir(work, topic, queue_id) -> Path:
    return StorePaths(work).queue_index(queue_type(topic), topic, queue_id)


@pytest.fixture(scope="module")
def index_image(tmp_path_factory) -> IndexImage:
    root = tmp_path_factory.mktemp("index")
    store = open_at(root / "live")
    create_topics(store, ALL_TOPICS)
    model = Model()
    fill(store, model, 0, 70)
    assert store.wait_dispatched(WAIT_S)
    store.flush()  # the checkpoint: units up to here are on disk
    units = {}
    for key in QUEUES:
        offsets = {store.lookup(*key, o).physical_offset for o in range(store.max_offset(*key))}
        units[key] = len(offsets)
    at_checkpoint = model.records
    fill(store, model, 70, 70)
    for _ in range(12):
        put_single(store, model, "LS", 0)
        put_inner(store, model, "LB", 0, 3)
    assert store.wait_dispatched(WAIT_S)
    check_model(store, model)
    snap = snapshot(store, ALL_QUEUES)
    end = log_end(store)
    copy_dir(root / "live", root / "image")
    store.close()
    return IndexImage(load_files(root / "image"), snap, units, model.records, model.records - at_checkpoint, end)


def lose_units(work, topic, queue_id, first, how, rng):
    """Lose a queue's index units from unit ``first`` on: zero them, cut the file in the middle
    of a unit, fill them with garbage, or delete the files holding only lost units."""
    qtype = queue_type(topic)
    unit, file_bytes = UNIT_BYTES[qtype], UNIT_BYTES[qtype] * UNITS_PER_FILE[qtype]
    at = first * unit
    for path in sorted(index_dir(work, topic, queue_id).iterdir()):
        start = int(path.name)
        if start + file_bytes <= at:
            continue
        if start >= at:
            path.unlink()  # a later file: gone
            continue
        rel = at - start
        if how == "zero_tail":
            with open(path, "r+b") as f:
                f.seek(rel)
                f.write(bytes(file_bytes - rel))
        elif how == "torn_unit":
            os.truncate(path, rel + unit // 2)
        elif how == "garbage_tail":
            with open(path, "r+b") as f:
                f.seek(rel)
                f.write(rng.randbytes(file_bytes - rel))
        # "delete_files": the file holding the first lost unit stays whole


@pytest.mark.parametrize("log_flushed", ["with_index", "further"])
@pytest.mark.parametrize("how", ["zero_tail", "torn_unit", "garbage_tail", "delete_files"])
def test_index_units_after_checkpoint_are_rebuilt(index_image, tmp_path, how, log_flushed):
    """Index units written after the checkpoint are lost (the stop was unclean): recovery's
    re-dispatch rebuilds the indexes identically; queues whose whole index is lost too.
    "further": the checkpoint has the log flushed to its end but the indexes only mid-way,
    as the async flusher leaves it between two thorough index flushes."""
    work = tmp_path / "work"
    restore(index_image.files, work)
    if log_flushed == "further":
        saved = Checkpoint.load(StorePaths(work).checkpoint)
        assert 0 < saved.index_flushed_offset < index_image.log_end
        Checkpoint(index_image.log_end, saved.index_flushed_offset, saved.updated_ms).save(StorePaths(work).checkpoint)
    rng = random.Random(7)
    for key in QUEUES:
        lose_units(work, *key, index_image.checkpoint_units[key], how, rng)
    for topic in LATE_TOPICS:
        shutil.rmtree(index_dir(work, topic, 0))
    store = open_at(work)
    with closing_quietly_on_failure(store):
        assert store.recovery.clean is False
        assert store.recovery.redispatched_records >= index_image.records_after_checkpoint, store.recovery
        assert snapshot(store, ALL_QUEUES) == index_image.snapshot


def damage_checkpoint(path: Path, how: str):
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-5])
    elif how == "flipped":
        raw = bytearray(path.read_bytes())
        raw[12] ^= 0x40
        path.write_bytes(bytes(raw))
    elif how == "garbage":
        path.write_bytes(random.Random(3).randbytes(len(path.read_bytes())))


@pytest.mark.parametrize("indexes", ["kept", "deleted"])
@pytest.mark.parametrize("how", ["missing", "empty", "truncated", "flipped", "garbage"])
def test_lost_or_corrupt_checkpoint_recovers_from_start(index_image, tmp_path, how, indexes):
    """Without a usable checkpoint, recovery scans and re-dispatches from the log's start:
    reads are identical, even with every index file deleted."""
    work = tmp_path / "work"
    restore(index_image.files, work)
    damage_checkpoint(StorePaths(work).checkpoint, how)
    if indexes == "deleted":
        for kind in QueueType:
            shutil.rmtree(StorePaths(work).index_root(kind))
    store = open_at(work)
    with closing_quietly_on_failure(store):
        report = store.recovery
        assert (report.clean, report.scanned_from) == (False, 0), report
        assert report.redispatched_records >= index_image.records, report
        assert snapshot(store, ALL_QUEUES) == index_image.snapshot


@pytest.mark.parametrize("loss", ["last_file_deleted", "queue_dir_deleted"])
def test_index_lost_before_checkpoint_after_clean_close(index_image, tmp_path, loss):
    work = tmp_path / "work"
    restore(index_image.files, work)
    open_at(work).close()  # a clean stop: the checkpoint now covers every index unit
    StorePaths(work).abort.touch()
    lost = index_dir(work, "S", 0)
    if loss == "last_file_deleted":
        max(lost.iterdir()).unlink()
    else:
        shutil.rmtree(lost)
    store = open_at(work)
    with closing_quietly_on_failure(store):
        expected_end = index_image.snapshot[("S", 0)][1]
        assert store.max_offset("S", 0) == expected_end, "index units lost before the checkpoint are not rebuilt"
        assert snapshot(store, ALL_QUEUES) == index_image.snapshot
        assert store.put_message("S", 0, b"next").queue_offset == expected_end


def test_index_lost_before_checkpoint_with_later_records(index_image, tmp_path):
    work = tmp_path / "work"
    restore(index_image.files, work)
    # S/0 keeps fewer units than the checkpoint says are on disk; records after it follow.
    lose_units(work, "S", 0, index_image.checkpoint_units[("S", 0)] - 10, "zero_tail", None)
    store = open_at(work)
    with closing_quietly_on_failure(store):
        assert snapshot(store, ALL_QUEUES) == index_image.snapshot
