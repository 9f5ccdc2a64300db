"""Pop benchmark: pop + ack of 1 KB messages by 4 consumers at a 1:1 read / ack ratio, each pop's
deliveries acked in an Ack call of their own before the next pop ("call"), or carried by the
next pop (``receive(ack=...)``, "carried": one call a round), with the broker in its own
process (2 cores in all).

Rows: a SimpleCQ topic (a delivery per message) popped 32 at a time (RocketMQ's maximum) and
256 at a time (broker_sim allows up to 1024: a gRPC call costs as much as dozens of messages),
and a BatchCQ topic (batches of 32, what RocketMQ's 32 KiB AutoBatch makes of 1 KB messages, in
the arrow codec of the Spark sink; a delivery per batch) popped 32 units at a time. Consumers
use what they pop: SimpleCQ messages as structs (``Delivery.messages()``), BatchCQ units as
Arrow (``Delivery.records``). Each 32-a-pop row is run through our gRPC door and through the
same broker's remoting door (RocketMQ's POP_MESSAGE, and BATCH_ACK_MESSAGE: one ack request a
pop), as the SDK pops any RocketMQ cluster. The baseline, measured in the same run, is a
RangeReader read of the same messages into Arrow. The consumers are threads of one process (the broker has the
other core), or processes of their own (``--processes``: five processes then share 2 cores).

    python bench/pop_bench.py [--simple-messages 200000] [--batch-messages 1000000] [--queues 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from bench.process_memory import rss_bytes  # noqa: E402
from bench.read_bench import fill, read_all  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from peers.process import free_port  # noqa: E402
from rmq_spark import PopConsumer  # noqa: E402

TARGETS = {"SimpleCQ": 40_000, "BatchCQ": 200_000}
BATCH = 32


def consume_until(endpoint: str, group: str, topic: str, per_pop: int, expected: int, popped, start,
                  seconds_limit: float, name_server: str | None = None, carried: bool = False) -> None:
    """Pop, use and ack until the consumers together popped ``expected`` messages (``popped``
    is a shared counter) or ``seconds_limit`` passed; through ``name_server`` (the remoting
    door) when given, else our door at ``endpoint``."""
    address = {"name_server": name_server} if name_server else {"endpoint": endpoint}
    with PopConsumer(**address, group=group, topics=topic, invisible_ms=60_000, max_messages=per_pop,
                     poll_ms=200) as consumer:
        start.wait()
        give_up, deliveries = time.monotonic() + seconds_limit, []
        while time.monotonic() < give_up:
            with popped.get_lock():
                if popped.value >= expected:
                    break
            deliveries = consumer.receive(ack=deliveries) if carried else consumer.receive()
            if deliveries:
                used = sum(d.records.num_rows if d.count > 1 else len(d.messages()) for d in deliveries)
                if not carried:
                    consumer.ack(deliveries)
                with popped.get_lock():
                    popped.value += used
        if carried and deliveries:
            consumer.ack(deliveries)


def pop_all(endpoint: str, topic: str, per_pop: int, expected: int, consumers: int, threads: bool,
            limit_s: float, name_server: str | None = None, carried: bool = False) -> tuple[int, float]:
    group = f"bench-{topic}-{os.getpid()}-{time.monotonic_ns()}"
    if threads:
        popped, start = multiprocessing.Value("q", 0), threading.Event()
        workers = [threading.Thread(target=consume_until, args=(endpoint, group, topic, per_pop, expected, popped,
                                                                start, limit_s, name_server, carried))
                   for _ in range(consumers)]
    else:
        context = multiprocessing.get_context("spawn")
        popped, start = context.Value("q", 0), context.Event()
        workers = [context.Process(target=consume_until, args=(endpoint, group, topic, per_pop, expected, popped,
                                                               start, limit_s, name_server, carried))
                   for _ in range(consumers)]
    for worker in workers:
        worker.start()
    time.sleep(1.0 if not threads else 0.1)  # processes import the SDK and connect before the clock starts
    started = time.perf_counter()
    start.set()
    for worker in workers:
        worker.join()
    return popped.value, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simple-messages", type=int, default=300_000)
    parser.add_argument("--batch-messages", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--processes", action="store_true", help="consumers as processes (default: threads)")
    parser.add_argument("--limit-s", type=float, default=300, help="give up a row after this long")
    args = parser.parse_args(argv)
    rows = []
    remoting = free_port()
    doors = {"gRPC": None, "remoting": f"127.0.0.1:{remoting}"}
    with tempfile.TemporaryDirectory(prefix="rmq-pop-bench-") as data_dir:
        with broker_process(Path(data_dir), "--remoting-port", str(remoting)) as (endpoint, process):
            for queue_type, codec, messages, plan in (
                    ("SimpleCQ", "rmq", args.simple_messages,
                     ((32, "gRPC", "call"), (32, "gRPC", "carried"), (32, "remoting", "call"),
                      (256, "gRPC", "carried"))),
                    ("BatchCQ", "arrow", args.batch_messages,
                     ((32, "gRPC", "call"), (32, "gRPC", "carried"), (32, "remoting", "call")))):
                topic = f"pop{queue_type}"
                print(f"filling {queue_type}: {messages:,} messages ...", flush=True)
                fill(endpoint, topic, queue_type, codec, "none", BATCH, args.queues, messages)
                stored = messages // BATCH * BATCH
                read_rows, read_s = read_all(endpoint, topic, args.queues)
                assert read_rows == stored, (read_rows, stored)
                for per_pop, door, acks in plan:
                    popped, pop_s = pop_all(endpoint, topic, per_pop, stored, args.consumers, not args.processes,
                                            args.limit_s, doors[door], acks == "carried")
                    rate = popped / pop_s
                    rows.append({"topic": f"{queue_type} ({codec})", "door": door, "deliveries per pop": per_pop,
                                 "acks": acks,
                                 "messages": stored, "pop+ack msgs/s": rate,
                                 "range read msgs/s (baseline)": read_rows / read_s,
                                 "pop / read": rate / (read_rows / read_s), "target msgs/s": TARGETS[queue_type],
                                 "broker RSS MiB": rss_bytes(process.pid) / (1 << 20)})
                    if popped < stored:
                        print(f"WARNING: {queue_type}: only {popped:,} of {stored:,} popped within {args.limit_s} s")
    notes = [f"{r['topic']}, {r['deliveries per pop']} per pop, {r['door']} door, acks {r['acks']}: pop + ack "
             f"{r['pop+ack msgs/s']:,.0f} msgs/s, "
             f"{r['pop / read']:.2f}x the range read; "
             f"{'meets' if r['pop+ack msgs/s'] >= r['target msgs/s'] else 'MISSES'} the {r['target msgs/s']:,} "
             "msgs/s target" for r in rows]
    notes.append(f"consumers: {args.consumers} {'processes' if args.processes else 'threads'}; acks 'call': an Ack "
                 "call before the next pop, 'carried': by the next pop; BatchCQ batches of 32 messages (one delivery "
                 "each)")
    report.write("pop", rows, ["topic", "door", "deliveries per pop", "acks", "messages", "pop+ack msgs/s",
                               "range read msgs/s (baseline)", "pop / read", "target msgs/s", "broker RSS MiB"], notes,
                 plot=lambda ax: _plot(ax, rows))
    return 0


def _plot(ax, rows) -> None:
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["pop+ack msgs/s"] for r in rows], width=0.4, label="pop + ack")
    ax.bar([i + 0.2 for i in x], [r["range read msgs/s (baseline)"] for r in rows], width=0.4, color="grey",
           label="range read (baseline)")
    for i, r in enumerate(rows):
        ax.hlines(r["target msgs/s"], i - 0.4, i + 0.4, color="red", linestyle="--")
    ax.set_xticks(list(x), [f"{r['topic']}\n{r['deliveries per pop']} per pop, {r['door']}, {r['acks']}" for r in rows],
                  fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("msgs/s (log)")
    ax.legend()
    ax.set_title("Pop + ack, 1 KB messages, 4 consumers, broker in its own process (red: targets)")


if __name__ == "__main__":
    sys.exit(main())
