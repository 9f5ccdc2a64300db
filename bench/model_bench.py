"""The seed's Demonstration on this machine (issue 10): why batching needs a concurrent index
builder, and why BatchCQ needs none. 1 KB messages, the broker in its own process.

Rows, in one run:
1. single sends (AutoBatch off) into a SimpleCQ topic: the baseline;
2. AutoBatch (``Producer.send_async``) into a SimpleCQ topic (early batches: the broker stores
   a record per message and indexes each), serial dispatch;
3. the same with concurrent dispatch (``--dispatch concurrent``);
4. AutoBatch into a BatchCQ topic (a record and an index unit per batch), at 16 and at 10,000
   queues, serial dispatch;
5. the same at 16 queues, paced at half and at 80% of the highest produce rate of row 4: the
   latency a producer sees when the broker keeps up (at full speed it is the wait for room in
   the producer's buffer). Each is run ``--repeat`` times (3): the row is the run of the median
   p99, every run's p99 beside it, so that a change can be told from the machine's noise.

Each row: produce msgs/s (``send_async`` from 4 threads, blocking ``send`` for single sends,
until every message is stored), consume msgs/s (a reader in a process of its own asks the queues' offsets
with a long poll, answered by the broker as messages are stored, and drains what is readable with
RangeReader, as fast as it can; messages over the time from the first send to the last message read),
produce-to-visible latency (each body starts with its send time; the reader takes the difference
when the message reaches it) at p50 / p99, where the slowest 1% spent it (send / index / read),
the same from the message's store time (the broker's clock, ms: what the index pipeline and
the reader's polling add), and the broker's largest dispatch lag seen during the row
(BrokerStats, sampled every 50 ms). At full speed the send-to-visible latency is mostly the
wait in the producer's 32 MiB of batches held (total_batch_max_bytes).
Producers choose queues stickily (a batch's worth of messages to one queue, then the next).
After the rows, the store alone (in this process, no gRPC) appends early batches with its
dispatcher stopped, then indexes that log in each dispatch mode: how fast, and at what CPU
cost to the store's process per record.

    python bench/model_bench.py [--messages 200000] [--single-messages 5000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader  # noqa: E402

BODY_BYTES = 1024
THREADS = 4
BATCH = 32  # 1 KB messages that fill RocketMQ's 32 KiB AutoBatch batch
STAMP = struct.Struct("<q")  # the send time at the body's start: wall-clock ns, the clock of the broker's store times
LAG_SAMPLE_S = 0.05
COLUMNS = ["row", "queues", "dispatch", "messages", "produce msgs/s", "consume msgs/s", "p50 visible ms",
           "p99 visible ms", "p99 runs ms", "slowest 1%: send / index / read ms", "p99 stored-visible ms",
           "max lag MB", "max lag ms"]


def produce(endpoint: str, topic: str, queues: int, auto_batch: bool, messages: int,
            rate: float | None = None) -> tuple[float, int]:
    """Send ``messages`` from THREADS threads; returns (msgs/s until every one is stored, start ns).
    ``rate``: the threads together send at most this many msgs/s (paced every batch's worth).

    With AutoBatch, ``send_async``; without, blocking ``send`` (the single-send baseline).
    Each thread sends a batch's worth of messages (BATCH) to one queue, then moves to the
    next (a sticky choice, as Kafka's partitioner), so that batches are full at 10,000
    queues as at 16, and the rows compare the broker, not how full batches get."""
    per_thread = messages // THREADS
    total = per_thread * THREADS
    rest = os.urandom(BODY_BYTES - STAMP.size)
    errors, answered, lock, all_answered = [], [0], threading.Lock(), threading.Event()
    producer = Producer(endpoint, auto_batch=auto_batch)

    def done(_result, error) -> None:
        with lock:
            if error is not None:
                errors.append(error)
            answered[0] += 1
            if answered[0] == total:
                all_answered.set()

    def work(thread: int) -> None:
        first = thread * queues // THREADS
        for i in range(per_thread):
            if rate and i % BATCH == 0:
                ahead_s = started_s + i * THREADS / rate - time.monotonic()
                if ahead_s > 0:
                    time.sleep(ahead_s)
            message = Message(topic, STAMP.pack(time.time_ns()) + rest, queue_id=(first + i // BATCH) % queues)
            if auto_batch:
                producer.send_async(message, callback=done)
            else:
                try:
                    producer.send(message)
                    done(None, None)
                except Exception as error:  # counted and reported below
                    done(None, error)

    started = time.monotonic_ns()
    started_s = started / 1e9
    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    producer.flush()
    if not all_answered.wait(600):
        raise RuntimeError(f"only {answered[0]:,} of {total:,} sends were answered within 600 s")
    elapsed_s = (time.monotonic_ns() - started) / 1e9
    producer.close()
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed; the first: {errors[0]!r}")
    return total / elapsed_s, started


def drain(endpoint: str, topic: str, queues: int, expected: int, timeout_s: float, results, connected,
          polling: bool = False) -> None:
    """In a process of its own: read every message of ``topic`` as soon as it is readable, the
    offsets asked with a long poll (the broker answers as messages are stored); ``connected`` is
    set once the reader is connected (before that, sends would wait for its start-up, and their
    latency would be the process's start, not the broker's).

    Each message's send-to-visible time is cut in three at two instants: its store time (the
    broker's clock, ms) and the answer of the offsets call that showed it: send (the producer's
    batching, the call, the append), index (the dispatcher, and the offsets call's wait) and read
    (the read call and decoding). ``polling``: the reader before long polls (the baseline), which
    asked the offsets again each millisecond."""
    next_offsets = np.zeros(queues, dtype=np.int64)
    totals, sends, indexes, reads, seen, last_ns = [], [], [], [], 0, 0
    deadline = time.monotonic() + timeout_s
    with Admin(endpoint) as admin, RangeReader(endpoint) as reader:

        def offsets(wait_ms: int = 0) -> tuple[np.ndarray, int]:  # the queues' ends, and when they were known
            past = {(topic, "", q): int(next_offsets[q]) for q in range(queues)} if wait_ms else None
            ends = [q.max_offset for q in admin.offsets([topic], past=past, wait_ms=wait_ms)[topic]]
            return np.array(ends, dtype=np.int64), time.time_ns()

        ends, shown_ns = offsets()
        connected.set()
        while seen < expected and time.monotonic() < deadline:
            ready = np.flatnonzero(ends > next_offsets)
            if len(ready) == 0:
                if polling:
                    time.sleep(0.001)
                ends, shown_ns = offsets(wait_ms=0 if polling else 1_000)
                continue
            ranges = [OffsetRange(topic, int(q), int(next_offsets[q]), int(ends[q])) for q in ready]
            for batch in reader.read(ranges):
                last_ns, now_ns = time.monotonic_ns(), time.time_ns()
                sent = _stamps(batch.column("body"))
                stored = _nanos(batch.column("store_timestamp"))
                totals.append(now_ns - sent)
                sends.append(stored - sent)
                indexes.append(shown_ns - stored)
                reads.append(np.full(len(sent), now_ns - shown_ns))
                seen += batch.num_rows
            next_offsets[ready] = ends[ready]
            ends, shown_ns = offsets()
    results.put({"seen": seen, "last_ns": last_ns, **_latencies(totals, sends, indexes, reads)})


def _latencies(totals: list, sends: list, indexes: list, reads: list) -> dict:
    """p50 / p99 of send-to-visible, p99 from the store time, and where the slowest 1% spent
    theirs: each stage's mean over the messages at or past the p99 (ms)."""
    if not totals:
        return {"p50": float("nan"), "p99": float("nan"), "stored p99": float("nan"),
                "send": float("nan"), "index": float("nan"), "read": float("nan")}
    total, send, index, read = (np.concatenate(parts) / 1e6 for parts in (totals, sends, indexes, reads))
    p99 = float(np.percentile(total, 99))
    slowest = total >= p99
    return {"p50": float(np.percentile(total, 50)), "p99": p99,
            "stored p99": float(np.percentile(index + read, 99)),
            "send": float(send[slowest].mean()), "index": float(index[slowest].mean()),
            "read": float(read[slowest].mean())}


def _nanos(timestamps) -> np.ndarray:
    """A timestamp column's values in ns, from its buffer: pyarrow's ``to_numpy`` would import
    pandas on its first call, a stall of a quarter of a second inside the measured run."""
    values = np.frombuffer(timestamps.buffers()[1], dtype=np.int64, count=len(timestamps),
                           offset=timestamps.offset * 8)
    return values * {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[timestamps.type.unit]


def _stamps(body) -> np.ndarray:
    """The send time at the start of each body of a pyarrow binary column."""
    offsets = np.frombuffer(body.buffers()[1], dtype=np.int32, count=len(body) + 1, offset=body.offset * 4)
    data = np.frombuffer(body.buffers()[2], dtype=np.uint8)
    return np.ascontiguousarray(data[offsets[:-1, None] + np.arange(STAMP.size)]).view("<i8").reshape(-1)


class LagSampler:
    """The broker's largest dispatch lag (bytes and ms) while a row runs."""

    def __init__(self, endpoint: str):
        self.admin = Admin(endpoint)
        self.bytes = self.ms = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(LAG_SAMPLE_S):
            stats = self.admin.broker_stats()
            self.bytes = max(self.bytes, stats.dispatch_lag_bytes)
            self.ms = max(self.ms, stats.dispatch_lag_ms)

    def __enter__(self) -> "LagSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.admin.close()


def run_row(endpoint: str, label: str, topic: str, queue_type: str, queues: int, auto_batch: bool, dispatch: str,
            messages: int, timeout_s: float, rate: float | None = None, polling: bool = False) -> dict:
    print(f"{label}, {queues:,} queues, {dispatch} dispatch: {messages:,} messages ...", flush=True)
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues, queue_type)
    context = multiprocessing.get_context("spawn")
    results, connected = context.Queue(), context.Event()
    reader = context.Process(target=drain, args=(endpoint, topic, queues, messages, timeout_s, results, connected,
                                                  polling))
    reader.start()
    try:
        if not connected.wait(120):
            raise RuntimeError("the reader process did not connect within 120 s")
        with LagSampler(endpoint) as lag:
            produce_rate, started_ns = produce(endpoint, topic, queues, auto_batch, messages, rate)
            read = results.get(timeout=timeout_s + 30)
    finally:
        reader.join(30)
        if reader.is_alive():
            reader.kill()
    if read["seen"] < messages:
        print(f"  the reader saw {read['seen']:,} of {messages:,} messages within {timeout_s:.0f} s", flush=True)
    consume = read["seen"] / max((read["last_ns"] - started_ns) / 1e9, 1e-9)
    return {"row": label, "queues": queues, "dispatch": dispatch, "messages": messages,
            "produce msgs/s": produce_rate, "consume msgs/s": consume, "p50 visible ms": read["p50"],
            "p99 visible ms": read["p99"], "p99 runs ms": f"{read['p99']:,.0f}",
            "slowest 1%: send / index / read ms": f"{read['send']:,.1f} / {read['index']:,.1f} / {read['read']:,.1f}",
            "p99 stored-visible ms": read["stored p99"],
            "max lag MB": lag.bytes / 1e6, "max lag ms": lag.ms}


def repeated(times: int, run) -> dict:
    """A latency row run ``times`` times (``run(i)``): the run of the median p99, with every
    run's p99 in "p99 runs ms", so that a change is judged beside the spread of the same code."""
    runs = sorted((run(i) for i in range(times)), key=lambda r: r["p99 visible ms"])
    row = dict(runs[len(runs) // 2])
    row["p99 runs ms"] = ", ".join(f"{r['p99 visible ms']:,.0f}" for r in runs)
    row["p99 spread"] = (runs[0]["p99 visible ms"], runs[-1]["p99 visible ms"])
    return row


def store_alone(messages: int, workers: int) -> tuple[list[str], dict]:
    """In this process, without gRPC: how fast the store appends early batches of 32 x 1 KB
    (the dispatcher stopped), then how fast each dispatch mode indexes that commitlog, and
    the CPU time it costs this process per record (worker processes excluded)."""
    from broker_sim.store import MessageStore, encode_message_batch
    from broker_sim.store.concurrent_dispatcher import ConcurrentDispatcher
    from broker_sim.store.consume_queue import ConsumeQueueTable
    from broker_sim.store.dispatcher import Dispatcher

    notes, figures = [], {}
    with tempfile.TemporaryDirectory(prefix="rmq-model-bench-store-") as data_dir:
        with MessageStore(Path(data_dir) / "data") as store:
            store.create_topic("simple", 16)
            store.dispatcher.stop()
            payload = encode_message_batch([(os.urandom(BODY_BYTES), {}, 0)] * BATCH)
            started = time.perf_counter()
            for i in range(messages // BATCH):
                store.put_early_batch("simple", i % 16, payload)
            append_rate = figures["append msgs/s"] = messages // BATCH * BATCH / (time.perf_counter() - started)
            notes.append(f"store alone, early batches of {BATCH} x 1 KB into SimpleCQ: appended at "
                         f"{append_rate:,.0f} msgs/s (one record each), dispatcher stopped")
            commitlog, topics = store.commitlog, store.topics
            for label, pool in (("serial", None), ("concurrent, worker threads", "thread"),
                                ("concurrent, worker processes", "process")):
                queues = ConsumeQueueTable(Path(data_dir) / label.replace(" ", "").replace(",", "-"), store.config)
                args = (commitlog, queues, topics, lambda: commitlog.max_offset, lambda: None)
                dispatcher = Dispatcher(*args) if pool is None else ConcurrentDispatcher(*args, workers=workers,
                                                                                         pool=pool)
                if pool is not None:
                    dispatcher.start_workers()  # before the clock starts
                wall, cpu = time.perf_counter(), time.process_time()
                records = dispatcher.dispatch()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                dispatcher.close()
                queues.close()
                figures[label] = (records / wall, cpu / records)
                notes.append(f"store alone, indexing those {records:,} records, {label} dispatch: "
                             f"{records / wall:,.0f} records/s, {cpu / records * 1e6:.2f} us of the store "
                             f"process's CPU per record")
            store.dispatcher.start()
    return notes, figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per batched row (default 200,000)")
    parser.add_argument("--single-messages", type=int, default=5_000, help="messages of the single-send row")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a row may take to be read whole")
    parser.add_argument("--latency-only", action="store_true", help="only rows 4 (16 queues) and 5: the "
                        "latency figures, to judge a change by")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each latency row (rows 5); the median p99's "
                        "run is shown, every run's p99 beside it")
    args = parser.parse_args(argv)
    n, single, timeout = args.messages, args.single_messages, args.timeout
    rows = {}
    root = Path(tempfile.mkdtemp(prefix="rmq-model-bench-"))
    try:
        with broker_process(root / "serial", "--dispatch", "serial") as (endpoint, _process):
            if not args.latency_only:
                rows[1] = run_row(endpoint, "1. single sends", "single", "SimpleCQ", 16, False, "serial", single,
                                  timeout)
                rows[2] = run_row(endpoint, "2. AutoBatch, SimpleCQ", "simple", "SimpleCQ", 16, True, "serial", n,
                                  timeout)
            rows[4] = run_row(endpoint, "4. AutoBatch, BatchCQ", "batch16", "BatchCQ", 16, True, "serial", n, timeout)
            if not args.latency_only:
                rows[5] = run_row(endpoint, "4. AutoBatch, BatchCQ", "batch10k", "BatchCQ", 10_000, True, "serial", n,
                                  timeout)
            half = max(row["produce msgs/s"] for key, row in rows.items() if key in (4, 5)) / 2
            rows[6] = repeated(args.repeat, lambda run: run_row(
                endpoint, "5. AutoBatch, BatchCQ, half the highest rate", f"batch16-half-{run}", "BatchCQ", 16, True,
                "serial", n, timeout, rate=half))
            rows[7] = repeated(args.repeat, lambda run: run_row(
                endpoint, "5. AutoBatch, BatchCQ, 80% of the highest rate", f"batch16-80-{run}", "BatchCQ", 16, True,
                "serial", n, timeout, rate=half * 2 * 0.8))
            if args.latency_only:  # the baseline beside them: the reader polling offsets, as before long polls
                rows[8] = repeated(args.repeat, lambda run: run_row(
                    endpoint, "5. ... 80%, the reader polling (baseline)", f"batch16-80-poll-{run}", "BatchCQ", 16,
                    True, "serial", n, timeout, rate=half * 2 * 0.8, polling=True))
        if args.latency_only:
            table = [rows[k] for k in sorted(rows)]
            report.write("model-latency", table, COLUMNS, _latency_notes(rows[6], rows[7]))
            return 0
        with broker_process(root / "concurrent", "--dispatch", "concurrent") as (endpoint, _process):
            rows[3] = run_row(endpoint, "3. AutoBatch, SimpleCQ", "simple", "SimpleCQ", 16, True, "concurrent", n,
                              timeout)
        alone, figures = store_alone(n, workers=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = [rows[k] for k in sorted(rows)]
    notes = _notes(rows) + alone + _why(rows, figures)
    report.write("model", table, COLUMNS, notes, plot=lambda ax: _plot(ax, table))
    return 0


def _notes(rows: dict) -> list[str]:
    single, serial, concurrent, b16, b10k, half, most = (rows[k] for k in (1, 2, 3, 4, 5, 6, 7))
    return [
        f"BatchCQ at half the highest produce rate ({half['produce msgs/s']:,.0f} msgs/s): p99 send-to-visible "
        f"{half['p99 visible ms']:,.0f} ms ({'meets' if half['p99 visible ms'] <= 300 else 'MISSES'} the 300 ms "
        f"target; the seed's BatchCQ run: 264 ms), p50 {half['p50 visible ms']:,.0f} ms",
        f"BatchCQ at 80% of the highest produce rate ({most['produce msgs/s']:,.0f} msgs/s): p99 send-to-visible "
        f"{most['p99 visible ms']:,.0f} ms ({'meets' if most['p99 visible ms'] <= 50 else 'MISSES'} the 50 ms "
        f"target), p50 {most['p50 visible ms']:,.0f} ms, p99 from the store time "
        f"{most['p99 stored-visible ms']:,.0f} ms",
        *_latency_notes(half, most)[2:],
        f"AutoBatch into SimpleCQ produces {serial['produce msgs/s'] / single['produce msgs/s']:.1f}x single sends "
        f"(the seed: 3.4x)",
        f"SimpleCQ, serial dispatch: consumed at {serial['consume msgs/s'] / serial['produce msgs/s']:.0%} of the "
        f"produce rate, p99 visible {serial['p99 visible ms']:,.0f} ms, largest lag {serial['max lag MB']:,.1f} MB",
        f"SimpleCQ, concurrent dispatch: consumed at {concurrent['consume msgs/s'] / concurrent['produce msgs/s']:.0%} "
        f"of the produce rate, p99 visible {concurrent['p99 visible ms']:,.0f} ms, largest lag "
        f"{concurrent['max lag MB']:,.1f} MB",
        f"BatchCQ at 10,000 queues: produce {b10k['produce msgs/s'] / b16['produce msgs/s']:.0%} and consume "
        f"{b10k['consume msgs/s'] / b16['consume msgs/s']:.0%} of 16 queues (the seed: flat)",
        f"machine: {os.cpu_count()} cores shared by the broker, its dispatch workers, the producer and the reader",
    ]


def _latency_notes(half: dict, most: dict) -> list[str]:
    return [
        f"BatchCQ at half the highest produce rate ({half['produce msgs/s']:,.0f} msgs/s): p99 send-to-visible "
        f"{half['p99 visible ms']:,.0f} ms, p50 {half['p50 visible ms']:,.0f} ms",
        f"BatchCQ at 80% of the highest produce rate ({most['produce msgs/s']:,.0f} msgs/s): p99 send-to-visible "
        f"{most['p99 visible ms']:,.0f} ms ({'meets' if most['p99 visible ms'] <= 50 else 'MISSES'} the 50 ms "
        f"target), p50 {most['p50 visible ms']:,.0f} ms",
        *(f"{row['row']}: p99 over {len(row['p99 runs ms'].split(', '))} runs {row['p99 spread'][0]:,.0f} to "
          f"{row['p99 spread'][1]:,.0f} ms; the slowest 1% of the median run spent, in ms on average, send / index / "
          f"read: {row['slowest 1%: send / index / read ms']} (send: the producer's batching and call and the "
          f"append, to the store time; index: to the offsets answer that showed it; read: the read call)"
          for row in (half, most))]


def _why(rows: dict, figures: dict) -> list[str]:
    """Whether serial dispatch can fall behind here: the share of a core it needs at the
    produce rate of row 2, and what it indexes alone beside what the store appends alone."""
    serial_rate, serial_cpu_s = figures["serial"]
    need = rows[2]["produce msgs/s"] * serial_cpu_s
    return [f"serial dispatch needs {need:.0%} of a core at row 2's produce rate ({serial_cpu_s * 1e6:.1f} us a "
            f"record); alone it indexes {serial_rate:,.0f} records/s, {serial_rate / figures['append msgs/s']:.1f}x "
            f"what the store appends alone, so it falls behind only once production passes about that rate"]


def _plot(ax, rows: list[dict]) -> None:
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["produce msgs/s"] for r in rows], 0.4, label="produce msgs/s")
    ax.bar(x + 0.2, [r["consume msgs/s"] for r in rows], 0.4, label="consume msgs/s")
    for i, r in enumerate(rows):
        ax.annotate(f"p99 {r['p99 visible ms']:,.0f} ms", (i, max(r["produce msgs/s"], r["consume msgs/s"])),
                    ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r['row']}\n{r['queues']:,} queues, {r['dispatch']}" for r in rows], fontsize=7)
    ax.set_ylabel("msgs/s (log scale)")
    ax.legend(fontsize=8)
    ax.set_title("The seed's model on this machine: 1 KB messages, broker in its own process")


if __name__ == "__main__":
    sys.exit(main())
