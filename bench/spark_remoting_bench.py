"""Spark through RocketMQ's remoting protocol: ``readStream.format("rocketmq-batch")`` into the
``noop`` sink over the same backlog (1 KB messages in stored batches of 32, RocketMQ's own
MessageBatch encoding, uncompressed, in a BatchCQ topic of 16 queues), in rows/s:

- broker_sim through ``endpoint`` (our gRPC door): the baseline;
- the same broker and topic through ``nameServer`` (its remoting door): target >= 80% of it;
- a two-broker broker_sim cluster (8 queues on each broker) through ``nameServer``: target
  >= 90% of the one-broker topic of the same size through ``nameServer``;
- the real Apache RocketMQ (``make peers``) through ``nameServer``, the same messages written
  by our producer through its name server: the peer, beside.

Every process on the one machine; attempts alternate the rows, the best of each is kept.

    python bench/spark_remoting_bench.py [--messages 500000] [--repeat 2] [--no-rocketmq]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench import report  # noqa: E402
from bench.spark_read_bench import run_to_noop  # noqa: E402
from rmq_spark import Admin, Message, Producer  # noqa: E402

BODY_BYTES = 1024
BATCH = 32
QUEUES = 16
TARGET_REMOTING = 0.8
TARGET_TWO_BROKERS = 0.9


def fill(address: dict, topic: str, messages: int, brokers: list[str]) -> None:
    """``messages`` in batches of BATCH, spread evenly over QUEUES queues (split between
    ``brokers``), RocketMQ's encoding uncompressed, as our door and RocketMQ's store it."""
    per_broker = QUEUES // len(brokers)
    with Admin(**address) as admin:
        admin.create_topic(topic, per_broker, "BatchCQ")
    queues = [(broker, queue_id) for broker in brokers for queue_id in range(per_broker)]
    body = os.urandom(BODY_BYTES)
    with Producer(**address) as producer:
        for i in range(messages // BATCH):
            broker, queue_id = queues[i % len(queues)]
            producer.send_batch([Message(topic, body, tags="TagA", keys=f"k{j}", queue_id=queue_id,
                                         broker=broker or None) for j in range(BATCH)])
    deadline = time.monotonic() + 300
    with Admin(**address) as admin:
        while sum(q.max_offset for q in admin.offsets([topic])[topic]) < messages // BATCH * BATCH:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not every message readable after 300 s")
            time.sleep(0.1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500_000, help="backlog of each row (default 500,000)")
    parser.add_argument("--repeat", type=int, default=2, help="reads of each backlog; the best is reported")
    parser.add_argument("--no-rocketmq", action="store_true", help="leave out the real RocketMQ's row")
    args = parser.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from remoting_targets import broker_sim_target, wait_for_brokers

    spark = (SparkSession.builder.master("local[2]").appName("spark-remoting-bench")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rmq-remoting-spark-bench-") as work, contextlib.ExitStack() as stack:
        work = Path(work)
        single = stack.enter_context(broker_sim_target(work / "single"))
        first = stack.enter_context(broker_sim_target(work / "a"))
        stack.enter_context(broker_sim_target(work / "b", "--broker-name", "broker-b", "--namesrv", first.namesrv))
        wait_for_brokers(first.namesrv, {"broker-a", "broker-b"})
        print(f"filling: {args.messages:,} messages of {BODY_BYTES} B per topic, batches of {BATCH}", flush=True)
        fill({"endpoint": single.endpoint}, "bench", args.messages, [""])
        fill({"name_server": first.namesrv}, "bench", args.messages, ["broker-a", "broker-b"])
        rows["broker_sim, endpoint (gRPC door): baseline"] = {"endpoint": single.endpoint}
        rows["broker_sim, nameServer (remoting door)"] = {"nameServer": single.namesrv}
        rows["broker_sim, two brokers, nameServer"] = {"nameServer": first.namesrv}
        if not args.no_rocketmq:
            from peers.rocketmq import RocketMQCluster

            rocketmq = stack.enter_context(RocketMQCluster(heap_mb=1024))
            fill({"name_server": rocketmq.namesrv_addr}, "bench", args.messages, ["broker-a"])
            rows["real RocketMQ 5.5.0, nameServer"] = {"nameServer": rocketmq.namesrv_addr}
        for options in rows.values():  # warm-up: the JVM and the Python workers, each transport once
            (spark.read.format("rocketmq-batch").options(topic="bench", endingOffsets="latest", **options).load()
             .limit(1000).write.format("noop").mode("overwrite").save())
        best = {label: 0.0 for label in rows}
        for attempt in range(args.repeat):
            for index, (label, options) in enumerate(rows.items()):
                reader = spark.readStream.format("rocketmq-batch").options(topic="bench", startingOffsets="earliest",
                                                                           **options)
                read, rate = run_to_noop(reader, work / f"cp-{index}-{attempt}")
                assert read == args.messages // BATCH * BATCH, f"{label}: read {read:,} rows"
                best[label] = max(best[label], rate)
                print(f"  attempt {attempt + 1}, {label}: {rate:,.0f} rows/s (best {best[label]:,.0f})", flush=True)
    spark.stop()
    baseline = best["broker_sim, endpoint (gRPC door): baseline"]
    one_broker = best["broker_sim, nameServer (remoting door)"]
    results = [{"read": label, "rows/s": rate, "MB/s": rate * BODY_BYTES / 1e6, "of the gRPC door": rate / baseline}
               for label, rate in best.items()]
    remoting_share = one_broker / baseline
    two_share = best["broker_sim, two brokers, nameServer"] / one_broker
    notes = [f"through nameServer broker_sim is read at {remoting_share:.0%} of its gRPC door's rate: "
             f"{'meets' if remoting_share >= TARGET_REMOTING else 'MISSES'} the {TARGET_REMOTING:.0%} target",
             f"a topic on two brokers is read at {two_share:.0%} of a one-broker topic of the same size: "
             f"{'meets' if two_share >= TARGET_TWO_BROKERS else 'MISSES'} the {TARGET_TWO_BROKERS:.0%} target",
             f"{args.messages:,} messages of {BODY_BYTES} B in {QUEUES} queues per row, stored batches of {BATCH} "
             "(RocketMQ's MessageBatch, uncompressed); Spark local[2]; every process on this machine"]
    report.write("spark-remoting", results, ["read", "rows/s", "MB/s", "of the gRPC door"], notes,
                 plot=lambda ax: _plot(ax, results))
    return 0


def _plot(ax, rows) -> None:
    ax.barh([r["read"] for r in rows], [r["rows/s"] for r in rows], color=["grey"] + ["C0"] * (len(rows) - 1))
    ax.set_xlabel("rows/s into noop")
    ax.invert_yaxis()
    ax.set_title("Spark readStream through nameServer, 1 KB messages")


if __name__ == "__main__":
    sys.exit(main())
