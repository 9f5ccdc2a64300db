"""The remoting door beside our gRPC door, on one broker in its own process (2 cores in all).

Small requests: offsets by timestamp of one queue, a request each, on ONE connection with
``--in-flight`` requests outstanding (and one at a time): RocketMQ's remoting protocol
(SEARCH_OFFSET_BY_TIMESTAMP) beside our gRPC door (OffsetForTimestamp, one HTTP/2 channel).

Pulls: a BatchCQ topic of 1 KB messages stored in batches of 32 and of 256; every queue read
whole, the stored bytes received per second: remoting PULL_MESSAGE (a pull in flight per queue,
maxMsgNums 1024, the broker's 256 KiB a pull) beside ReadRanges (our gRPC door, one stream).

Sends: Apache's C++ client (PyPI rocketmq) through the remoting door, sync sends one at a time
and batches of 32, beside our SDK through our gRPC door (blocking sends, AutoBatch off; send_batch).

Targets: the remoting door serves >= 20,000 small requests a second on one connection, and
pulls hand out stored bytes at least as fast as ReadRanges.

    python bench/remoting_bench.py [--requests 100000] [--in-flight 256] [--messages 200000] [--queues 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from peers.process import free_port  # noqa: E402
from rmq_spark import Admin, Message, OffsetRange, Producer  # noqa: E402
from rmq_spark.client.connect import connect  # noqa: E402
from rmq_wire.remoting import (  # noqa: E402
    FrameReader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode,
    encode,
)

BODY_BYTES = 1024


def remoting_requests(address: str, topic: str, count: int, in_flight: int) -> float:
    """Requests a second on one connection, ``in_flight`` outstanding (frames made beforehand:
    the client's own cost is not the door's)."""
    frames = [encode(RemotingCommand(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, i, 0,
                                     {"topic": topic, "queueId": str(i % 4), "timestamp": "0"}))
              for i in range(count)]
    host, port = address.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, sent, answered = FrameReader(), 0, 0
        started = time.perf_counter()
        while answered < count:
            room = min(in_flight - (sent - answered), count - sent)
            if room > 0:
                sock.sendall(b"".join(frames[sent:sent + room]))
                sent += room
            for frame in reader.feed(sock.recv(1 << 20)):
                answered += 1
                if answered == count and decode(frame).code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"the door refused: {decode(frame).remark}")
        return count / (time.perf_counter() - started)


def grpc_requests(endpoint: str, topic: str, count: int, in_flight: int) -> float:
    from rmq_wire.contract import broker_pb2, broker_pb2_grpc

    transport = connect(endpoint)
    try:
        stub = broker_pb2_grpc.AdminStub(transport.channel)
        requests = [broker_pb2.OffsetForTimestampRequest(topic=topic, queue_ids=[i % 4], timestamp_ms=0)
                    for i in range(count)]
        started = time.perf_counter()
        pending = []
        for request in requests:
            pending.append(stub.OffsetForTimestamp.future(request))
            if len(pending) >= in_flight:
                pending.pop(0).result()
        for future in pending:
            future.result()
        return count / (time.perf_counter() - started)
    finally:
        transport.close()


def cpp_sends(namesrv: str, topic: str, count: int, batch: int) -> float | None:
    """Messages a second from Apache's C++ client (PyPI rocketmq), sync sends one at a time
    (``batch`` 1) or send_batch of ``batch``; None when the client is not installed."""
    try:
        from rocketmq.client import Message as CppMessage
        from rocketmq.client import Producer as CppProducer
    except ImportError:
        return None
    body = os.urandom(BODY_BYTES).hex()[:BODY_BYTES]
    producer = CppProducer(f"bench-cpp-{batch}")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        def message():
            one = CppMessage(topic)
            one.set_body(body)
            return one
        started = time.perf_counter()
        for _ in range(count // batch):
            if batch == 1:
                producer.send_sync(message())
            else:
                producer.send_batch([message() for _ in range(batch)])
        return count // batch * batch / (time.perf_counter() - started)
    finally:
        producer.shutdown()


def sdk_sends(endpoint: str, topic: str, count: int, batch: int) -> float:
    """Our SDK through our gRPC door: blocking single sends (AutoBatch off), or send_batch."""
    body = os.urandom(BODY_BYTES)
    with Producer(endpoint, auto_batch=False) as producer:
        started = time.perf_counter()
        for i in range(count // batch):
            if batch == 1:
                producer.send(Message(topic, body, queue_id=i % 4))
            else:
                producer.send_batch([Message(topic, body, queue_id=i % 4) for _ in range(batch)])
        return count // batch * batch / (time.perf_counter() - started)


def fill(endpoint: str, topic: str, batch: int, queues: int, messages: int) -> None:
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues, "BatchCQ")
    body = os.urandom(BODY_BYTES)
    with Producer(endpoint, codec="rmq", compression="none") as producer:
        for i in range(messages // batch):
            producer.send_batch([Message(topic, body, queue_id=i % queues) for _ in range(batch)])
    deadline = time.monotonic() + 120
    with Admin(endpoint) as admin:
        while sum(q.max_offset for q in admin.offsets([topic])[topic]) < messages // batch * batch:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} was not indexed in 120 s")
            time.sleep(0.05)


def remoting_pull_all(address: str, topic: str, queues: int) -> tuple[int, float]:
    """Every queue pulled whole, one pull in flight per queue: (bytes received, seconds)."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, received, open_queues = FrameReader(), 0, set(range(queues))
        started = time.perf_counter()
        sock.sendall(b"".join(_pull(topic, q, 0) for q in range(queues)))
        while open_queues:
            out = []
            for frame in reader.feed(sock.recv(4 << 20)):
                answer = decode(frame)
                queue = answer.opaque
                if answer.code == ResponseCode.SUCCESS:
                    received += len(answer.body)
                    out.append(_pull(topic, queue, int(answer.ext_fields["nextBeginOffset"])))
                else:
                    open_queues.discard(queue)
            if out:
                sock.sendall(b"".join(out))
        return received, time.perf_counter() - started


