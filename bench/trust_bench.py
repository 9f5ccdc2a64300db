"""What trust costs (issue 22): the same broker process plain, with ACLs (every call signed and
checked), with TLS, and with both; through our gRPC door and through RocketMQ's remoting door.

Rows, in one run, each on a fresh broker (1 KB messages, 16 queues, BatchCQ):
- AutoBatch ``send_async`` from 2 threads until every message is stored: msgs/s;
- small calls (``Admin.describe_topic``) one after another: calls/s, the per-call cost that a
  signature check and TLS records add;
- RangeReader over everything sent: msgs/s.

    python bench/trust_bench.py [--messages 100000] [--calls 2000]

The certificates are made at run time (tests/support/tls_certs.py), the ACL file is one admin account.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from bench import report  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from peers.process import free_port  # noqa: E402
from rmq_spark import Admin, Credentials, Message, OffsetRange, Producer, RangeReader, TransportConfig  # noqa: E402
from tls_certs import make_certs  # noqa: E402

QUEUES = 16
BODY = b"x" * 1024
THREADS = 2
COLUMNS = ["door", "trust", "produce msgs/s", "small calls/s", "read msgs/s"]
ACCOUNT = Credentials("bench", "bench-secret")


def run_row(home: Path, door: str, acl: bool, tls: bool, certs, args) -> dict:
    flags = ["--remoting-port", str(free_port())]
    config = TransportConfig()
    if acl:
        acl_file = home / "plain_acl.yml"
        acl_file.write_text("accounts:\n  - {accessKey: bench, secretKey: bench-secret, admin: true}\n")
        flags += ["--acl-file", str(acl_file)]
        config = dataclasses.replace(config, credentials=ACCOUNT)
    if tls:
        flags += ["--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key)]
        config = dataclasses.replace(config, tls=True, tls_ca_file=str(certs.ca))
    data = Path(tempfile.mkdtemp(dir=home))
    with broker_process(data, *flags) as (endpoint, _process):
        address = {"endpoint": endpoint} if door == "gRPC" else {"name_server": f"127.0.0.1:{flags[1]}"}
        with Admin(**address, transport=config) as admin:
            admin.create_topic("bench", QUEUES, "BatchCQ")
            produce = _produce(address, config, args.messages)
            started = time.perf_counter()
            for _ in range(args.calls):
                admin.describe_topic("bench")
            calls = args.calls / (time.perf_counter() - started)
            queues = admin.describe_topic("bench")[1]
        read = _read(address, config, queues, args.messages)
    trust = " + ".join(name for name, on in (("ACL", acl), ("TLS", tls)) if on) or "plain"
    return {"door": door, "trust": trust, "produce msgs/s": produce, "small calls/s": calls, "read msgs/s": read}


def _produce(address: dict, config: TransportConfig, messages: int) -> float:
    per_thread = messages // THREADS
    with Producer(**address, transport=config) as producer:
        def work():
            futures = [producer.send_async(Message("bench", BODY)) for _ in range(per_thread)]
            for future in futures:
                future.result(60)

        threads = [threading.Thread(target=work) for _ in range(THREADS)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return per_thread * THREADS / (time.perf_counter() - started)


def _read(address: dict, config: TransportConfig, queues, expected: int) -> float:
    ranges = [OffsetRange("bench", q.queue_id, 0, q.max_offset, q.broker) for q in queues]
    with RangeReader(**address, transport=config) as reader:
        started = time.perf_counter()
        rows = sum(batch.num_rows for batch in reader.read(ranges))
        seconds = time.perf_counter() - started
    assert rows >= expected, f"read {rows} of {expected}"
    return rows / seconds


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--calls", type=int, default=2_000)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trust-bench-") as scratch:
        home = Path(scratch)
        certs = make_certs(home)
        for door in ("gRPC", "remoting"):
            for acl, tls in ((False, False), (True, False), (False, True), (True, True)):
                rows.append(run_row(home, door, acl, tls, certs, args))
                print(rows[-1], flush=True)
    report.write("trust_bench", rows, COLUMNS, [
        f"{args.messages:,} messages of 1 KB, {QUEUES} queues (BatchCQ), AutoBatch send_async from {THREADS} threads; "
        f"{args.calls:,} describe_topic calls one after another; a fresh broker process per row.",
        "ACL: every call signed by the client (HMAC-SHA1) and checked by the broker; TLS: both ports TLS only."])


if __name__ == "__main__":
    main()
