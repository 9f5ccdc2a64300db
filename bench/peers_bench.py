"""Peer benchmark: our figures beside the real systems', measured in one run on one machine,
1 KB bodies.

- Spark readStream into noop (Trigger.AvailableNow over a backlog): ``rocketmq-batch`` from
  broker_sim beside Spark's Kafka connector from Kafka, at 16 and 10,000 queues/partitions.
- Spark writeStream of the same rows: ``rocketmq-batch`` exactlyOnce and atLeastOnce into
  broker_sim beside the Kafka connector into Kafka (at least once, its only mode).
- Producers, 4 threads, 100 queues: our AutoBatch into broker_sim; RocketMQ's Java producer
  with autoBatch into the real broker; kafka-python and confluent-kafka into Kafka; the official
  RocketMQ Python client (rocketmq-python-client, gRPC, in its own venv: send_async, 256 in
  flight) through the real proxy.

A row whose peer or client is missing says "skipped" and why; a row that fails or runs out of
time says so: no number is made up. The peers come from `make peers`.

    python bench/peers_bench.py [--rows 1000000] [--queues 16,10000] [--producer-messages 200000]
                                [--sections read,write,produce] [--row-limit-s 900]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import produce_bench, report, spark_write_bench  # noqa: E402
from bench.read_bench import fill  # noqa: E402
from bench.spark_read_bench import run_to_noop  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from peers import python_client  # noqa: E402

BODY_BYTES = 1024
BODY = os.urandom(BODY_BYTES)
PRODUCER_THREADS, PRODUCER_QUEUES = 4, 100
READS = 2  # reads of each backlog; the best is reported
COLUMNS = ["section", "row", "system", "queues", "rows", "rows/s", "MB/s", "note"]


class Rows:
    """The table being filled: one row per measurement, or per skip or failure with its reason."""

    def __init__(self):
        self.rows: list[dict] = []

    def measure(self, section: str, name: str, system: str, queues: int, run) -> None:
        """``run()`` returns (rows, rows/s); exceptions become the row's note."""
        print(f"{section}: {name} ({queues:,} queues) ...", flush=True)
        row = {"section": section, "row": name, "system": system, "queues": queues, "rows": 0, "rows/s": None,
               "MB/s": None, "note": ""}
        try:
            count, rate = run()
            row.update({"rows": count, "rows/s": rate, "MB/s": rate * BODY_BYTES / 1e6})
        except Skip as skip:
            row["note"] = f"skipped: {skip}"
        except Exception as err:  # a failed peer row is reported, and the others still run
            row["note"] = f"failed: {_reason(err)}"
        print(f"  -> {row['rows/s']:,.0f} rows/s" if row["rows/s"] else f"  -> {row['note']}", flush=True)
        self.rows.append(row)


def _reason(err: Exception) -> str:
    """A failure in a line: a JVM error's deepest cause (Py4J's own message says nothing)."""
    java = getattr(err, "java_exception", None)
    while java is not None and java.getCause() is not None:
        java = java.getCause()
    text = java.toString() if java is not None else f"{type(err).__name__}: {err}"
    return text.splitlines()[0][:200] if text else type(err).__name__


class Skip(Exception):
    """A row that cannot run here (its peer or client is missing)."""


def _peer(group: str) -> None:
    import peers

    try:
        peers.jars(group)
    except peers.PeersMissing as missing:
        raise Skip(str(missing)) from None


# --- Spark ------------------------------------------------------------------------------------

def spark_session():
    import peers

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    try:
        jars = ",".join(str(j) for j in peers.spark_kafka_jars())
    except peers.PeersMissing:
        jars = ""
    spark = (SparkSession.builder.master("local[2]").appName("peers-bench")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
             .config("spark.jars", jars).getOrCreate())
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def kafka_rows(spark, rows: int):
    """``rows`` rows of a 1 KB value and a key, as the Kafka connector writes them."""
    value = f"CAST(concat(lpad(CAST(id AS STRING), 24, '0'), '{'x' * (BODY_BYTES - 24)}') AS BINARY) AS value"
    return spark.range(rows).selectExpr("CAST(id AS STRING) AS key", value)