def _pull(topic: str, queue: int, offset: int) -> bytes:
    return encode(RemotingCommand(RequestCode.PULL_MESSAGE, queue, 0, {
        "consumerGroup": "bench", "topic": topic, "queueId": str(queue), "queueOffset": str(offset),
        "maxMsgNums": "1024", "sysFlag": "4", "subscription": "*", "expressionType": "TAG", "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subVersion": "0"}))


def read_ranges_all(endpoint: str, topic: str, queues: int) -> tuple[int, float]:
    transport = connect(endpoint)
    try:
        started = time.perf_counter()
        received = sum(len(chunk.records) for chunk in transport.read_ranges(
            [OffsetRange(topic, q, 0, None) for q in range(queues)], 1 << 40, ""))
        return received, time.perf_counter() - started
    finally:
        transport.close()


NO_PEER = "no peer (make peers)"


@contextlib.contextmanager
def real_rocketmq(wanted: bool):
    """The real RocketMQ (name server and broker) when wanted and fetched, else None."""
    if not wanted:
        yield None
        return
    try:
        import peers
        from peers.rocketmq import RocketMQCluster

        peers.jars("rocketmq")
    except Exception as missing:  # PeersMissing, or no peers package
        print(f"no real RocketMQ rows: {missing}", flush=True)
        yield None
        return
    with RocketMQCluster() as cluster:
        yield cluster


def peer_broker(peer) -> str:
    return f"127.0.0.1:{peer.broker_port}"


