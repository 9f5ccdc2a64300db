"""The AutoBatch producer alone: messages sent one by one leave as batches.

    python examples/autobatch_producer.py                      # an embedded broker
    python examples/autobatch_producer.py --endpoint HOST:PORT # a running rmq-broker-sim

Each thread calls the plain ``send_async(message)``; the producer groups messages by (topic,
queue, tag) and sends a batch when its bodies pass ``batch_max_bytes`` or when it is
``batch_max_delay_ms`` old. On a BatchCQ topic a batch is ONE stored record and ONE index unit,
so the broker does the work of one message for many.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time

import broker_sim
from rmq_spark import Admin, Message, Producer, TopicConflictError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="HOST:PORT of a running broker (default: start one in this process)")
    parser.add_argument("--topic", default="autobatch-demo")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--messages", type=int, default=100_000, help="messages in all")
    parser.add_argument("--threads", type=int, default=4, help="threads sending at the same time")
    parser.add_argument("--body-bytes", type=int, default=1024)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    with broker_sim.embedded_unless(args.endpoint) as endpoint:
        with Admin(endpoint) as admin:
            with contextlib.suppress(TopicConflictError):  # it exists with other settings: use it as it is
                admin.create_topic(args.topic, args.queues, "BatchCQ")
        producer = Producer(
            endpoint,
            batch_max_bytes=32 * 1024,       # a batch goes as soon as its bodies pass 32 KiB ...
            batch_max_delay_ms=10,           # ... or once it is 10 ms old (RocketMQ's defaults)
            total_batch_max_bytes=32 << 20,  # bodies held until answered; send() waits for room
            compression="lz4",               # over the whole batch, once, on the client
        )
        errors, body = [], b"x" * args.body_bytes
        per_thread = args.messages // args.threads

        def send(thread: int) -> None:
            for i in range(per_thread):
                message = Message(args.topic, body, keys=f"user-{(thread * per_thread + i) % 1000}")
                producer.send_async(message, callback=lambda result, error: error and errors.append(error))

        started = time.perf_counter()
        threads = [threading.Thread(target=send, args=(t,)) for t in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        producer.close()  # flushes: every batch is answered
        elapsed = time.perf_counter() - started
        with Admin(endpoint) as admin:
            stats = admin.broker_stats()
        sent = per_thread * args.threads
        summary = {"messages": sent, "errors": len(errors), "seconds": round(elapsed, 2),
                   "msgs_per_s": round(sent / elapsed), "stored_messages": stats.messages_put,
                   "commitlog_bytes": stats.commitlog_max_offset}
        print(f"sent {sent:,} messages from {args.threads} threads in {elapsed:.2f} s "
              f"({sent / elapsed:,.0f} msgs/s), {len(errors)} errors")
        print(f"the broker stored {stats.messages_put:,} messages in {stats.commitlog_max_offset:,} bytes of "
              f"commitlog (lz4 batches)")
        return summary


if __name__ == "__main__":
    main()
