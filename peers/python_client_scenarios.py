"""Scenarios of RocketMQ's official Python client (PyPI rocketmq-python-client, unchanged), run
in its own virtual environment by python_client.run. Each prints one JSON line: what it sent
or received, and how long it took.

    python python_client_scenarios.py SCENARIO ENDPOINT TOPIC [options]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


def config(args) -> ClientConfiguration:
    """The client's configuration; with --access-key and --secret-key, its calls are signed."""
    return ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key), request_timeout=10)


def message(topic: str, body: bytes, args, index: int) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    if args.tag:
        m.tag = args.tag
    m.keys = f"key-{index}"
    m.add_property("index", str(index))
    if args.message_group:
        m.message_group = args.message_group
    if args.delay_s:  # in seconds: 5.1.2 sends the value as the Timestamp's seconds, whatever its docstring says
        m.delivery_timestamp = int(time.time()) + args.delay_s
    return m


def view(m) -> dict:
    return {"id": m.message_id, "body": m.body.decode().rstrip("."), "tag": m.tag, "keys": sorted(m.keys or []),
            "properties": dict(m.properties or {}), "attempt": m.delivery_attempt, "group": m.message_group,
            "type": m.message_type, "delivery_ms": m.delivery_timestamp}


def send(args) -> dict:
    producer = Producer(config(args), (args.topic,), tls_enable=args.tls)
    producer.startup()
    try:
        messages = [message(args.topic, f"{args.prefix}-{i}".encode().ljust(args.body_bytes, b"."), args, i)
                    for i in range(args.count)]
        started = time.monotonic()
        if args.asynchronous:  # at most --in-flight sends outstanding (all of them at once fail in 5.1.2)
            futures, receipts = collections.deque(), []
            for m in messages:
                if len(futures) >= args.in_flight:
                    receipts.append(futures.popleft().result(timeout=60))
                futures.append(producer.send_async(m))
            receipts += [f.result(timeout=60) for f in futures]
        else:
            receipts = [producer.send(m) for m in messages]
        seconds = time.monotonic() - started
        return {"ids": [r.message_id for r in receipts], "offsets": [r.offset for r in receipts], "seconds": seconds,
                "sent_at": time.time()}
    finally:
        producer.shutdown()


def receive(args) -> dict:
    consumer = SimpleConsumer(config(args), args.group, {args.topic: FilterExpression(args.filter)},
                              await_duration=5, tls_enable=args.tls)
    consumer.startup()
    # startup() returns before the proxy has the client's settings, and the real proxy fails a
    # receive of a client without settings (a NullPointerException): give the telemetry a moment
    time.sleep(1)
    got, acked, deadline = [], 0, time.monotonic() + args.timeout_s
    started = time.monotonic()
    try:
        while len(got) < args.count and time.monotonic() < deadline:
            for m in consumer.receive(min(32, args.count - len(got)), args.invisible_s):
                got.append(view(m) | {"received_at": time.time()})
                if args.change_invisible_s:  # a new handle: the ack below must use it
                    consumer.change_invisible_duration(m, args.change_invisible_s)
                if not args.no_ack:
                    consumer.ack(m)
                    acked += 1
        return {"messages": got, "acked": acked, "seconds": time.monotonic() - started}
    finally:
        consumer.shutdown()


class Resolutions(TransactionChecker):
    """Answers what the broker checks back as the application's own records would: the message
    sent as "rolled-back" is rolled back, the others committed."""

    def __init__(self):
        self.checked = []

    def check(self, m) -> TransactionResolution:
        self.checked.append(m.message_id)
        if m.body == b"rolled-back":
            return TransactionResolution.ROLLBACK
        return TransactionResolution.COMMIT


def transactions(args) -> dict:
    """One transaction committed, one rolled back, one left open: the broker's check commits it."""
    checker = Resolutions()
    producer = Producer(config(args), (args.topic,), checker, tls_enable=args.tls)
    producer.startup()
    try:
        ids = {}
        for name in ("committed", "rolled-back", "checked"):
            transaction = producer.begin_transaction()
            m = message(args.topic, name.encode(), args, 0)
            ids[name] = producer.send(m, transaction).message_id
            if name == "committed":
                transaction.commit()
            elif name == "rolled-back":
                transaction.rollback()
        deadline = time.monotonic() + args.timeout_s
        while ids["checked"] not in checker.checked and time.monotonic() < deadline:  # others may come first
            time.sleep(0.2)
        time.sleep(1)  # the commit the check answered reaches the broker
        return {"ids": ids, "checked": checker.checked}
    finally:
        producer.shutdown()


class Counting(MessageListener):
    def __init__(self, fail_first: bool):
        self.got, self.failed = [], set()
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def consume(self, m) -> ConsumeResult:
        with self.lock:
            if self.fail_first and m.message_id not in self.failed:
                self.failed.add(m.message_id)
                return ConsumeResult.FAILURE
            self.got.append(view(m))
        return ConsumeResult.SUCCESS


def push(args) -> dict:
    listener = Counting(args.fail_first)
    consumer = PushConsumer(config(args), args.group, listener, {args.topic: FilterExpression(args.filter)},
                            tls_enable=args.tls)
    consumer.startup()
    try:
        deadline = time.monotonic() + args.timeout_s
        while len(listener.got) < args.count and time.monotonic() < deadline:
            time.sleep(0.2)
        return {"messages": list(listener.got)}
    finally:
        consumer.shutdown()


SCENARIOS = {"send": send, "receive": receive, "transactions": transactions, "push": push}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("endpoint")
    p.add_argument("topic")
    p.add_argument("--group", default="v2-group")
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--prefix", default="m")
    p.add_argument("--body-bytes", type=int, default=0, help="pad bodies with dots to this size")
    p.add_argument("--tag", default="")
    p.add_argument("--filter", default="*")
    p.add_argument("--message-group", default="")
    p.add_argument("--delay-s", type=int, default=0)
    p.add_argument("--asynchronous", action="store_true")
    p.add_argument("--in-flight", type=int, default=256, help="asynchronous sends outstanding at most")
    p.add_argument("--invisible-s", type=int, default=15)
    p.add_argument("--change-invisible-s", type=int, default=0)
    p.add_argument("--no-ack", action="store_true")
    p.add_argument("--fail-first", action="store_true")
    p.add_argument("--timeout-s", type=float, default=30)
    p.add_argument("--access-key", default="")
    p.add_argument("--secret-key", default="")
    p.add_argument("--tls", action="store_true",
                   help="over TLS, trusting gRPC's roots: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names a CA file")
    args = p.parse_args()
    print(json.dumps(SCENARIOS[args.scenario](args)), flush=True)
    os._exit(0)  # the client's threads may keep the interpreter alive after shutdown()


if __name__ == "__main__":
    main()
