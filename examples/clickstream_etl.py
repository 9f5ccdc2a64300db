"""Clickstream ETL: producers -> a Structured Streaming query -> aggregates, exactly once.

    python examples/clickstream_etl.py                           # an embedded broker, local Spark
    python examples/clickstream_etl.py --endpoint HOST:PORT      # a running rmq-broker-sim
    python examples/clickstream_etl.py --name-server HOST:PORT   # any RocketMQ cluster
    RMQ_SECRET_KEY=... python examples/clickstream_etl.py --endpoint HOST:PORT --access-key etl   # with ACLs

1. Producers write JSON click events with AutoBatch into the BatchCQ topic ``clicks``.
2. A streaming query reads them with ``format("rocketmq-batch")``, parses the JSON, counts
   clicks per page per minute of event time (a watermark closes the minutes) and writes each
   closed minute once, exactly once, to the topic ``page-minute-counts``
   (``writeStream.format("rocketmq-batch")``: each task prepares its rows under a transaction,
   the driver commits them with the batch id). Through a RocketMQ cluster's name servers the
   write is at least once (RocketMQ's transactions cannot fence a replayed batch).
3. A pop consumer reads the aggregates and prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time

import broker_sim
from rmq_spark import (
    Admin,
    ConfigError,
    Credentials,
    Message,
    PermissionDeniedError,
    PopConsumer,
    Producer,
    TopicConflictError,
    TransportConfig,
)

PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help"]
MINUTE_MS = 60_000


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="HOST:PORT of a running broker (default: start one in this process)")
    parser.add_argument("--name-server", help="instead: a RocketMQ cluster's name servers, HOST:PORT[;HOST:PORT]")
    parser.add_argument("--events", type=int, default=200_000, help="click events to produce")
    parser.add_argument("--minutes", type=int, default=5, help="minutes of event time the clicks span")
    parser.add_argument("--producers", type=int, default=2, help="producer threads")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--max-records-per-trigger", type=int, default=50_000)
    parser.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--access-key", help="for a broker with ACLs: the account to sign with; its secret comes "
                                             "from the environment variable RMQ_SECRET_KEY")
    return parser.parse_args(argv)


def step(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def create_topics(address: dict, queues: int) -> None:
    """The topics, unless they exist (with ACLs an admin account makes them beforehand)."""
    with Admin(**address) as admin:
        for name, count in (("clicks", queues), ("page-minute-counts", 4)):
            try:
                admin.create_topic(name, count, "BatchCQ")
            except TopicConflictError:  # it exists: use it as it is
                pass
            except PermissionDeniedError:  # not an admin account: the topic must exist
                admin.describe_topic(name)


def produce_clicks(address: dict, events: int, minutes: int, producers: int, start_ms: int) -> dict:
    """Click events spread over ``minutes`` of event time; returns the true counts per
    (page, minute start), to check the query's output against."""
    truth: dict = {}
    lock = threading.Lock()
    sent = [0]

    def work(index: int, count: int) -> None:
        rng = random.Random(index)
        local: dict = {}
        # lz4 over each batch through our door; RocketMQ's own batches are not compressed
        with Producer(**address, compression="lz4" if "endpoint" in address else "none") as producer:
            for i in range(count):
                event_ms = start_ms + rng.randrange(minutes * MINUTE_MS)
                page = rng.choice(PAGES)
                user = f"user-{rng.randrange(10_000)}"
                body = json.dumps({"user": user, "page": page, "ts": event_ms}).encode()
                producer.send_async(Message("clicks", body, keys=user, tags="click"))
                key = (page, event_ms // MINUTE_MS * MINUTE_MS)
                local[key] = local.get(key, 0) + 1
                if i % 20_000 == 19_999:
                    with lock:
                        sent[0] += 20_000
                        step(f"  produced {sent[0]:,} / {events:,} clicks")
        with lock:
            for key, n in local.items():
                truth[key] = truth.get(key, 0) + n

    per = events // producers
    threads = [threading.Thread(target=work, args=(i, per)) for i in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # One late click, minutes after the others: it moves the watermark past every minute above.
    with Producer(**address) as producer:
        producer.send(Message("clicks", json.dumps({"user": "late", "page": "/late",
                                                    "ts": start_ms + (minutes + 5) * MINUTE_MS}).encode()))
    return truth


def spark_session(master: str):
    """A local Spark whose workers run this interpreter, its log quiet from the JVM's start."""
    from rmq_spark.spark.local import local_session

    return local_session("clickstream-etl", master, **{"spark.sql.shuffle.partitions": 4})


def run_query(spark, address: dict, checkpoint: str, max_records: int, minutes: int) -> float:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructType

    event = StructType().add("user", StringType()).add("page", StringType()).add("ts", LongType())
    option, where = _option(address)
    clicks = (spark.readStream.format("rocketmq-batch")
              .option(option, where).options(**_signing(address)).option("topic", "clicks")
              .option("startingOffsets", "earliest")
              .option("maxRecordsPerTrigger", max_records)
              .load())
    counts = (clicks
              .select(F.from_json(F.col("body").cast("string"), event).alias("e"))
              .select("e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time"))
              # clicks of any minute arrive in any order: the watermark waits out the whole span
              .withWatermark("event_time", f"{minutes} minutes")
              .groupBy(F.window("event_time", "1 minute"), "page")
              .count())
    out = counts.select(
        F.col("page").alias("keys"),
        F.to_json(F.struct("page", (F.col("window.start").cast("long") * 1000).alias("minute_ms"),
                           "count")).alias("body"))
    started = time.perf_counter()
    query = (out.writeStream.format("rocketmq-batch")
             .option(option, where).options(**_signing(address)).option("topic", "page-minute-counts")
             .option("checkpointLocation", checkpoint)
             .outputMode("append")
             .trigger(availableNow=True)
             .start())
    report_progress(query, started)
    if query.exception():
        raise query.exception()
    return time.perf_counter() - started


def report_progress(query, started: float, quiet_s: float = 10.0) -> None:
    """One line per finished micro-batch, and a line every ``quiet_s`` while none finishes."""
    shown, last_line = -1, time.perf_counter()
    while True:
        finished = query.awaitTermination(0.5)
        for done in (p for p in query.recentProgress if p["batchId"] > shown):
            step(f"  micro-batch {done['batchId']}: {done['numInputRows']:,} clicks in, "
                 f"{done.get('processedRowsPerSecond') or 0:,.0f} rows/s")
            shown, last_line = done["batchId"], time.perf_counter()
        if finished:
            return
        if time.perf_counter() - last_line >= quiet_s:
            step(f"  micro-batch {shown + 1} running ({time.perf_counter() - started:.0f} s since the query started)")
            last_line = time.perf_counter()


def _option(address: dict) -> tuple[str, str]:
    """The Spark option naming ``address``: endpoint or nameServer."""
    return ("endpoint", address["endpoint"]) if "endpoint" in address else ("nameServer", address["name_server"])


def _signing(address: dict) -> dict:
    """The Spark options of the account the SDK signs with, if any."""
    credentials = address.get("transport", TransportConfig()).credentials
    if credentials is None:
        return {}
    return {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}


def read_aggregates(address: dict, expected: int, timeout_s: float = 60) -> list[dict]:
    rows: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with PopConsumer(**address, group="dashboard", topics="page-minute-counts", poll_ms=500,
                     max_messages=32 if "name_server" in address else 256) as consumer:
        while len(rows) < expected and time.monotonic() < deadline:
            for delivery in consumer.receive():
                rows += [json.loads(m.body) for m in delivery.messages()]
                consumer.ack(delivery)
    return rows


def main(argv=None, spark=None) -> dict:
    """Run the example; ``spark``: a session to use (and leave running) instead of a new one."""
    args = parse_args(argv)
    start_ms = int(time.time() * 1000) // MINUTE_MS * MINUTE_MS - 30 * MINUTE_MS
    with _broker(args) as address, tempfile.TemporaryDirectory(prefix="clickstream-") as scratch:
        step(f"broker at {_option(address)[1]}; creating topics")
        create_topics(address, args.queues)
        step(f"producing {args.events:,} click events with AutoBatch ({args.producers} producers)")
        started = time.perf_counter()
        truth = produce_clicks(address, args.events, args.minutes, args.producers, start_ms)
        produced_s = time.perf_counter() - started
        step(f"produced in {produced_s:.1f} s ({args.events / produced_s:,.0f} msgs/s); starting Spark "
             f"({args.master}, some seconds)")
        session = spark or spark_session(args.master)
        step("Spark started; the streaming query reads the clicks")
        try:
            seconds = run_query(session, address, args.checkpoint or os.path.join(scratch, "checkpoint"),
                                args.max_records_per_trigger, args.minutes)
        finally:
            if spark is None:
                session.stop()
        step(f"the streaming query read {args.events:,} clicks in {seconds:.1f} s "
             f"({args.events / seconds:,.0f} rows/s, Spark's start included)")
        aggregates = read_aggregates(address, len(truth))
        step(f"a pop consumer read {len(aggregates)} aggregates (page, minute, count):")
        for row in sorted(aggregates, key=lambda r: (r["minute_ms"], r["page"])):
            minute = time.strftime("%H:%M", time.gmtime(row["minute_ms"] / 1000))
            print(f"    {minute} UTC  {row['page']:<10} {row['count']:>7,}")
        got = {(row["page"], row["minute_ms"]): row["count"] for row in aggregates}
        exact = len(got) == len(aggregates) and got == truth
        print(f"every click counted exactly once: {exact} ({sum(got.values()):,} of {sum(truth.values()):,})")
        return {"aggregates": aggregates, "truth": truth, "exact": exact,
                "produce_msgs_per_s": args.events / produced_s, "query_rows_per_s": args.events / seconds}


@contextlib.contextmanager
def _broker(args):
    """The SDK's address: the name servers given, the endpoint given, or an embedded broker's;
    with the account to sign with, if given."""
    signed = {}
    if args.access_key:
        try:
            signed["transport"] = TransportConfig(credentials=Credentials.from_environment(args.access_key))
        except ConfigError as err:
            sys.exit(f"--access-key: {err}")
    if args.name_server:
        yield {"name_server": args.name_server, **signed}
        return
    with broker_sim.embedded_unless(args.endpoint) as endpoint:
        yield {"endpoint": endpoint, **signed}


if __name__ == "__main__":
    main()