def best_of(attempts: int, run) -> tuple[int, float]:
    """The best of ``attempts`` runs (the first also warms the JVM and the Python workers up)."""
    results = [run(attempt) for attempt in range(attempts)]
    return max(results, key=lambda result: result[1])


def read_section(table: Rows, spark, endpoint: str, kafka, queue_counts: list[int], rows: int, work: Path) -> None:
    for queues in queue_counts:
        topic = f"read{queues}"

        def ours(topic=topic, queues=queues):
            fill(endpoint, topic, "BatchCQ", "arrow", "lz4", 32, queues, rows)
            reader = spark.readStream.format("rocketmq-batch").options(
                endpoint=endpoint, topic=topic, startingOffsets="earliest")
            return best_of(READS, lambda attempt: run_to_noop(reader, work / f"read-ours-{queues}-{attempt}"))

        def theirs(topic=topic, queues=queues):
            if kafka is None:
                raise Skip("no Kafka peer (make peers)")
            kafka.create_topic(topic, queues)
            kafka_rows(spark, rows).write.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
                .option("topic", topic).save()
            reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap) \
                .option("subscribe", topic).option("startingOffsets", "earliest")
            return best_of(READS, lambda attempt: run_to_noop(reader, work / f"read-kafka-{queues}-{attempt}"))

        table.measure("Spark readStream -> noop", "rocketmq-batch from broker_sim", "ours", queues, ours)
        table.measure("Spark readStream -> noop", "Kafka connector from Kafka", "peer", queues, theirs)


def write_section(table: Rows, spark, endpoint: str, kafka, rocketmq, rows_per_batch: int, batches: int,
                  work: Path) -> None:
    from rmq_spark import Admin

    with Admin(endpoint) as admin:
        admin.create_topic("written", 16, "BatchCQ")
    df = spark_write_bench.rows(spark, rows_per_batch, 2)
    sink = {"endpoint": endpoint, "topic": "written", "compression": "lz4"}
    for guarantee in ("exactlyOnce", "atLeastOnce"):
        table.measure("Spark writeStream", f"rocketmq-batch {guarantee} into broker_sim", "ours", 16,
                      lambda g=guarantee: spark_write_bench.run(df, "rocketmq-batch", {**sink, "deliveryGuarantee": g},
                                                                work / f"write-{g}", batches))

    def into_rocketmq():
        if rocketmq is None:
            raise Skip("no RocketMQ peer (make peers)")
        rocketmq.create_topic("written", 16, batch_cq=True)
        options = {"nameServer": rocketmq.namesrv_addr, "topic": "written", "deliveryGuarantee": "atLeastOnce"}
        return spark_write_bench.run(df, "rocketmq-batch", options, work / "write-rocketmq", batches)

    table.measure("Spark writeStream", "rocketmq-batch atLeastOnce through nameServer into RocketMQ", "ours", 16,
                  into_rocketmq)

    def theirs():
        if kafka is None:
            raise Skip("no Kafka peer (make peers)")
        kafka.create_topic("written", 16)
        options = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": "written"}
        return spark_write_bench.run(df.selectExpr("body AS value"), "kafka", options, work / "write-kafka", batches)

    table.measure("Spark writeStream", "Kafka connector into Kafka (at least once)", "peer", 16, theirs)


# --- producers --------------------------------------------------------------------------------

