"""Transaction benchmark (issue 8): inner batches of 1 KB messages sent prepared and then
committed, beside the same batches sent plain, in the same run; broker in its own process.

Each row sends the same pre-encoded payloads (rmq codec, no compression) from 4 writer
threads into a BatchCQ topic of 16 queues, one Send per batch. The prepared row is what the
exactly-once sink does: each writer (a Spark task) prepares under its own transaction, then
one commit ends all four and records a sink batch (the driver). Its msgs/s counts the
prepare and the commit; the commit's own rate shows how fast committed batches are copied
from the half log into the commitlog (flushes included). The sink's target is 250,000 rows/s.

    python bench/txn_bench.py [--messages 400000] [--batches 32,256,1024]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from bench.process_memory import peak_rss_bytes  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from rmq_spark import Admin, PreparedTransaction, Transactions  # noqa: E402
from rmq_spark.client.connect import connect  # noqa: E402
from rmq_spark.client.transport import InnerBatch, Send  # noqa: E402
from rmq_wire.codec import Codec, Compression, encode_messages  # noqa: E402

BODY_BYTES = 1024
WRITERS = 4
QUEUES = 16
TOPIC = "txn-bench"


def payloads(batch: int, distinct: int = 8) -> list[bytes]:
    return [encode_messages([(os.urandom(BODY_BYTES), None, None, None, None)] * batch, "rmq", "none")
            for _ in range(distinct)]


def run_writers(work) -> float:
    """Run ``work(writer)`` on WRITERS threads; returns the seconds taken."""
    errors = []

    def guarded(writer):
        try:
            work(writer)
        except BaseException as err:  # reported after the join
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(w,)) for w in range(WRITERS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def send_all(endpoint: str, writer: int, batch: int, sends: int, encoded: list[bytes],
             transaction_id: str = "") -> None:
    """One writer's sends of pre-encoded inner batches, one call each, each answered before the next."""
    transport = connect(endpoint)
    try:
        for i in range(sends):
            answered = concurrent.futures.Future()
            send = Send(TOPIC, (writer * 4 + i) % QUEUES, InnerBatch(encoded[i % len(encoded)], batch, Codec.RMQ,
                                                                     Compression.NONE),
                        transaction_id=transaction_id)
            if transaction_id:  # stamped, as the transactional producer's sends
                send = send._replace(producer_id=transaction_id, sequence=i)
            transport.send_many([send], 30_000, lambda outcomes, error, answered=answered: answered.set_result(
                error or outcomes[0]))
            outcome = answered.result()
            if isinstance(outcome, Exception):
                raise outcome
    finally:
        transport.close()


def plain_row(endpoint: str, batch: int, messages: int) -> dict:
    encoded = payloads(batch)
    sends = messages // batch // WRITERS
    seconds = run_writers(lambda writer: send_all(endpoint, writer, batch, sends, encoded))
    sent = sends * batch * WRITERS
    return {"row": f"plain inner batches of {batch} (baseline)", "batch": batch, "messages": sent,
            "msgs/s": sent / seconds, "MB/s": sent * BODY_BYTES / seconds / 1e6}


def prepared_row(endpoint: str, batch: int, messages: int, batch_id: int) -> dict:
    encoded = payloads(batch)
    sends = messages // batch // WRITERS
    prepared = [PreparedTransaction(f"bench-{batch_id}-w{writer}", sends, sends * batch) for writer in range(WRITERS)]

    started = time.perf_counter()
    prepare_s = run_writers(lambda writer: send_all(endpoint, writer, batch, sends, encoded,
                                                    prepared[writer].transaction_id))
    commit_started = time.perf_counter()
    with Transactions(endpoint) as txns:
        result = txns.commit(prepared, sink_id="txn-bench", batch_id=batch_id)
    commit_s = time.perf_counter() - commit_started
    seconds = time.perf_counter() - started
    sent = sends * batch * WRITERS
    assert result.messages_made_visible == sent, result
    return {"row": f"prepared + commit, batches of {batch}", "batch": batch, "messages": sent,
            "msgs/s": sent / seconds, "MB/s": sent * BODY_BYTES / seconds / 1e6,
            "prepare msgs/s": sent / prepare_s, "commit msgs/s": sent / commit_s,
            "commit MB/s": sent * BODY_BYTES / commit_s / 1e6, "commit s": commit_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400_000, help="messages per row")
    parser.add_argument("--batches", default="32,256,1024", help="messages per batch, comma-separated")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rmq-txn-bench-") as data_dir:
        with broker_process(Path(data_dir)) as (endpoint, process):
            with Admin(endpoint) as admin:
                admin.create_topic(TOPIC, QUEUES, "BatchCQ")
            for index, batch in enumerate(int(b) for b in args.batches.split(",")):
                print(f"batches of {batch}: {args.messages:,} messages plain, then prepared + commit ...", flush=True)
                rows.append(plain_row(endpoint, batch, args.messages))
                rows.append(prepared_row(endpoint, batch, args.messages, index))
            peak = peak_rss_bytes(process.pid) / (1 << 20)
    notes = []
    for plain, txn in zip(rows[::2], rows[1::2]):
        notes.append(f"batches of {txn['batch']}: prepared + commit at {txn['msgs/s'] / plain['msgs/s']:.0%} of plain "
                     f"sends; the commit copies {txn['commit MB/s']:,.0f} MB/s ({txn['commit msgs/s']:,.0f} msgs/s); "
                     f"{txn['msgs/s']:,.0f} msgs/s {'meets' if txn['msgs/s'] >= 250_000 else 'MISSES'} the sink's "
                     f"250,000 rows/s (plain sends here: {plain['msgs/s']:,.0f})")
    notes.append(f"broker peak RSS {peak:,.0f} MiB")

    def plot(ax):
        labels = [r["row"] for r in rows]
        ax.barh(labels, [r["msgs/s"] for r in rows])
        ax.axvline(250_000, color="red", linestyle="--", label="sink target 250,000 rows/s")
        ax.set_xlabel("msgs/s (1 KB)")
        ax.legend()
        ax.invert_yaxis()

    report.write("txn", rows, ["row", "messages", "msgs/s", "MB/s", "prepare msgs/s", "commit msgs/s", "commit MB/s",
                               "commit s"], notes, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
