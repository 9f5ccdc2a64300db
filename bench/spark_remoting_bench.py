"""Spark through RocketMQ's remoting protocol: ``readStream.format("rocketmq-batch")`` into the
``noop`` sink over the same backlog (1 KB messages in stored batches of 32, RocketMQ's own
MessageBatch encoding, uncompressed, in topics of 16 queues), in rows/s:

- broker_sim through ``endpoint`` (our gRPC door): the baseline of its remoting door (BatchCQ);
- the same broker through ``nameServer`` (its remoting door), a BatchCQ and a SimpleCQ topic:
  target >= 80% of the gRPC door;
- a two-broker broker_sim cluster (8 queues on each broker) through ``nameServer``: target
  >= 90% of the one-broker topic of the same size through ``nameServer``;
- the real Apache RocketMQ (``make peers``) through ``nameServer``, the same messages written by
  our producer, a BatchCQ and a SimpleCQ topic, with RocketMQ's defaults (a pull answered with
  at most 32 messages, or one stored batch) and with the settings docs/remoting.md recommends
  (``RECOMMENDED``, docs/rocketmq-clusters.md; set on the running broker as ``mqadmin
  updateBrokerConfig`` sets them): target
  >= 90% of broker_sim's remoting door, each queue type, the same run.

Baselines: each Spark row beside its figure before pulls were pipelined (``BEFORE``, measured
on 2026-11-26, docs/benchmarks.md); and the same reads through the SDK in this process (a
RangeReader a queue, as a Spark task reads) one pull after another (the code path before, kept as
``pulls_per_queue=1``) beside the pipelined pulls, the same run.

Beside our SDK's rows, RocketMQ's own Java lite pull consumer (DefaultLitePullConsumer, pullBatchSize
256) reads the same topics from the same brokers (the real peer; with the real RocketMQ only). Each
SDK and Java row also says the CPU time the reader and the broker spent a row: on this 2-core
machine they share the cores, so a broker that spends more CPU per row (the real broker at its
defaults answers a pull with 32 messages) leaves less to the reader. ``--pin`` gives each a core
of its own (the brokers on CPU 0, the reader on CPU 1), which shows which side bounds a read.

Every process on the one machine; attempts alternate the rows; the best of each is kept and
the spread (lowest to highest) printed.

    python bench/spark_remoting_bench.py [--messages 500000] [--repeat 3] [--no-rocketmq] [--no-spark] [--pin]
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
from bench.process_memory import process_cpu_s  # noqa: E402
from bench.spark_read_bench import run_to_noop  # noqa: E402
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader  # noqa: E402
from rmq_spark.client.remoting.pulls import PULLS_PER_QUEUE  # noqa: E402

BODY_BYTES = 1024
BATCH = 32
QUEUES = 16
TARGET_REMOTING = 0.8
TARGET_TWO_BROKERS = 0.9
TARGET_REAL = 0.9
TOPICS = {"BatchCQ": "bench", "SimpleCQ": "bench-simple"}
ONE_BY_ONE, PIPELINED = "one pull after another (before)", "pipelined pulls"
JAVA = "RocketMQ's Java lite pull consumer"
# What docs/rocketmq-clusters.md recommends for reading a RocketMQ broker in bulk: a pull is answered with
# up to maxTransferBytesOnMessageInMemory (256 KiB by default, as broker_sim's remoting door).
RECOMMENDED = {"maxTransferCountOnMessageInMemory": 1024, "maxTransferCountOnMessageInDisk": 1024,
               "maxTransferBytesOnMessageInDisk": 262144}
DEFAULTS = {"maxTransferCountOnMessageInMemory": 32, "maxTransferCountOnMessageInDisk": 8,
            "maxTransferBytesOnMessageInDisk": 65536}
# Spark rows/s before pulls were pipelined (2026-11-26, docs/benchmarks.md, BatchCQ, 1,000,000 messages)
BEFORE = {("broker_sim, nameServer (remoting door)", "BatchCQ"): 234_962,
          ("real RocketMQ 5.5.0, nameServer, RocketMQ's defaults", "BatchCQ"): 130_157}


def fill(address: dict, topic: str, messages: int, brokers: list[str], queue_type: str = "BatchCQ") -> None:
    """``messages`` in batches of BATCH, spread evenly over QUEUES queues (split between
    ``brokers``), RocketMQ's encoding uncompressed, as our door and RocketMQ's store it (a
    SimpleCQ topic: a record a message)."""
    per_broker = QUEUES // len(brokers)
    with Admin(**address) as admin:
        admin.create_topic(topic, per_broker, queue_type)
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


def sdk_read(name_server: str, topic: str, pulls_per_queue: int, broker_pid: int) -> tuple[float, float, float]:
    """Rows/s reading every queue of ``topic`` whole, a RangeReader a queue as a Spark task
    reads; ``pulls_per_queue`` 1: one pull after another, the code path before pipelining. With
    the CPU time the reader (this process) and the broker (``broker_pid``) spent, in us a row."""
    with Admin(name_server=name_server) as admin:
        queues = admin.offsets([topic])[topic]
    rows, began, cpu, broker_cpu = 0, time.perf_counter(), time.process_time(), process_cpu_s(broker_pid)
    for q in queues:
        with RangeReader(name_server=name_server) as reader:
            reader._transport._pulls.pulls_per_queue = pulls_per_queue
            for batch in reader.read([OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset, q.broker)]):
                rows += batch.num_rows
    seconds = time.perf_counter() - began
    expected = sum(q.max_offset - q.min_offset for q in queues)
    assert rows == expected, f"{topic} at {name_server}: read {rows:,} rows of {expected:,}"
    return (rows / seconds, (time.process_time() - cpu) / rows * 1e6,
            (process_cpu_s(broker_pid) - broker_cpu) / rows * 1e6)


def java_read(name_server: str, topic: str, messages: int, broker_pid: int) -> tuple[float, float]:
    """Rows/s of RocketMQ's own Java lite pull consumer (DefaultLitePullConsumer) reading the
    whole topic (its JVM's start left out), and the broker's CPU time in us a row."""
    from peers.rocketmq import java_pull

    broker_cpu = process_cpu_s(broker_pid)
    pulled = java_pull(name_server, topic, expect=messages, timeout_s=300, digest=False)
    assert pulled["received"] == messages, f"{topic} at {name_server}: the Java consumer read {pulled}"
    return messages / pulled["seconds"], (process_cpu_s(broker_pid) - broker_cpu) / messages * 1e6


def pin(pid: int, cpu: int) -> None:
    """Every thread of process ``pid`` on CPU ``cpu`` (threads it starts later inherit it)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(thread), {cpu})