def peer_pulls(peer, topic: str, args) -> float:
    """MB/s of the real broker's stored records, every queue pulled whole as ours are."""
    from peers.rocketmq import java_produce

    peer.create_topic(topic, args.queues, batch_cq=True)
    sent = java_produce(peer.namesrv_addr, topic, args.messages, threads=2)
    if sent["failed"]:
        raise RuntimeError(f"filling the real broker failed: {sent['error']}")
    time.sleep(2)  # its dispatch
    return max(b / s for b, s in (remoting_pull_all(peer_broker(peer), topic, args.queues)
                                  for _ in range(args.repeat))) / 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per pull topic")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--sends", type=int, default=5000, help="single sends per row (batched rows: 8x)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each row; the best is reported")
    parser.add_argument("--no-peer", dest="peer", action="store_false",
                        help="skip the real RocketMQ rows (they need `make peers`)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rmq-remoting-bench-") as data_dir, real_rocketmq(args.peer) as peer:
        port = free_port()
        with broker_process(Path(data_dir), "--remoting-port", str(port)) as (endpoint, _process):
            address = f"127.0.0.1:{port}"
            with Admin(endpoint) as admin:
                admin.create_topic("small", 4, "SimpleCQ")
                admin.create_topic("sends", 4, "SimpleCQ")
            if peer is not None:
                peer.create_topic("small", 4, batch_cq=False)
                peer.create_topic("sends", 4, batch_cq=False)
            for in_flight in (args.in_flight, 1):
                count = args.requests if in_flight > 1 else args.requests // 10
                remoting = max(remoting_requests(address, "small", count, in_flight) for _ in range(args.repeat))
                grpc = max(grpc_requests(endpoint, "small", count, in_flight) for _ in range(args.repeat))
                real = max(remoting_requests(peer_broker(peer), "small", count, in_flight)
                           for _ in range(args.repeat)) if peer else NO_PEER
                rows.append({"row": f"small requests, {in_flight} in flight", "remoting": remoting, "gRPC door": grpc,
                             "real RocketMQ": real, "unit": "requests/s", "remoting / gRPC": remoting / grpc})
            for batch in (1, 32):
                count = args.sends if batch == 1 else args.sends * 8
                cpp = cpp_sends(address, "sends", count, batch)
                sdk = max(sdk_sends(endpoint, "sends", count, batch) for _ in range(args.repeat))
                real = cpp_sends(peer.namesrv_addr, "sends", count, batch) if peer else NO_PEER
                kind = "sync sends, one at a time" if batch == 1 else f"batches of {batch}"
                rows.append({"row": f"1 KB messages, {kind} (C++ client beside our SDK)",
                             "remoting": cpp if cpp is not None else "C++ client not installed", "gRPC door": sdk,
                             "real RocketMQ": real, "unit": "msgs/s",
                             "remoting / gRPC": cpp / sdk if cpp is not None else ""})
            for batch in (32, 256):
                topic = f"pull{batch}"
                print(f"filling {topic}: {args.messages:,} messages in batches of {batch} ...", flush=True)
                fill(endpoint, topic, batch, args.queues, args.messages)
                pulled = max((b / s for b, s in (remoting_pull_all(address, topic, args.queues)
                                                 for _ in range(args.repeat))))
                ranged = max((b / s for b, s in (read_ranges_all(endpoint, topic, args.queues)
                                                 for _ in range(args.repeat))))
                real = peer_pulls(peer, topic, args) if peer and batch == 32 else (
                    NO_PEER if not peer else "n/a: its autoBatch producer makes ~32 KiB batches")
                rows.append({"row": f"BatchCQ batches of {batch} x 1 KB, all queues", "remoting": pulled / 1e6,
                             "gRPC door": ranged / 1e6, "real RocketMQ": real, "unit": "MB/s of stored records",
                             "remoting / gRPC": pulled / ranged})
    small = rows[0]["remoting"]
    notes = [f"remoting small requests on one connection: {small:,.0f}/s, "
             f"{'meets' if small >= 20_000 else 'MISSES'} the 20,000/s target",
             *(f"{r['row']}: remoting pulls at {r['remoting / gRPC']:.2f}x ReadRanges' bytes/s, "
               f"{'meets' if r['remoting / gRPC'] >= 1 else 'MISSES'} the target (>= 1x)"
               for r in rows if r["row"].startswith("BatchCQ"))]
    notes.append("real RocketMQ: the same requests to its broker; its C++ batches are stored as ONE message each "
                 "(it reads the client's batch=1 as false); its pulls are of its Java producer's autoBatch batches")
    report.write("remoting", rows, ["row", "remoting", "gRPC door", "real RocketMQ", "unit", "remoting / gRPC"],
                 notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
