"""Range read benchmark: 1 KB messages from a BatchCQ topic into Arrow through RangeReader,
with the broker in its own process beside the reader (2 cores in all).

Rows: BatchCQ with the arrow and the rmq codec (lz4), in batches of 32 (what RocketMQ's 32 KiB
AutoBatch makes of 1 KB messages) and of 256 (what ours, 256 KiB by default, makes); the
baseline, measured in the same run, is the same messages read from a SimpleCQ topic (a stored
record per message). Every queue is read whole in one RangeReader.read call (one range per
queue). The broker's resident memory is reported beside the throughput.

    python bench/read_bench.py [--messages 1000000] [--queues 16] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from bench.process_memory import peak_rss_bytes, rss_bytes  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader  # noqa: E402

BODY_BYTES = 1024
ROWS = [  # (label, queue type, codec, compression, batch size)
    ("SimpleCQ (baseline)", "SimpleCQ", "rmq", "none", 32),
    ("BatchCQ arrow+lz4", "BatchCQ", "arrow", "lz4", 32),
    ("BatchCQ rmq+lz4", "BatchCQ", "rmq", "lz4", 32),
    ("BatchCQ arrow+lz4", "BatchCQ", "arrow", "lz4", 256),
    ("BatchCQ rmq+lz4", "BatchCQ", "rmq", "lz4", 256),
]


def fill(endpoint: str, topic: str, queue_type: str, codec: str, compression: str, batch: int, queues: int,
         messages: int) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues, queue_type)
    body = os.urandom(BODY_BYTES)
    with Producer(endpoint, codec=codec, compression=compression) as producer:
        for i in range(messages // batch):
            queue_id = i % queues
            producer.send_batch([Message(topic, body, tags="TagA", keys=f"k{j}", queue_id=queue_id)
                                 for j in range(batch)])
    _wait_indexed(endpoint, topic, messages // batch * batch)


def _wait_indexed(endpoint: str, topic: str, expected: int, timeout_s: float = 120) -> None:
    """Sends return once stored; reads see messages once indexed."""
    deadline = time.monotonic() + timeout_s
    with Admin(endpoint) as admin:
        while sum(q.max_offset for q in admin.offsets([topic])[topic]) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not all {expected:,} messages were indexed in {timeout_s} s")
            time.sleep(0.05)


def read_all(endpoint: str, topic: str, queues: int) -> tuple[int, float]:
    ranges = [OffsetRange(topic, q, 0) for q in range(queues)]
    with RangeReader(endpoint) as reader:
        started = time.perf_counter()
        rows = sum(batch.num_rows for batch in reader.read(ranges))
        return rows, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per row (default 1,000,000)")
    parser.add_argument("--queues", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2, help="reads of each topic; the best is reported")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="rmq-read-bench-") as data_dir:
        with broker_process(Path(data_dir)) as (endpoint, process):
            for index, (label, queue_type, codec, compression, batch) in enumerate(ROWS):
                topic = f"read{index}"
                print(f"filling {label}, batches of {batch}: {args.messages:,} messages ...", flush=True)
                fill(endpoint, topic, queue_type, codec, compression, batch, args.queues, args.messages)
                best = 0.0
                for _ in range(args.repeat):
                    rows, seconds = read_all(endpoint, topic, args.queues)
                    assert rows == args.messages // batch * batch, (rows, args.messages)
                    best = max(best, rows / seconds)
                results.append({"topic": label, "batch": batch, "queues": args.queues, "messages": rows,
                                "read msgs/s": best, "MB/s": best * BODY_BYTES / 1e6,
                                "broker RSS MiB": rss_bytes(process.pid) / (1 << 20)})
            peak = peak_rss_bytes(process.pid) / (1 << 20)
    baseline = results[0]["read msgs/s"]
    notes = [f"{r['topic']}, batches of {r['batch']}: {r['read msgs/s'] / baseline:.1f}x the SimpleCQ read; "
             f"{'meets' if r['read msgs/s'] >= 1_000_000 else 'MISSES'} the 1,000,000 msgs/s target"
             for r in results[1:]]
    notes.append(f"broker peak RSS over the run: {peak:,.0f} MiB (mapped commitlog pages count while touched)")
    report.write("read", results, ["topic", "batch", "queues", "messages", "read msgs/s", "MB/s", "broker RSS MiB"],
                 notes, plot=lambda ax: _plot(ax, results))
    return 0


def _plot(ax, rows) -> None:
    ax.bar(range(len(rows)), [r["read msgs/s"] for r in rows], color=["grey"] + ["C0"] * (len(rows) - 1))
    ax.axhline(1_000_000, color="red", linestyle="--", label="target")
    ax.set_xticks(range(len(rows)), [f"{r['topic']}\nbatch {r['batch']}" for r in rows], fontsize=7)
    ax.set_ylabel("msgs/s into Arrow")
    ax.legend()
    ax.set_title("RangeReader, 1 KB messages, broker in its own process")


if __name__ == "__main__":
    sys.exit(main())
