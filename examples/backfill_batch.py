"""Backfill with batch jobs: a time range of a topic into Parquet, and Parquet back into a topic.

    python examples/backfill_batch.py                      # an embedded broker, local Spark
    python examples/backfill_batch.py --endpoint HOST:PORT # a running rmq-broker-sim

1. Orders are produced into the topic ``orders`` in two waves, some time apart.
2. ``spark.read.format("rocketmq-batch")`` reads the second wave only, by store time
   (``startingTimestamp`` / ``endingTimestamp``, answered by BatchCQ's time index), and
   writes it to Parquet.
3. ``df.write.format("rocketmq-batch")`` writes the Parquet file into the topic
   ``orders-replay``: all or nothing (the tasks' rows are committed in one transaction step).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time

import pyarrow as pa

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # quiet gRPC's note when Spark starts its JVM

import broker_sim  # noqa: E402
from rmq_spark import Admin, Producer, TopicConflictError  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="HOST:PORT of a running broker (default: start one in this process)")
    parser.add_argument("--orders", type=int, default=50_000, help="orders per wave")
    parser.add_argument("--parquet", help="where to write the Parquet files (default: a temporary directory)")
    parser.add_argument("--master", default="local[2]")
    return parser.parse_args(argv)


def wave(producer: Producer, first: int, count: int, label: str) -> None:
    bodies = [json.dumps({"order": i, "wave": label, "amount": i % 97}).encode() for i in range(first, first + count)]
    producer.send_arrow(pa.table({"body": bodies, "keys": [f"customer-{i % 500}" for i in range(first, first + count)],
                                  "tags": [label] * count}), "orders").wait()


def spark_session(master: str):
    """A local Spark whose workers run this interpreter, its log quiet from the JVM's start."""
    from rmq_spark.spark.local import local_session

    return local_session("backfill", master)


def main(argv=None, spark=None) -> dict:
    """Run the example; ``spark``: a session to use (and leave running) instead of a new one."""
    args = parse_args(argv)
    with broker_sim.embedded_unless(args.endpoint) as endpoint, \
            tempfile.TemporaryDirectory(prefix="backfill-") as scratch:
        parquet = args.parquet or os.path.join(scratch, "orders.parquet")
        with Admin(endpoint) as admin:
            for name in ("orders", "orders-replay"):
                with contextlib.suppress(TopicConflictError):
                    admin.create_topic(name, 4, "BatchCQ")
        with Producer(endpoint, codec="arrow", compression="lz4") as producer:
            wave(producer, 0, args.orders, "first")
            time.sleep(0.05)
            second_from_ms = int(time.time() * 1000)
            wave(producer, args.orders, args.orders, "second")
            second_until_ms = int(time.time() * 1000) + 1
        print(f"produced two waves of {args.orders:,} orders; the second from {second_from_ms}")

        session = spark or spark_session(args.master)
        try:
            source = (session.read.format("rocketmq-batch").option("endpoint", endpoint).option("topic", "orders")
                      .option("startingTimestamp", second_from_ms).option("endingTimestamp", second_until_ms)
                      .load())
            started = time.perf_counter()
            source.select("queue_id", "queue_offset", "keys", "tags", "body", "store_timestamp") \
                .write.mode("overwrite").parquet(parquet)
            read_s = time.perf_counter() - started
            saved = session.read.parquet(parquet)
            rows = saved.count()
            waves = {r["tags"]: r["count"] for r in saved.groupBy("tags").count().collect()}
            print(f"spark.read of the second wave by store time: {rows:,} rows into {parquet} in {read_s:.1f} s; "
                  f"waves seen: {waves}")

            started = time.perf_counter()
            saved.select("body", "keys", "tags").write.format("rocketmq-batch") \
                .option("endpoint", endpoint).option("topic", "orders-replay").mode("append").save()
            write_s = time.perf_counter() - started
        finally:
            if spark is None:
                session.stop()
        with Admin(endpoint) as admin:
            replayed = sum(q.max_offset - q.min_offset for q in admin.offsets(["orders-replay"])["orders-replay"])
        print(f"df.write of the Parquet rows into orders-replay: {replayed:,} messages in {write_s:.1f} s")
        return {"parquet_rows": rows, "waves": waves, "replayed": replayed}


if __name__ == "__main__":
    main()
