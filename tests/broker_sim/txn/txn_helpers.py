"""Helpers of the transaction tests (tests/broker_sim/txn/)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

from broker_sim.broker import Broker
from broker_sim.store import StoreConfig
from broker_sim.testing import stop_process, wait_listening
from broker_sim.txn import TransactionConfig
from rmq_spark import Admin, OffsetRange, RangeReader
from support.clock import ERA_MS, Clock

STORE_CONFIG = StoreConfig(segment_bytes=16 << 20, max_message_bytes=256 << 10)
# No background sweep: tests call expire() with the injected clock. Small half log segments.
TXN_CONFIG = TransactionConfig(timeout_ms=60_000, check_interval_ms=3_600_000, half_segment_bytes=1)
START_MS = ERA_MS  # where the ``clock`` fixture starts (support.clock)
CRASHING_BROKER = Path(__file__).with_name("crashing_broker.py")


def start_broker(data_dir: Path, clock=None, config: TransactionConfig = TXN_CONFIG) -> Broker:
    broker = Broker(data_dir, "127.0.0.1", 0, STORE_CONFIG, transaction_config=config,
                    transaction_clock_ms=clock or Clock(START_MS), auto_create_topics=None)  # topics created first
    broker.start()
    return broker


def bodies(n: int, tag: str = "m", size: int = 32) -> list[bytes]:
    return [f"{tag}-{i:06d}".encode().ljust(size, b".") for i in range(n)]


def table_of(bodies_: list[bytes]) -> pa.Table:
    return pa.table({"body": pa.array(bodies_, pa.binary())})


def send_table(producer, topic: str, queue_id: int, table: pa.Table) -> int:
    """A writer's batch: the rows of ``table`` to one queue, answered before it returns."""
    queue_ids = pa.array([queue_id] * table.num_rows, pa.int32())
    return producer.send_arrow(table.append_column("queue_id", queue_ids), topic).wait(30)


def offsets(endpoint: str, topic: str) -> list[int]:
    """Max offset of each queue."""
    with Admin(endpoint) as admin:
        return [q.max_offset for q in admin.offsets([topic])[topic]]


def wait_offsets(endpoint: str, topic: str, expected: list[int], timeout_s: float = 10.0) -> None:
    """Sends return once stored; reads see messages once the broker indexed them."""
    deadline = time.monotonic() + timeout_s
    while offsets(endpoint, topic) != expected:
        assert time.monotonic() < deadline, f"{topic}: offsets {offsets(endpoint, topic)}, expected {expected}"
        time.sleep(0.01)


def read_queue(endpoint: str, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """(offset, body) of every readable message of a queue."""
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, queue_id, 0)])
    return list(zip(table.column("queue_offset").to_pylist(), table.column("body").to_pylist()))


@contextmanager
def broker_process(data_dir: Path, crash: str | None = None, timeout_s: float = 60, extra: tuple = ()):
    """`rmq-broker-sim` in a process of its own (``extra``: more flags); with ``crash``
    (crashing_broker.py's modes) it kills itself with SIGKILL at that point of a commit. Yields
    (endpoint, process, the lines it printed before listening)."""
    if crash is None:
        command = [sys.executable, "-m", "broker_sim.cli"]
    else:
        command = [sys.executable, str(CRASHING_BROKER), crash]
    command += ["--port", "0", "--data-dir", str(data_dir), "--segment-bytes", "16m", *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        endpoint, output = wait_listening(process, timeout_s)
        yield endpoint, process, output
    finally:
        stop_process(process, timeout_s)


def kill9(process: subprocess.Popen, timeout_s: float = 30) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout_s)
    assert process.returncode == -signal.SIGKILL