def produce_section(table: Rows, endpoint: str, kafka, rocketmq, messages: int) -> None:
    from rmq_spark import Admin

    def ours():
        with Admin(endpoint) as admin:
            admin.create_topic("produced", PRODUCER_QUEUES, "BatchCQ")
        result = produce_bench.run(endpoint, "produced", "async", PRODUCER_THREADS, messages)
        return result["messages"], result["msgs/s"]

    def ours_into_rocketmq():
        if rocketmq is None:
            raise Skip("no RocketMQ peer (make peers)")
        rocketmq.create_topic("produced-ours", PRODUCER_QUEUES, batch_cq=True)
        result = produce_bench.run(None, "produced-ours", "async", PRODUCER_THREADS, messages,
                                   name_server=rocketmq.namesrv_addr)
        return result["messages"], result["msgs/s"]

    def java():
        if rocketmq is None:
            raise Skip("no RocketMQ peer (make peers)")
        from peers.rocketmq import java_produce

        rocketmq.create_topic("produced", PRODUCER_QUEUES, batch_cq=True)
        result = java_produce(rocketmq.namesrv_addr, "produced", messages, PRODUCER_THREADS, BODY_BYTES)
        if result["failed"]:
            raise RuntimeError(f"{result['failed']} sends failed: {result['error']}")
        return result["sent"], result["msgs_per_s"]

    def kafka_python():
        if kafka is None:
            raise Skip("no Kafka peer (make peers)")
        from kafka import KafkaProducer

        kafka.create_topic("produced-kp", PRODUCER_QUEUES)
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5, batch_size=32 * 1024, acks=1)
        return _threads(messages, lambda i: producer.send("produced-kp", BODY), producer.flush, producer.close)

    def confluent():
        if kafka is None:
            raise Skip("no Kafka peer (make peers)")
        try:
            from confluent_kafka import Producer
        except ImportError:
            raise Skip("confluent-kafka is not installed") from None
        kafka.create_topic("produced-ck", PRODUCER_QUEUES)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5, "batch.size": 32 * 1024,
                             "acks": 1, "queue.buffering.max.messages": 1_000_000})

        def send(_i):
            while True:
                try:
                    producer.produce("produced-ck", BODY)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)

        return _threads(messages, send, lambda: producer.flush(120), lambda: None)

    def rocketmq_python():
        if rocketmq is None:
            raise Skip("no RocketMQ peer (make peers)")
        rocketmq.create_topic("produced-py", PRODUCER_QUEUES, batch_cq=False)
        count = min(messages, 20_000)  # a message a request: slow, a smaller run
        # In its own venv (peers/python_client.py), send_async with 256 in flight: its fastest way.
        done = python_client.run("send", rocketmq.proxy_endpoint, "produced-py", "--count", str(count),
                                 "--body-bytes", str(len(BODY)), "--asynchronous", timeout_s=1800)
        return count, count / done["seconds"]

    section = f"Producers, {PRODUCER_THREADS} threads"
    table.measure(section, "our AutoBatch (send_async) into broker_sim", "ours", PRODUCER_QUEUES, ours)
    table.measure(section, "our AutoBatch (send_async) through nameServer into RocketMQ", "ours", PRODUCER_QUEUES,
                  ours_into_rocketmq)
    table.measure(section, "RocketMQ Java producer, autoBatch, into RocketMQ (the same broker)", "peer",
                  PRODUCER_QUEUES, java)
    table.measure(section, "kafka-python into Kafka", "peer", PRODUCER_QUEUES, kafka_python)
    table.measure(section, "confluent-kafka into Kafka", "peer", PRODUCER_QUEUES, confluent)
    table.measure(section, "rocketmq-python-client through the RocketMQ proxy", "peer", PRODUCER_QUEUES,
                  rocketmq_python)


