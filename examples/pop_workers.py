"""Pop workers: stateless consumers share a topic; failed messages come back, then go to the DLQ.

    python examples/pop_workers.py                      # an embedded broker
    python examples/pop_workers.py --endpoint HOST:PORT # a running rmq-broker-sim

Several PopConsumers of one group pop the same topic: the broker hands each message to one of
them and keeps it invisible to the others until it is acked. The handler fails on "poison"
orders: those are not acked but made visible again 200 ms later; they come back through the
group's retry topic with one more reconsume, and after the broker's maximum retries land in
``%DLQ%{group}``. The others are acked well within their 30 s of invisible time, so each is
handled once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections import Counter

import broker_sim
from broker_sim.pop import PopConfig
from rmq_spark import (
    Admin,
    Message,
    PopConsumer,
    Producer,
    ReceiptHandleExpiredError,
    TopicConflictError,
    TopicNotFoundError,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="HOST:PORT of a running broker (default: start one in this process)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="order-workers")
    parser.add_argument("--orders", type=int, default=2_000)
    parser.add_argument("--poison-every", type=int, default=500, help="every n-th order fails in the handler")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--max-retries", type=int, default=3,
                        help="retries before the DLQ, for the embedded broker (a running one has its own)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="give up waiting after this long")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    with broker_sim.embedded_unless(args.endpoint, pop=PopConfig(max_reconsume_times=args.max_retries)) as endpoint:
        with Admin(endpoint) as admin:
            with contextlib.suppress(TopicConflictError):
                admin.create_topic(args.topic, 4, "SimpleCQ")
        poison = {i for i in range(args.orders) if i % args.poison_every == args.poison_every - 1}
        with Producer(endpoint) as producer:
            for i in range(args.orders):
                body = json.dumps({"order": i, "poison": i in poison}).encode()
                producer.send_async(Message(args.topic, body, keys=f"order-{i}"))
        print(f"sent {args.orders:,} orders, {len(poison)} of them poison")

        done, attempts, lock, stop = set(), Counter(), threading.Lock(), threading.Event()

        def handle(message) -> None:
            order = json.loads(message.body)
            with lock:
                attempts[order["order"]] += 1
            if order["poison"]:
                raise ValueError(f"order {order['order']} cannot be processed")
            with lock:
                done.add(order["order"])

        def work(index: int) -> None:
            # A popped message stays invisible to the group for 30 s unless acked: time enough to
            # handle it, however busy the machine. A failed one is made visible again after
            # 200 ms instead (the broker's minimum is 100), as RocketMQ 5's clients retry.
            with PopConsumer(endpoint, args.group, args.topic, invisible_ms=30_000, max_messages=64,
                             poll_ms=200) as consumer:
                while not stop.is_set():
                    handled = []
                    for delivery in consumer.receive():
                        try:
                            for message in delivery.messages():
                                handle(message)
                        except ValueError:
                            # not acked: it comes back through the retry topic, or goes to the DLQ
                            consumer.change_invisible_duration(delivery, 200)
                            continue
                        handled.append(delivery)
                    try:
                        consumer.ack(handled)  # one call for what this pop handled
                    except ReceiptHandleExpiredError:
                        pass  # handled after its invisible time: it comes back (at least once)

        workers = [threading.Thread(target=work, args=(i,)) for i in range(args.workers)]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        dead_letters = []
        with PopConsumer(endpoint, args.group + "-dlq-reader", f"%DLQ%{args.group}", poll_ms=200) as dlq:
            while (len(done) < args.orders - len(poison) or len(dead_letters) < len(poison)) \
                    and time.monotonic() - started < args.timeout_s:
                try:
                    deliveries = dlq.receive()
                except TopicNotFoundError:  # the broker creates the DLQ with its first message
                    time.sleep(0.2)
                    continue
                for delivery in deliveries:
                    dead_letters += [json.loads(m.body)["order"] for m in delivery.messages()]
                    dlq.ack(delivery)
        stop.set()
        for worker in workers:
            worker.join()
        elapsed = time.monotonic() - started
        retried = sorted(attempts[i] for i in poison)
        print(f"{args.workers} workers processed {len(done):,} orders in {elapsed:.1f} s; each order once: "
              f"{all(attempts[i] == 1 for i in done)}")
        print(f"poison orders tried {retried} times, then found in %DLQ%{args.group}: {sorted(dead_letters)}")
        return {"processed": len(done), "dead_letters": sorted(dead_letters), "poison": sorted(poison),
                "attempts_of_poison": retried}


if __name__ == "__main__":
    main()
