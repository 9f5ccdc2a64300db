"""What writing a committed sink batch to the commitlog costs a commit (issue 29): the driver's
commit of one small transaction with a sink batch, as Spark's exactly-once sink makes one per
micro-batch, with the sink record appended to RMQ_SYS_SINK_BATCHES (now) beside the same
commit without it (the baseline: the code before, the record only in RocksDB), in the same
run, alternating rounds; broker in this process (the baseline patches the append out).

    python bench/sink_commit_bench.py [--commits 400] [--rounds 4] [--flush async|sync]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from broker_sim.broker import Broker  # noqa: E402
from broker_sim.store import StoreConfig  # noqa: E402
from broker_sim.txn.service import TransactionService  # noqa: E402
from rmq_spark import Admin, Message, Producer, Transactions  # noqa: E402

TOPIC = "sink-bench"


def commits(endpoint: str, sink: str, count: int) -> list[float]:
    """Milliseconds of each commit (a prepared 1 KB message, then the commit with its sink batch)."""
    times = []
    with Producer(endpoint, auto_batch=False) as _warm, Transactions(endpoint) as txns:
        for batch_id in range(count):
            with Producer(endpoint, transaction_id=f"{sink}.{batch_id}", auto_batch=False) as writer:
                writer.send(Message(TOPIC, b"x" * 1024))
                prepared = writer.prepared()
            started = time.perf_counter()
            txns.commit([prepared], sink_id=sink, batch_id=batch_id)
            times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=400, help="commits per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each kind, alternating")
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    args = parser.parse_args(argv)
    measured = {"with": [], "without": []}
    appended = TransactionService._append_sink
    with tempfile.TemporaryDirectory(prefix="rmq-sink-bench-") as data_dir:
        broker = Broker(Path(data_dir), store_config=StoreConfig(flush_mode=args.flush))
        broker.start()
        try:
            with Admin(broker.endpoint) as admin:
                admin.create_topic(TOPIC, 1, "BatchCQ")
            for round_ in range(args.rounds):
                for kind in ("without", "with"):
                    TransactionService._append_sink = appended if kind == "with" else (lambda _self, _sink: True)
                    measured[kind] += commits(broker.endpoint, f"{kind}-{round_}", args.commits)
        finally:
            TransactionService._append_sink = appended
            broker.stop(grace=1.0)
    rows = []
    for kind, label in (("without", "commit, sink batch in RocksDB only (baseline)"),
                        ("with", "commit, sink batch also in the commitlog")):
        times = sorted(measured[kind])
        rows.append({"row": label, "commits": len(times), "median ms": statistics.median(times),
                     "p99 ms": times[int(len(times) * 0.99) - 1], "commits/s": 1000 / statistics.mean(times)})
    extra = rows[1]["median ms"] - rows[0]["median ms"]
    notes = [f"--flush {args.flush}: the sink record costs a commit {extra:+.3f} ms at the median "
             f"({rows[1]['median ms'] / rows[0]['median ms']:.0%} of the baseline's time)"]
    report.write("sink-commit", rows, ["row", "commits", "median ms", "p99 ms", "commits/s"], notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