def _threads(messages: int, send, flush, close) -> tuple[int, float]:
    per_thread = messages // PRODUCER_THREADS
    errors = []

    def work(first: int) -> None:
        try:
            for i in range(per_thread):
                send(first + i)
        except Exception as err:
            errors.append(err)

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(t * per_thread,)) for t in range(PRODUCER_THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    flush()
    elapsed = time.perf_counter() - started
    close()
    if errors:
        raise errors[0]
    sent = per_thread * PRODUCER_THREADS
    return sent, sent / elapsed


# --- the run ----------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="backlog of each read row (default 1,000,000)")
    parser.add_argument("--queues", default="16,10000", help="queue/partition counts of the read rows")
    parser.add_argument("--write-rows-per-batch", type=int, default=250_000, help="rows per write micro-batch")
    parser.add_argument("--write-batches", type=int, default=4, help="write micro-batches measured")
    parser.add_argument("--producer-messages", type=int, default=200_000, help="messages of each producer row")
    parser.add_argument("--sections", default="read,write,produce", help="which sections to run")
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    table = Rows()
    with tempfile.TemporaryDirectory(prefix="peers-bench-") as work, \
            broker_process(Path(work) / "broker") as (endpoint, _), \
            _maybe_peer("kafka") as kafka, _maybe_peer("rocketmq") as rocketmq:
        work = Path(work)
        if sections & {"read", "write"}:
            spark = spark_session()
            try:
                if "read" in sections:
                    read_section(table, spark, endpoint, kafka, [int(q) for q in args.queues.split(",")], args.rows,
                                 work)
                if "write" in sections:
                    write_section(table, spark, endpoint, kafka, rocketmq, args.write_rows_per_batch,
                                  args.write_batches, work)
            finally:
                spark.stop()
        if "produce" in sections:
            produce_section(table, endpoint, kafka, rocketmq, args.producer_messages)
    import peers

    versions = peers.versions()
    notes = [f"peers: Apache RocketMQ {versions['rocketmq.version']} (name server; proxy in local mode with the "
             f"broker), Kafka {versions['kafka.version']} (KRaft), Spark's Kafka connector "
             f"{versions['spark.kafka.version']}; broker_sim in its own process; Spark local[2]; all on one machine "
             f"of {os.cpu_count()} cores shared with other work, so figures move by 10-30% between runs",
             f"read rows: a backlog of {args.rows:,} rows of {BODY_BYTES} B (ours: BatchCQ, batches of 32, arrow+lz4; "
             f"Kafka: written by its connector), read with Trigger.AvailableNow, best of {READS}; rows/s from query "
             "progress",
             f"write rows: {args.write_rows_per_batch:,} rows per micro-batch, {args.write_batches} measured",
             f"producer rows: {args.producer_messages:,} messages of {BODY_BYTES} B from {PRODUCER_THREADS} threads "
             f"into {PRODUCER_QUEUES} queues/partitions (the RocketMQ Python client sends one message at a time "
             "per thread, so its row sends at most 20,000)"]
    report.write("peers", table.rows, COLUMNS, notes, plot=lambda ax: _plot(ax, table.rows))
    return 0


class _maybe_peer:
    """The peer as a context manager, or None (the rows say why) when it is not fetched."""

    def __init__(self, group: str):
        self.group = group
        self.peer = None

    def __enter__(self):
        try:
            _peer(self.group)
        except Skip as skip:
            print(f"{self.group} peer: {skip}")
            return None
        if self.group == "kafka":
            from peers.kafka import KafkaBroker

            self.peer = KafkaBroker(heap_mb=1024).__enter__()
        else:
            from peers.rocketmq import RocketMQCluster

            self.peer = RocketMQCluster(heap_mb=1024).__enter__()
        return self.peer

    def __exit__(self, *exc):
        if self.peer is not None:
            self.peer.__exit__(*exc)


def _plot(ax, rows) -> None:
    measured = [r for r in rows if r["rows/s"]]
    labels = [f"{r['row']}\n({r['queues']:,} q)" for r in measured]
    colors = ["C0" if r["system"] == "ours" else "grey" for r in measured]
    ax.barh(range(len(measured)), [r["rows/s"] for r in measured], color=colors)
    ax.set_yticks(range(len(measured)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("rows (messages) per second, 1 KB bodies; blue: ours, grey: the peers")
    ax.set_title("rocketmq-batch and broker_sim beside the real peers")


if __name__ == "__main__":
    sys.exit(main())
