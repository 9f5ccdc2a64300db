"""RocketMQ's official Python client (rocketmq-python-client, gRPC v2) beside our SDK, on one
broker_sim in its own process (2 cores in all): the official client is what a Python user would
otherwise pick, so it is the baseline.

Rows, each with ``--messages`` messages of ``--body-bytes`` to a SimpleCQ topic of 8 queues
(AutoBatch: a BatchCQ topic):
- sends: the official Producer's ``send`` (one at a time) and ``send_async`` (256 in flight:
  with thousands outstanding 5.1.2's sends fail, CANCELLED);
  our Producer's blocking single sends (AutoBatch off) and AutoBatch (``send_async``, batches
  of 32 KiB).
- receives: the official SimpleConsumer (``receive`` 32 at a time, an ack per message, as its
  API does) beside our PopConsumer (32 per pop, one ack call per pop) of the same messages.

With ``--rocketmq`` the official client's rows run against the real RocketMQ proxy too.

    python bench/v2_bench.py [--messages 20000] [--body-bytes 1024] [--rocketmq]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from peers import python_client  # noqa: E402
from rmq_spark import Admin, Message, PopConsumer, Producer  # noqa: E402

QUEUES = 8


def official_sends(endpoint: str, topic: str, messages: int, body_bytes: int, asynchronous: bool) -> float:
    options = ["--count", str(messages), "--body-bytes", str(body_bytes)] + (["--asynchronous"] if asynchronous else [])
    done = python_client.run("send", endpoint, topic, *options, timeout_s=3600)
    assert len(done["ids"]) == messages
    return messages / done["seconds"]


def official_receives(endpoint: str, topic: str, group: str, messages: int) -> float:
    done = python_client.run("receive", endpoint, topic, "--group", group, "--count", str(messages), "--timeout-s",
                             "1800", timeout_s=3600)
    assert len(done["messages"]) == messages, len(done["messages"])
    return messages / done["seconds"]


def sdk_sends(endpoint: str, topic: str, messages: int, body_bytes: int, auto_batch: bool) -> float:
    body = b"x" * body_bytes
    with Producer(endpoint, auto_batch=auto_batch) as producer:
        started = time.monotonic()
        if auto_batch:
            for _ in range(messages):
                producer.send_async(Message(topic, body))
            producer.flush()
        else:
            for _ in range(messages):
                producer.send(Message(topic, body))
        return messages / (time.monotonic() - started)


def sdk_pops(endpoint: str, topic: str, messages: int) -> float:
    got = 0
    with PopConsumer(endpoint, f"bench-{uuid.uuid4().hex[:6]}", topic, max_messages=32, poll_ms=1000) as consumer:
        started = time.monotonic()
        give_up = started + 1800
        while got < messages and time.monotonic() < give_up:
            deliveries = consumer.receive()
            got += sum(len(d.messages()) for d in deliveries)
            if deliveries:
                consumer.ack(deliveries)
        return got / (time.monotonic() - started)


def run_official(rows: list, where: str, endpoint: str, create, create_group, messages: int, body_bytes: int) -> None:
    sync_topic, async_topic = f"v2sync{uuid.uuid4().hex[:6]}", f"v2async{uuid.uuid4().hex[:6]}"
    create(sync_topic, False)
    create(async_topic, False)
    print(f"official client against {where} ...", flush=True)
    rows.append({"client": "official Python client", "against": where, "what": "send (one at a time)",
                 "msgs/s": official_sends(endpoint, sync_topic, min(messages, 5000), body_bytes, False)})
    rows.append({"client": "official Python client", "against": where, "what": "send_async (256 in flight)",
                 "msgs/s": official_sends(endpoint, async_topic, messages, body_bytes, True)})
    rows.append({"client": "official Python client", "against": where, "what": "SimpleConsumer receive + ack",
                 "msgs/s": official_receives(endpoint, async_topic, create_group(), messages)})


def new_group() -> str:
    return f"bench-{uuid.uuid4().hex[:6]}"


def _created(create, name: str) -> str:
    create(name)
    return name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--rocketmq", action="store_true", help="the official client against the real proxy too")
    args = parser.parse_args(argv)
    python_client.interpreter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rmq-v2-bench-") as data_dir:
        with broker_process(Path(data_dir)) as (endpoint, _process):
            def create(topic: str, batch_cq: bool) -> None:
                with Admin(endpoint) as admin:
                    admin.create_topic(topic, QUEUES, "BatchCQ" if batch_cq else "SimpleCQ")

            run_official(rows, "broker_sim", endpoint, create, new_group, args.messages, args.body_bytes)
            single, auto, popped = "sdksingle", "sdkauto", "sdkpop"
            create(single, False)
            create(auto, True)
            print("our SDK ...", flush=True)
            rows.append({"client": "our SDK", "against": "broker_sim", "what": "blocking single sends",
                         "msgs/s": sdk_sends(endpoint, single, min(args.messages, 5000), args.body_bytes, False)})
            rows.append({"client": "our SDK", "against": "broker_sim", "what": "AutoBatch send_async",
                         "msgs/s": sdk_sends(endpoint, auto, args.messages * 10, args.body_bytes, True)})
            create(popped, False)
            python_client.run("send", endpoint, popped, "--count", str(args.messages), "--body-bytes",
                              str(args.body_bytes), "--asynchronous", timeout_s=3600)
            rows.append({"client": "our SDK", "against": "broker_sim", "what": "PopConsumer pop + ack (32 a pop)",
                         "msgs/s": sdk_pops(endpoint, popped, args.messages)})
    if args.rocketmq:
        from peers.rocketmq import RocketMQCluster

        with RocketMQCluster() as cluster:
            run_official(rows, "RocketMQ 5.5.0 proxy", cluster.proxy_endpoint,
                         lambda topic, batch_cq: cluster.create_topic(topic, QUEUES, batch_cq, "NORMAL"),
                         lambda: _created(cluster.create_group, new_group()), args.messages, args.body_bytes)
    baseline = {r["what"].split(" ")[0]: r["msgs/s"] for r in rows
                if r["client"] == "official Python client" and r["against"] == "broker_sim"}
    for row in rows:
        kind = "SimpleConsumer" if "receive" in row["what"] or "pop" in row["what"].lower() else "send_async"
        row["vs official send_async / receive"] = row["msgs/s"] / baseline[kind]
    notes = [f"{args.body_bytes} B bodies; {args.messages:,} messages a row (single sends: at most 5,000; AutoBatch: "
             f"{args.messages * 10:,}); the official client's rate is timed inside its process, after it started"]
    report.write("v2", rows, ["client", "against", "what", "msgs/s", "vs official send_async / receive"], notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