class Rows:
    """Each row's rates over the attempts: best and spread, and what was measured beside the best."""

    def __init__(self):
        self.rates: dict[tuple, list] = {}
        self.beside: dict[tuple, dict] = {}

    def add(self, key: tuple, rate: float, beside: dict | None = None) -> None:
        if rate > self.best(key):
            self.beside[key] = beside or {}
        self.rates.setdefault(key, []).append(rate)

    def best(self, key: tuple) -> float:
        return max(self.rates.get(key) or [0.0])

    def spread(self, key: tuple) -> str:
        rates = self.rates.get(key) or [0.0]
        return f"{min(rates):,.0f} - {max(rates):,.0f} ({len(rates)} runs)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500_000, help="backlog of each topic (default 500,000)")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each backlog; best and spread reported")
    parser.add_argument("--no-rocketmq", action="store_true", help="leave out the real RocketMQ's rows")
    parser.add_argument("--no-spark", action="store_true", help="only the SDK's rows (no Spark)")
    parser.add_argument("--pin", action="store_true",
                        help="the brokers on CPU 0, the reader on CPU 1, as if each had a machine's core of its own "
                             "(only the SDK's and the Java consumer's rows)")
    args = parser.parse_args(argv)
    if args.pin:
        args.no_spark = True
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from remoting_targets import broker_sim_target, wait_for_brokers

    spark_rows: dict[tuple, dict] = {}  # (label, queue type) -> {"options", "settings"}
    sdk_rows: dict[tuple, dict] = {}  # (label, queue type) -> {"name_server", "settings"}
    with tempfile.TemporaryDirectory(prefix="rmq-remoting-spark-bench-") as work, contextlib.ExitStack() as stack:
        work = Path(work)
        single = stack.enter_context(broker_sim_target(work / "single"))
        first = stack.enter_context(broker_sim_target(work / "a"))
        stack.enter_context(broker_sim_target(work / "b", "--broker-name", "broker-b", "--namesrv", first.namesrv))
        wait_for_brokers(first.namesrv, {"broker-a", "broker-b"})
        print(f"filling: {args.messages:,} messages of {BODY_BYTES} B per topic, batches of {BATCH}", flush=True)
        for queue_type, topic in TOPICS.items():
            fill({"name_server": single.namesrv}, topic, args.messages, [""], queue_type)
        fill({"name_server": first.namesrv}, TOPICS["BatchCQ"], args.messages, ["broker-a", "broker-b"])
        spark_rows["broker_sim, endpoint (gRPC door)", "BatchCQ"] = {"options": {"endpoint": single.endpoint}}
        for queue_type in TOPICS:
            spark_rows["broker_sim, nameServer (remoting door)", queue_type] = {
                "options": {"nameServer": single.namesrv}}
            sdk_rows["broker_sim, nameServer (remoting door)", queue_type] = {"name_server": single.namesrv,
                                                                               "pid": single.process.pid}
        spark_rows["broker_sim, two brokers, nameServer", "BatchCQ"] = {"options": {"nameServer": first.namesrv}}
        rocketmq = None
        if not args.no_rocketmq:
            from peers.rocketmq import RocketMQCluster

            rocketmq = stack.enter_context(RocketMQCluster(heap_mb=1024))
            for queue_type, topic in TOPICS.items():
                fill({"name_server": rocketmq.namesrv_addr}, topic, args.messages, ["broker-a"], queue_type)
                for label, settings in (("RocketMQ's defaults", DEFAULTS), ("recommended settings", RECOMMENDED)):
                    key = (f"real RocketMQ 5.5.0, nameServer, {label}", queue_type)
                    spark_rows[key] = {"options": {"nameServer": rocketmq.namesrv_addr}, "settings": settings}
                    sdk_rows[key] = {"name_server": rocketmq.namesrv_addr, "settings": settings,
                                     "pid": rocketmq.broker_pid}

        if args.pin:
            for pid in {row["pid"] for row in sdk_rows.values()}:
                pin(pid, 0)
            pin(os.getpid(), 1)

        def settle(row: dict) -> None:
            if rocketmq is not None and row.get("settings"):
                rocketmq.update_broker_config(row["settings"])

        sdk, spark_rates = Rows(), Rows()
        for attempt in range(args.repeat):
            for (label, queue_type), row in sdk_rows.items():
                settle(row)
                for depth, path in ((1, ONE_BY_ONE), (PULLS_PER_QUEUE, PIPELINED)):
                    rate, cpu, broker_cpu = sdk_read(row["name_server"], TOPICS[queue_type], depth, row["pid"])
                    sdk.add((label, queue_type, path), rate, {"reader": cpu, "broker": broker_cpu})
                    print(f"  SDK attempt {attempt + 1}, {label}, {queue_type}, {path}: {rate:,.0f} rows/s "
                          f"(CPU a row: reader {cpu:.1f} us, broker {broker_cpu:.1f} us)", flush=True)
                if rocketmq is not None:  # RocketMQ's own client beside ours, reading the same topic
                    rate, broker_cpu = java_read(row["name_server"], TOPICS[queue_type],
                                                 args.messages // BATCH * BATCH, row["pid"])
                    sdk.add((label, queue_type, JAVA), rate, {"broker": broker_cpu})
                    print(f"  Java attempt {attempt + 1}, {label}, {queue_type}: {rate:,.0f} rows/s "
                          f"(CPU a row: broker {broker_cpu:.1f} us)", flush=True)
        if not args.no_spark:
            spark_rates = run_spark(spark_rows, args, work, settle)
    write_report(sdk_rows, spark_rows, sdk, spark_rates, args)
    return 0


def run_spark(rows: dict, args, work: Path, settle) -> Rows:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark-remoting-bench")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rates = Rows()
    try:
        for (_label, queue_type), row in rows.items():  # warm-up: the JVM and the Python workers, each transport once
            (spark.read.format("rocketmq-batch").options(topic=TOPICS[queue_type], endingOffsets="latest",
                                                         **row["options"]).load()
             .limit(1000).write.format("noop").mode("overwrite").save())
        for attempt in range(args.repeat):
            for index, ((label, queue_type), row) in enumerate(rows.items()):
                settle(row)
                reader = spark.readStream.format("rocketmq-batch").options(
                    topic=TOPICS[queue_type], startingOffsets="earliest", **row["options"])
                read, rate = run_to_noop(reader, work / f"cp-{index}-{attempt}")
                assert read == args.messages // BATCH * BATCH, f"{label}, {queue_type}: read {read:,} rows"
                rates.add((label, queue_type), rate)
                print(f"  Spark attempt {attempt + 1}, {label}, {queue_type}: {rate:,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    return rates


def write_report(sdk_rows: dict, spark_rows: dict, sdk: Rows, spark: Rows, args) -> None:
    door = "broker_sim, nameServer (remoting door)"
    results, notes = [], []
    for (label, queue_type) in spark_rows:
        if not spark.rates:
            break
        rate = spark.best((label, queue_type))
        of_door = rate / spark.best((door, queue_type)) if spark.best((door, queue_type)) else 0.0
        before = BEFORE.get((label, queue_type))
        results.append({"read": f"Spark: {label}", "queue type": queue_type, "rows/s (best)": rate,
                        "spread": spark.spread((label, queue_type)), "of the remoting door": f"{of_door:.0%}",
                        "before (baseline)": f"{before:,}" if before else "", "reader CPU a row": "",
                        "broker CPU a row": ""})
    for (label, queue_type) in sdk_rows:
        door_rate = sdk.best((door, queue_type, PIPELINED))
        for path in (ONE_BY_ONE, PIPELINED, JAVA):
            rate = sdk.best((label, queue_type, path))
            if not rate:
                continue
            beside = sdk.beside[label, queue_type, path]
            results.append({"read": f"{'SDK' if path != JAVA else 'Java'}: {label}, {path}", "queue type": queue_type,
                            "rows/s (best)": rate, "spread": sdk.spread((label, queue_type, path)),
                            "of the remoting door": f"{rate / door_rate:.0%}" if door_rate else "",
                            "before (baseline)": "",
                            "reader CPU a row": f"{beside['reader']:.1f} us" if "reader" in beside else "",
                            "broker CPU a row": f"{beside['broker']:.1f} us"})
    for queue_type in TOPICS:
        for label in ("real RocketMQ 5.5.0, nameServer, RocketMQ's defaults",
                      "real RocketMQ 5.5.0, nameServer, recommended settings"):
            for kind, rates, key, door_key in (
                    ("Spark", spark, (label, queue_type), (door, queue_type)),
                    ("SDK", sdk, (label, queue_type, PIPELINED), (door, queue_type, PIPELINED))):
                if rates.best(key) and rates.best(door_key):
                    share = rates.best(key) / rates.best(door_key)
                    notes.append(f"{kind}, {queue_type}, {label}: {share:.0%} of broker_sim's remoting door: "
                                 f"{'meets' if share >= TARGET_REAL else 'MISSES'} the {TARGET_REAL:.0%} target")
    if spark.rates:
        grpc = spark.best(("broker_sim, endpoint (gRPC door)", "BatchCQ"))
        remoting_share = spark.best((door, "BatchCQ")) / grpc
        two_share = spark.best(("broker_sim, two brokers, nameServer", "BatchCQ")) / spark.best((door, "BatchCQ"))
        notes.append(f"through nameServer broker_sim is read at {remoting_share:.0%} of its gRPC door's rate: "
                     f"{'meets' if remoting_share >= TARGET_REMOTING else 'MISSES'} the {TARGET_REMOTING:.0%} target")
        notes.append(f"a topic on two brokers is read at {two_share:.0%} of a one-broker topic of the same size: "
                     f"{'meets' if two_share >= TARGET_TWO_BROKERS else 'MISSES'} the {TARGET_TWO_BROKERS:.0%} target")
    notes.append(f"{args.messages:,} messages of {BODY_BYTES} B in {QUEUES} queues per topic, stored batches of "
                 f"{BATCH} (RocketMQ's MessageBatch, uncompressed; SimpleCQ: a record a message); Spark local[2]; "
                 f"recommended settings: {RECOMMENDED}; every process on this machine")
    if args.pin:
        notes.append("--pin: the brokers' processes on CPU 0, the reader's (this one; the Java consumer's JVM, "
                     "started from it, too) on CPU 1")
    notes.append("CPU a row: the CPU time the reader's process (the SDK's rows: this one) and the broker's process "
                 "spent over the best attempt, every thread, divided by the rows read; the broker's includes what it "
                 "does when idle (RocketMQ 5.5.0: about 0.1 core)")
    report.write("spark-remoting", results, ["read", "queue type", "rows/s (best)", "spread", "of the remoting door",
                                             "before (baseline)", "reader CPU a row", "broker CPU a row"], notes,
                 plot=lambda ax: _plot(ax, results))


def _plot(ax, rows) -> None:
    labels = [f"{r['read']} ({r['queue type']})" for r in rows]
    ax.barh(labels, [r["rows/s (best)"] for r in rows], color="C0")
    ax.set_xlabel("rows/s")
    ax.tick_params(axis="y", labelsize=6)
    ax.invert_yaxis()
    ax.set_title("Reads through nameServer, 1 KB messages")


if __name__ == "__main__":
    sys.exit(main())
