"""A full disk, for real: a broker process (the CLI) on a 24 MiB tmpfs and on a 32 MiB ext4
image, flushing async and sync. Batches are sent until the disk is full: the refusal is the
typed DiskFullError, nothing of the refused batch is readable, everything acknowledged is;
once a filler file beside the data directory is removed, sends resume at the right offsets;
after a restart every acknowledged message is there, none of the refused. The broker never
dies of a signal (SIGBUS, before the fix)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from broker_sim.testing import broker_process, output_of, wait_listening
from rmq_spark import (
    Admin,
    DiskFailedError,
    DiskFullError,
    Message,
    OffsetRange,
    PopConsumer,
    Producer,
    RangeReader,
    TransportConfig,
)
from support.small_disk import MIB, fill, mounted, thin_ext4

TOPIC = "full"
QUEUES = 2
BATCH = 50
BODY_BYTES = 1000
WAIT_S = 30
# A refused start's exit: it closed its output in one CI run under load and took over 30 s more to exit.
EXIT_WAIT_S = 120


def batch(number: int, queue_id: int) -> list[Message]:
    return [Message(TOPIC, f"{number}-{i}-".encode().ljust(BODY_BYTES, b"x"), queue_id=queue_id) for i in range(BATCH)]


def read_all(endpoint: str) -> dict[int, list[bytes]]:
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(TOPIC, q, 0) for q in range(QUEUES)])
    rows = sorted(zip(table["queue_id"].to_pylist(), table["queue_offset"].to_pylist(), table["body"].to_pylist()))
    read = {q: [] for q in range(QUEUES)}
    for queue_id, offset, body in rows:
        assert offset == len(read[queue_id]), f"queue {queue_id}: offset {offset} out of order"
        read[queue_id].append(body)
    return read


def wait_readable(endpoint: str, acked: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        read = read_all(endpoint)
        if all(len(read[q]) >= len(acked[q]) for q in acked) or time.monotonic() > deadline:
            return read
        time.sleep(0.05)


def stop(process) -> None:
    """SIGTERM, and the broker must stop cleanly: exit code 0, not a signal."""
    process.send_signal(signal.SIGTERM)
    assert process.wait(WAIT_S) == 0, output_of(process)


@pytest.mark.parametrize("flush", ["async", "sync"])
@pytest.mark.parametrize("kind, size_mib", [("tmpfs", 24), ("ext4", 32)])
def test_a_full_disk_refuses_whole_batches_and_loses_nothing(tmp_path, kind, size_mib, flush):
    with mounted(kind, size_mib, tmp_path) as disk:
        data, filler = disk / "data", disk / "filler"
        args = ("--flush", flush, "--segment-bytes", "1m", "--disk-reserve", "1m")
        acked: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        with broker_process(data, *args) as (endpoint, process):
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, QUEUES, "BatchCQ")
            fill(filler, leave_bytes=6 * MIB)
            quick = TransportConfig(retry_backoff_ms=10, retry_backoff_max_ms=20)
            # a full disk is retriable (space may come back): retried for 5 s here, not the default 2 min
            with Producer(endpoint, transport=quick, request_timeout_ms=5000, delivery_timeout_ms=5000) as producer:
                refusal = None
                for number in range(1000):  # about 120 batches fit 6 MiB
                    queue_id = number % QUEUES
                    messages = batch(number, queue_id)
                    try:
                        results = producer.send_batch(messages)
                    except DiskFullError as err:
                        refusal = err
                        break
                    assert [r.queue_offset for r in results] == list(range(len(acked[queue_id]),
                                                                             len(acked[queue_id]) + BATCH))
                    acked[queue_id] += [m.body for m in messages]
                assert refusal is not None, "the disk never filled up"
                assert refusal.retriable and "free" in str(refusal) and "nothing was stored" in str(refusal)
                assert "broker bug" not in str(refusal)
                assert sum(map(len, acked.values())) >= 10 * BATCH

                # Reads go on; exactly the acknowledged messages are readable.
                assert wait_readable(endpoint, acked) == acked
                with pytest.raises(DiskFullError):  # still full: still refused, whole
                    producer.send_batch(batch(9999, 0))
                assert read_all(endpoint) == acked

                filler.unlink()
                for number in range(1000, 1010):  # sends resume, at the offsets after the acknowledged ones
                    queue_id = number % QUEUES
                    messages = batch(number, queue_id)
                    results = producer.send_batch(messages)
                    assert results[0].queue_offset == len(acked[queue_id])
                    acked[queue_id] += [m.body for m in messages]
                assert wait_readable(endpoint, acked) == acked
            assert process.poll() is None
            stop(process)

        with broker_process(data, *args) as (endpoint, process):
            assert wait_readable(endpoint, acked) == acked
            stop(process)


@pytest.mark.parametrize("kind, size_mib", [("tmpfs", 24), ("ext4", 32)])
def test_index_files_that_cannot_grow_wait_for_room(tmp_path, kind, size_mib):
    """No reserve, and a disk filled up after the commitlog took its space: the sends into new
    queues are acknowledged (their bytes fit the log), their index files cannot grow, so the
    dispatcher waits (it wrote through holes of the map before: SIGBUS); they become readable
    once there is room."""
    with mounted(kind, size_mib, tmp_path) as disk:
        data, filler = disk / "data", disk / "filler"
        queues = 64
        with broker_process(data, "--disk-reserve", "0") as (endpoint, process):
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, queues, "SimpleCQ")
                with Producer(endpoint, auto_batch=False) as producer:
                    producer.send(Message(TOPIC, b"first", queue_id=0))
                    fill(filler)
                    for queue_id in range(queues):  # each new queue needs a page of index
                        assert producer.send(Message(TOPIC, b"q%d" % queue_id, queue_id=queue_id)).queue_offset \
                            == (1 if queue_id == 0 else 0)
                    time.sleep(0.5)
                    assert process.poll() is None
                    assert admin.broker_stats().dispatch_lag_bytes > 0  # some wait for room
                    filler.unlink()
                    deadline = time.monotonic() + WAIT_S
                    while admin.broker_stats().dispatch_lag_bytes and time.monotonic() < deadline:
                        time.sleep(0.05)
                    with RangeReader(endpoint) as reader:
                        table = reader.read_table([OffsetRange(TOPIC, q, 0) for q in range(queues)])
                    assert sorted(table["body"].to_pylist()) == sorted([b"first"] + [b"q%d" % q for q in range(queues)])
            stop(process)


def test_a_failed_flush_refuses_writes_until_restart(tmp_path):
    """A real failed fdatasync: ext4 on a thinly provisioned image (its backing tmpfs fills).
    Sends flushing sync are refused with DiskFailedError from then on, also once the flush
    could succeed again (a retried flush may report success for pages the kernel dropped);
    reads go on; BrokerStats says why. After a restart on the repaired disk, every
    acknowledged message is there."""
    with thin_ext4(64, 12, tmp_path) as (disk, grow):
        data = disk / "data"
        acked: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        quick = TransportConfig(retries=1, retry_backoff_ms=10, retry_backoff_max_ms=20)
        with broker_process(data, "--flush", "sync", "--segment-bytes", "4m", "--disk-reserve", "1m") \
                as (endpoint, process):
            with Admin(endpoint) as admin, Producer(endpoint, transport=quick) as producer:
                admin.create_topic(TOPIC, QUEUES, "BatchCQ")
                failure = None
                for number in range(2000):  # the backing tmpfs holds about 200 batches
                    queue_id = number % QUEUES
                    messages = batch(number, queue_id)
                    try:
                        producer.send_batch(messages)
                    except DiskFailedError as err:
                        failure = err
                        break
                    acked[queue_id] += [m.body for m in messages]
                assert failure is not None, "the flush never failed"
                assert "restart" in str(failure) and not failure.retriable
                for number in range(3):  # never again, though a flush might now report success
                    with pytest.raises(DiskFailedError):
                        producer.send_batch(batch(5000 + number, 0))
                assert "restart" in admin.broker_stats().disk_failure
                read = read_all(endpoint)
                assert all(read[q][:len(acked[q])] == acked[q] for q in acked)  # reads go on
            process.send_signal(signal.SIGTERM)
            assert process.wait(WAIT_S) == 0, output_of(process)
        grow()
        with broker_process(data, "--flush", "sync", "--segment-bytes", "4m", "--disk-reserve", "1m") \
                as (endpoint, process):
            read = wait_readable(endpoint, acked)
            assert all(read[q][:len(acked[q])] == acked[q] for q in acked), (
                f"after the restart: read {[len(read[q]) for q in acked]} messages of queues whose acknowledged "
                f"counts are {[len(acked[q]) for q in acked]}; the first differing offsets "
                f"{[next((i for i, (a, b) in enumerate(zip(read[q], acked[q])) if a != b), None) for q in acked]}")
            with Producer(endpoint) as producer:  # a restart takes writes again
                assert producer.send_batch(batch(6000, 0))[0].queue_offset == len(read[0])
            stop(process)


def test_pop_state_on_a_full_disk_is_refused_as_disk_full(tmp_path):
    """Pop keeps its state in RocksDB, which raises a plain Exception when the disk is full: the
    consumer gets DiskFullError saying what to do (not "a broker bug"), and the broker, stopped
    on the full disk, exits cleanly."""
    with mounted("tmpfs", 24, tmp_path) as disk:
        args = ("--segment-bytes", "1m", "--disk-reserve", "1m")
        with broker_process(disk / "data", *args) as (endpoint, process):
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, QUEUES, "BatchCQ")
            with Producer(endpoint) as producer:  # a pop takes a whole batch: a pop state write each
                for number in range(100):
                    producer.send_batch(batch(number, number % QUEUES))
            fill(disk / "filler")
            with PopConsumer(endpoint, "g", [TOPIC]) as consumer, pytest.raises(DiskFullError) as refused:
                for _ in range(100):  # the pops fill the block RocksDB's log has before it must grow
                    consumer.ack(consumer.receive(1, poll_ms=0))
            assert "RocksDB" in str(refused.value) and "restart the broker" in str(refused.value)
            stop(process)


def start_cli(data, *args) -> tuple[subprocess.Popen, str]:
    """The CLI on ``data``: (its process, "listening" or what it printed before it exited)."""
    process = subprocess.Popen([sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir",
                                str(data), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_listening(process, WAIT_S)
    except RuntimeError as err:
        process.wait(EXIT_WAIT_S)
        return process, str(err)
    return process, "listening"


def test_a_start_on_a_full_disk_exits_2_with_the_full_disk_sentence(tmp_path):
    """Issue 29.2: a restart on a disk still full stopped, in one run of two, with a raw
    traceback (OSError ENOSPC from a metadata file written at start, or RocksDB's IO error).
    Now a start that finds no room exits 2 with one sentence saying what to do (a new data
    directory always needs room); a restart either serves or says so; once there is room, the
    broker starts with everything acknowledged."""
    with mounted("tmpfs", 24, tmp_path) as disk:
        data, filler = disk / "data", disk / "filler"
        args = ("--segment-bytes", "1m", "--disk-reserve", "1m")
        with broker_process(data, *args) as (endpoint, process):
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, QUEUES, "BatchCQ")
            acked = {0: [m.body for m in batch(0, 0)], 1: []}
            with Producer(endpoint) as producer:
                producer.send_batch(batch(0, 0))
            stop(process)
        fill(filler)
        process, said = start_cli(disk / "new-data", *args)
        assert process.returncode == 2, said
        assert "Traceback" not in said
        assert "out of disk space" in said and "Free space on that disk and start it again" in said
        for _ in range(2):
            process, said = start_cli(data, *args)
            if said == "listening":
                stop(process)
            else:
                assert process.returncode == 2 and "Traceback" not in said, said
                assert "out of disk space" in said, said
        filler.unlink()
        with broker_process(data, *args) as (endpoint, process):
            assert wait_readable(endpoint, acked) == acked
            stop(process)
