"""Topic benchmark: creating many topics, and reading every queue's offsets.

Rows: N topics of --queues queues created one by one straight on broker_sim.store, then
through the broker (in its own process) with Admin.create_topic, as rmq-admin does; then the
min / max offsets of all their queues with Admin.offsets (GetOffsets, paged by the broker), and
a restart of the broker with all of them (the topic table is loaded). Each row: topics (or
queues) per second and the seconds it took.

    python bench/topic_bench.py [--topics 10000] [--queues 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from broker_sim.store import MessageStore, StoreConfig  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from rmq_spark import Admin  # noqa: E402


def create_in_store(data_dir: Path, topics: int, queues: int) -> float:
    with MessageStore(data_dir, StoreConfig()) as store:
        started = time.perf_counter()
        for i in range(topics):
            store.create_topic(f"topic-{i}", queues, "BatchCQ")
        return time.perf_counter() - started


def through_broker(data_dir: Path, topics: int, queues: int) -> dict:
    names = [f"topic-{i}" for i in range(topics)]
    with broker_process(data_dir) as (endpoint, _process):
        with Admin(endpoint) as admin:
            started = time.perf_counter()
            for name in names:
                admin.create_topic(name, queues, "BatchCQ")
            created = time.perf_counter() - started
            started = time.perf_counter()
            offsets = admin.offsets(names)
            read = time.perf_counter() - started
            assert sum(len(q) for q in offsets.values()) == topics * queues
    started = time.perf_counter()
    with broker_process(data_dir) as (endpoint, _process):
        with Admin(endpoint) as admin:
            assert len(admin.list_topics()) == topics
    return {"create": created, "offsets": read, "restart": time.perf_counter() - started}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000, help="topics to create (default 10,000)")
    parser.add_argument("--queues", type=int, default=4, help="queues per topic (default 4)")
    args = parser.parse_args(argv)
    n, q = args.topics, args.queues
    with tempfile.TemporaryDirectory(prefix="rmq-topic-bench-") as parent:
        print(f"creating {n:,} topics in the store ...", flush=True)
        in_store = create_in_store(Path(parent) / "store", n, q)
        print(f"creating {n:,} topics through the broker ...", flush=True)
        broker = through_broker(Path(parent) / "broker", n, q)
    rows = [
        {"row": "create topics, store", "count": n, "per s": n / in_store, "seconds": in_store},
        {"row": "create topics, Admin over gRPC", "count": n, "per s": n / broker["create"],
         "seconds": broker["create"]},
        {"row": "offsets of every queue, Admin.offsets", "count": n * q, "per s": n * q / broker["offsets"],
         "seconds": broker["offsets"]},
        {"row": "broker restart with the topics, until it lists them", "count": n, "per s": n / broker["restart"],
         "seconds": broker["restart"]},
    ]
    notes = [f"{n:,} topics of {q} queues (BatchCQ); the broker in its own process, 2 cores shared with the client"]
    report.write("topic", rows, ["row", "count", "per s", "seconds"], notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
