"""The transaction half log shares the commitlog's write path and its faults: a prepare whose
half log write is short (injected at os.pwritev: a real one cannot be forced reliably) is
refused with DISK_FULL and keeps nothing; the next prepare and the commit see only what was
acknowledged. A failed half log flush puts the store in its failed state."""

import errno
import os

import pytest

from broker_sim.store import MessageStore, PutStatus, QueueType, StoreConfig, encode_message_batch
from broker_sim.txn.service import TransactionService

CONFIG = StoreConfig(segment_bytes=1 << 20)


def early_batch(prefix: bytes, count: int) -> bytes:
    return encode_message_batch([(prefix + b"-%d" % i, {}, 0) for i in range(count)])


@pytest.fixture
def service(tmp_path):
    with MessageStore(tmp_path / "data", CONFIG) as store:
        store.create_topic("t", 1, QueueType.SIMPLE_CQ)
        service = TransactionService(store, store.paths, sweep=False)
        yield service
        service.close()


def short_pwritev_on(monkeypatch, call: int) -> None:
    real, calls = os.pwritev, iter(range(1, 1_000_000))

    def pwritev(fd, buffers, offset):
        if next(calls) != call:
            return real(fd, buffers, offset)
        data = b"".join(bytes(b) for b in buffers)
        return real(fd, [data[: len(data) // 2]], offset)

    monkeypatch.setattr(os, "pwritev", pwritev)


def test_a_short_half_log_write_refuses_the_prepare_whole(service, monkeypatch):
    puts = service.prepared("txn-1")
    assert puts.put_early_batch("t", 0, early_batch(b"kept", 3)).ok
    short_pwritev_on(monkeypatch, 2)  # the second record of the batch of three
    refused = puts.put_early_batch("t", 0, early_batch(b"refused", 3))
    monkeypatch.undo()
    assert refused.status is PutStatus.DISK_FULL and "nothing was stored" in refused.detail
    assert puts.put_early_batch("t", 0, early_batch(b"after", 2)).ok
    service.commit([("txn-1", 5)])
    store = service.store
    assert store.wait_dispatched(10)
    bodies = [bytes(b.data) for b in store.get_messages("t", 0, 0).batches]
    assert len(bodies) == 5 and not any(b"refused" in body for body in bodies)


def test_a_failed_half_log_flush_fails_the_store(service, monkeypatch):
    assert service.prepared("txn-1").put_message("t", 0, b"prepared").ok

    def fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with pytest.raises(Exception, match="restart"):
        service.commit([("txn-1", 1)])
    monkeypatch.undo()
    assert "restart" in service.store.disk.failure
    with pytest.raises(Exception, match="restart"):  # not retried as if the pages were still dirty
        service.commit([("txn-1", 1)])
    assert service.prepared("txn-2").put_message("t", 0, b"x").status is PutStatus.DISK_FAILED
    assert service.store.put_message("t", 0, b"y").status is PutStatus.DISK_FAILED
