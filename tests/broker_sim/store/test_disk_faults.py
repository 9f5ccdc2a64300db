"""Failed and short writes, and failed flushes, at the store: a failed append leaves the log and
the indexes exactly as before it; a failed flush refuses every later write until a restart.

A short pwritev and an fdatasync error cannot be forced reliably on a real disk, so these
tests inject them at the os call (the real faults are in tests/broker_sim/test_disk_full.py:
a full tmpfs and ext4, and a thinly provisioned ext4 whose fdatasync fails)."""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from pathlib import Path

import pytest

from broker_sim.store import MessageStore, PutStatus, QueueType, StoreConfig, encode_message_batch
from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.paths import StorePaths

SMALL = StoreConfig(segment_bytes=64 * 1024, simple_cq_units_per_file=16, batch_cq_units_per_file=8)


def files(data_dir: Path) -> dict[str, bytes]:
    """The commitlog and index files, by relative path."""
    paths = StorePaths(data_dir)
    return {str(p.relative_to(data_dir)): p.read_bytes()
            for root in (paths.commitlog, *map(paths.index_root, QueueType)) for p in sorted(root.rglob("*"))
            if p.is_file()}


def early_batch(prefix: bytes, count: int, size: int = 3000) -> bytes:
    return encode_message_batch([(prefix + b"-%d-" % i + b"x" * size, {}, 0) for i in range(count)])


def fail_pwritev_at(monkeypatch, call: int, error: OSError | None = None) -> None:
    """Make the ``call``-th pwritev from now on write half its bytes and report that count
    (a short write), or raise ``error`` after writing them."""
    real = os.pwritev
    calls = iter(range(1, 1_000_000))

    def pwritev(fd, buffers, offset):
        if next(calls) != call:
            return real(fd, buffers, offset)
        data = b"".join(bytes(b) for b in buffers)
        written = real(fd, [data[: len(data) // 2]], offset)
        if error is not None:
            raise error
        return written

    monkeypatch.setattr(os, "pwritev", pwritev)


def settled(store: MessageStore) -> dict[str, bytes]:
    assert store.wait_dispatched(10)
    store.flush()
    return files(store.data_dir)


@pytest.mark.parametrize("failure", ["short", "EIO"])
@pytest.mark.parametrize("crossing", [False, True], ids=["in-segment", "across-segments"])
def test_a_failed_append_leaves_log_and_indexes_as_before(tmp_path, monkeypatch, failure, crossing):
    with MessageStore(tmp_path, SMALL) as store:
        store.create_topic("t", 2, QueueType.SIMPLE_CQ)
        for i in range(3 if not crossing else 15):  # 15 x 3 KiB: the next batch crosses into segment 2
            assert store.put_message("t", i % 2, b"m%d" % i + b"y" * 3000).ok
        before = settled(store)
        log_end, queue_end = store.commitlog.max_offset, store.max_offset("t", 0)

        error = None if failure == "short" else OSError(errno.EIO, "Input/output error")
        fail_pwritev_at(monkeypatch, 3, error)  # the third record of the batch of five
        result = store.put_early_batch("t", 0, early_batch(b"refused", 5))
        monkeypatch.undo()

        assert result.status is (PutStatus.DISK_FULL if failure == "short" else PutStatus.DISK_FAILED)
        assert "nothing was stored" in result.detail or "restart" in result.detail
        assert (store.commitlog.max_offset, store.max_offset("t", 0)) == (log_end, queue_end)
        assert settled(store) == before if failure == "short" else files(tmp_path) == before
        if failure == "short":  # room again: the next batch takes the offsets the refused one did not
            assert store.put_early_batch("t", 0, early_batch(b"kept", 2)).queue_offset == queue_end
        else:
            assert store.put_message("t", 0, b"after").status is PutStatus.DISK_FAILED
        bodies = [bytes(b.data) for b in store.get_messages("t", 0, 0).batches]
        assert not any(b"refused" in body for body in bodies)

    with MessageStore(tmp_path, SMALL) as store:  # and after a restart
        bodies = [bytes(b.data) for b in store.get_messages("t", 0, 0).batches]
        assert not any(b"refused" in body for body in bodies)
        assert store.max_offset("t", 0) == queue_end + (2 if failure == "short" else 0)


@pytest.mark.parametrize("flush_mode", ["sync", "async"])
def test_a_failed_flush_refuses_writes_until_restart(tmp_path, monkeypatch, flush_mode):
    config = dataclasses.replace(SMALL, flush_mode=flush_mode, flush_interval_ms=10)
    real = os.fdatasync
    failed = []

    def fdatasync(fd):
        if not failed and Path(os.readlink(f"/proc/self/fd/{fd}")).parent.name == StorePaths(tmp_path).commitlog.name:
            failed.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    with MessageStore(tmp_path, config) as store:
        store.create_topic("t", 1, QueueType.SIMPLE_CQ)
        assert store.put_message("t", 0, b"before").ok
        store.flush()
        flushed = store.commitlog.max_offset
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        first = store.put_message("t", 0, b"during")
        if flush_mode == "sync":
            assert first.status is PutStatus.DISK_FAILED and "restart" in first.detail
        else:  # acknowledged; the flusher meets the failure
            assert first.ok
            for _ in range(500):
                if store.disk.failure:
                    break
                time.sleep(0.01)
        assert failed and "restart" in store.disk.failure
        for _ in range(500):
            if not store._flusher.running:
                break
            time.sleep(0.01)
        assert not store._flusher.running, "the flusher goes on after the disk failed"
        # fdatasync works again, but the store never flushes again as if nothing happened.
        for body in (b"after-1", b"after-2"):
            result = store.put_message("t", 0, body)
            assert result.status is PutStatus.DISK_FAILED and "restarted" in result.detail
        with pytest.raises(Exception, match="restart"):
            store.flush()
        time.sleep(0.1)  # the flusher's turns: none moves the checkpoint past the failure
        assert Checkpoint.load(StorePaths(tmp_path).checkpoint).commitlog_flushed_offset == flushed
        assert store.get_messages("t", 0, 0).message_count >= 1  # reads go on
    assert StorePaths(tmp_path).abort.exists()  # the stop was not clean: the next start recovers
    monkeypatch.undo()

    with MessageStore(tmp_path, config) as store:
        assert store.put_message("t", 0, b"restarted").ok
        bodies = [bytes(b.data) for b in store.get_messages("t", 0, 0).batches]
        assert any(b"before" in b for b in bodies) and not any(b"after-" in b for b in bodies)


def test_a_topic_that_cannot_be_saved_is_not_created(tmp_path, monkeypatch):
    """A topic whose topic journal write fails (a full disk) must not be served from memory:
    its messages would be acknowledged and then lost with the topic at the next start."""
    with MessageStore(tmp_path, SMALL) as store:
        real = os.fdatasync
        journal = StorePaths(tmp_path).topics_journal

        def fdatasync(fd):
            if journal.exists() and os.path.samestat(os.fstat(fd), journal.stat()):
                raise OSError(errno.ENOSPC, "No space left on device", str(journal))
            return real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        with pytest.raises(OSError):
            store.create_topic("t", 1, QueueType.SIMPLE_CQ)
        monkeypatch.undo()
        assert store.topics.get("t") is None
        assert store.put_message("t", 0, b"lost?").status is PutStatus.TOPIC_NOT_FOUND
