"""Soak under hostile clients (issue 29, point 4): does the broker hold its memory budget while a
well-behaved client keeps its latency?

One broker process (a small budget, so that its ceiling is reached with little memory). A
well-behaved client on 127.0.0.1 makes calls one after another, a gRPC Send of 1 KB and a
remoting pull, alone first (its baseline), then while hostile clients, each from loopback
addresses of their own, push at once:

- stalled ReadRanges streams (4 addresses, through forwarders): they read nothing;
- remoting connections each sending 3 MiB of a 15 MiB frame, never the rest;
- idle remoting sockets (8 addresses) that send nothing;
- parked pulls on a topic that gets no message, woken by each of the good client's sends;
- a burst of connections past the connections allowed per address, refused.

Printed: the good client's p50 / p99 beside its baseline, the broker's RSS (peak while pushed,
and after the hostiles leave) beside its RSS at rest and the budget, what became of the
hostiles, and the broker's log lines. Bounded: under 2 minutes, loopback only.

    python bench/soak_bench.py [--push-s 30] [--budget 256m] [--old]

``--old`` runs a broker without the flags of the memory budget (code from before it), for the
figures before.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "limits"))

import grpc  # noqa: E402

from bench import report  # noqa: E402
from bench.process_memory import anon_rss_bytes, rss_bytes  # noqa: E402
from broker_sim.testing import broker_process  # noqa: E402
from forwarder import Forwarder  # noqa: E402
from peers.process import free_port  # noqa: E402
from rmq_wire.contract import broker_pb2 as pb  # noqa: E402
from rmq_wire.contract import broker_pb2_grpc as pb_grpc  # noqa: E402
from rmq_wire.remoting import (  # noqa: E402
    RemotingCommand,
    RemotingConnection,
    RequestCode,
    ResponseCode,
    decode,
    encode,
)

MiB = 1 << 20
STREAM_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 6)]
STREAMS_PER_ADDRESS = 15
FRAME_ADDRESS, FRAMES = "127.0.0.6", 64
PULL_ADDRESS, PULL_CONNECTIONS, PULLS_PER_CONNECTION = "127.0.0.7", 20, 400
IDLE_ADDRESSES, IDLE_SOCKETS = [f"127.0.0.{i}" for i in range(10, 18)], 2000
BURST_ADDRESS, BURST = "127.0.0.20", 1000  # past the 512 connections allowed per address
COLUMNS = ["figure", "baseline", "under hostile clients", "ratio / note"]


class Output:
    """Drains the broker's output (a full pipe would stop it) and counts its log lines."""

    def __init__(self, process):
        self.lines: list[str] = []
        threading.Thread(target=self._drain, args=(process.stdout,), daemon=True).start()

    def _drain(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def count(self, word: str) -> int:
        return sum(word in line for line in self.lines)


def grpc_channel(endpoint: str) -> grpc.Channel:
    return grpc.insecure_channel(endpoint, options=[("grpc.max_receive_message_length", 64 * MiB)])


def pull_frame(topic: str, opaque: int, suspend_ms: int = 0, offset: int = 0) -> bytes:
    fields = {"consumerGroup": "soak", "topic": topic, "queueId": 0, "queueOffset": offset, "maxMsgNums": 1,
              "sysFlag": 0x2 if suspend_ms else 0, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
              "subVersion": 0, "expressionType": "TAG"}
    return encode(RemotingCommand(RequestCode.PULL_MESSAGE, opaque, 0, {k: str(v) for k, v in fields.items()}))


def connect_from(source_ip: str, address: tuple, timeout_s: float = 5.0) -> socket.socket | None:
    try:
        return socket.create_connection(address, timeout=timeout_s, source_address=(source_ip, 0))
    except OSError:
        return None


class GoodClient:
    """Calls one after another, a gRPC Send and a remoting pull; their latencies per phase."""

    def __init__(self, endpoint: str, remoting: str):
        self.channel = grpc_channel(endpoint)
        self.messaging = pb_grpc.MessagingStub(self.channel)
        self.remoting = RemotingConnection(remoting)
        self.failures: list[str] = []

    def measure(self, seconds: float) -> dict:
        sends, pulls = [], []
        deadline = time.monotonic() + seconds
        fields = {"consumerGroup": "good", "topic": "calls", "queueId": 0, "queueOffset": 0, "maxMsgNums": 1,
                  "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0,
                  "expressionType": "TAG"}
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                self.messaging.Send(pb.SendRequest(topic="calls", single=pb.SingleMessage(body=b"x" * 1024)),
                                    timeout=10)
                sends.append(time.perf_counter() - started)
                started = time.perf_counter()
                self.remoting.invoke(RequestCode.PULL_MESSAGE, fields, timeout_s=10)
                pulls.append(time.perf_counter() - started)
            except Exception as err:  # a failure of the good client is a figure too
                self.failures.append(f"{type(err).__name__}: {err}"[:200])
            time.sleep(0.01)
        return {"send": percentiles(sends), "pull": percentiles(pulls)}

    def close(self) -> None:
        self.remoting.close()
        self.channel.close()


def percentiles(samples: list[float]) -> tuple[float, float, int]:
    if len(samples) < 2:
        return (float("nan"), float("nan"), len(samples))
    cuts = statistics.quantiles(samples, n=100)
    return (cuts[49] * 1000, cuts[98] * 1000, len(samples))


class Hostiles:
    """Every hostile client, started together; ``close`` ends them all."""

    def __init__(self, endpoint: str, remoting: tuple):
        self.endpoint, self.remoting = endpoint, remoting
        self.forwarders: list[Forwarder] = []
        self.channels: list[grpc.Channel] = []
        self.calls: list = []
        self.sockets: dict[str, list[socket.socket]] = {"frames": [], "idle": [], "pulls": [], "burst": []}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stalled_streams()
        self._thread(self._unfinished_frames)
        self._thread(self._parked_pulls)
        self._thread(self._idle_sockets)
        self._thread(self._burst)

    def _thread(self, target) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _stalled_streams(self) -> None:
        for address in STREAM_ADDRESSES:
            forwarder = Forwarder(self.endpoint, address)
            self.forwarders.append(forwarder)
            for _ in range(STREAMS_PER_ADDRESS):
                channel = grpc_channel(forwarder.endpoint)
                self.channels.append(channel)
                self.calls.append(pb_grpc.MessagingStub(channel).ReadRanges(pb.ReadRangesRequest(
                    ranges=[pb.ReadRange(topic="big", queue_id=0, start_offset=0)])))

    def _unfinished_frames(self) -> None:
        part = struct.pack(">I", 15 * MiB) + b"\0" * (3 * MiB - 4)
        for _ in range(FRAMES):
            sock = connect_from(FRAME_ADDRESS, self.remoting)
            if sock is None:
                continue
            self.sockets["frames"].append(sock)
            try:
                sock.sendall(part)
            except OSError:  # closed by the broker: past the budget
                pass

    def _parked_pulls(self) -> None:
        frames = b"".join(pull_frame("quiet", opaque, suspend_ms=60_000) for opaque in range(PULLS_PER_CONNECTION))
        for _ in range(PULL_CONNECTIONS):
            sock = connect_from(PULL_ADDRESS, self.remoting)
            if sock is None:
                continue
            self.sockets["pulls"].append(sock)
            sock.sendall(frames)
            threading.Thread(target=_read_and_pull_again, args=(sock,), daemon=True).start()

    def _idle_sockets(self) -> None:
        for n in range(IDLE_SOCKETS):
            sock = connect_from(IDLE_ADDRESSES[n % len(IDLE_ADDRESSES)], self.remoting)
            if sock is not None:
                self.sockets["idle"].append(sock)

    def _burst(self) -> None:
        for _ in range(BURST):
            sock = connect_from(BURST_ADDRESS, self.remoting)
            if sock is not None:
                self.sockets["burst"].append(sock)

    def closed_by_broker(self, kind: str) -> int:
        closed = 0
        for sock in self.sockets[kind]:
            sock.setblocking(False)
            try:
                closed += sock.recv(1 << 16, socket.MSG_PEEK) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def refused_streams(self) -> dict:
        ended = {}
        for call in self.calls:
            if call.done():
                code = call.code().name
                ended[code] = ended.get(code, 0) + 1
        return ended

    def close(self) -> None:
        for call in self.calls:
            call.cancel()
        for channel in self.channels:
            channel.close()
        for forwarder in self.forwarders:
            forwarder.close()
        for sockets in self.sockets.values():
            for sock in sockets:
                sock.close()


def _read_and_pull_again(sock: socket.socket) -> None:
    """A consumer holding pulls, as RocketMQ's push consumer: each answer (woken, nothing found)
    is followed by a new pull at once; after SYSTEM_BUSY it waits (3 s in RocketMQ: past the
    soak here)."""
    opaque = 1 << 20
    sock.settimeout(None)
    buffer = b""
    try:
        while data := sock.recv(1 << 16):
            buffer += data
            while len(buffer) >= 4 and len(buffer) >= 4 + (length := struct.unpack_from(">I", buffer)[0]):
                answer = decode(bytes(buffer[4:4 + length]))
                buffer = buffer[4 + length:]
                if answer.code != ResponseCode.SYSTEM_BUSY:
                    opaque += 1
                    sock.sendall(pull_frame("quiet", opaque, suspend_ms=60_000))
    except OSError:
        pass


def hostile_process(endpoint: str, remoting: tuple, started, stop, results) -> None:
    """The hostile clients, in a process of their own (their threads do not slow the good
    client's); what became of them is put in ``results`` once ``stop`` is set."""
    hostiles = Hostiles(endpoint, remoting)
    hostiles.start()
    started.set()
    stop.wait()
    for thread in hostiles.threads:
        thread.join(5)
    outcome = {kind: f"{hostiles.closed_by_broker(kind)} of {len(hostiles.sockets[kind])} closed by the broker"
               for kind in hostiles.sockets}
    results.put((len(hostiles.calls), hostiles.refused_streams(), outcome))
    hostiles.close()


def run(args) -> None:
    flags = ["--remoting-port", str(free_port()), "--log-level", "WARNING"]
    if not args.old:
        flags += ["--memory-budget-bytes", args.budget, "--memory-budget-per-client-bytes", args.share,
                  "--idle-connection-timeout-s", "10", "--unfinished-frame-timeout-s", "10",
                  "--max-parked-pulls", "5000"]
    budget = None if args.old else _bytes(args.budget)
    with tempfile.TemporaryDirectory() as home, broker_process(Path(home) / "data", *flags) as (endpoint, process):
        output = Output(process)
        remoting = ("127.0.0.1", int(flags[1]))
        with grpc_channel(endpoint) as channel:
            admin, messaging = pb_grpc.AdminStub(channel), pb_grpc.MessagingStub(channel)
            for name in ("big", "calls", "quiet"):
                admin.CreateTopic(pb.CreateTopicRequest(topic=pb.Topic(name=name, queue_count=1,
                                                                       queue_type=pb.SIMPLE_CQ)))
            body = b"b" * (512 << 10)
            for _ in range(64):  # 32 MiB for each stalled stream to read
                messaging.Send(pb.SendRequest(topic="big", single=pb.SingleMessage(body=body)), timeout=30)
        good = GoodClient(endpoint, f"127.0.0.1:{remoting[1]}")
        good.measure(1.0)  # warm
        rest_rss, rest_anon = rss_bytes(process.pid), anon_rss_bytes(process.pid)
        baseline = good.measure(args.baseline_s)
        context = multiprocessing.get_context("spawn")
        started_event, stop, results = context.Event(), context.Event(), context.Queue()
        hostiles = context.Process(target=hostile_process, args=(endpoint, remoting, started_event, stop, results))
        peak = [rest_rss, rest_anon]
        sampling = threading.Event()

        def sample():
            while not sampling.wait(0.2):
                peak[0] = max(peak[0], rss_bytes(process.pid))
                peak[1] = max(peak[1], anon_rss_bytes(process.pid))

        threading.Thread(target=sample, daemon=True).start()
        started = time.monotonic()
        hostiles.start()
        started_event.wait(60)
        pushed = good.measure(args.push_s)
        sampling.set()
        stop.set()
        stream_count, streams, outcome = results.get(timeout=60)
        hostiles.join(30)
        time.sleep(5)  # the broker lets go of what they held
        after_rss, after_anon = rss_bytes(process.pid), anon_rss_bytes(process.pid)
        elapsed = time.monotonic() - started
        good.close()
        rows = []
        for call in ("send", "pull"):
            (b50, b99, _), (p50, p99, pn) = baseline[call], pushed[call]
            rows.append({"figure": f"good client {call} p50 ms", "baseline": round(b50, 2),
                         "under hostile clients": round(p50, 2), "ratio / note": f"{p50 / b50:.2f}x"})
            rows.append({"figure": f"good client {call} p99 ms", "baseline": round(b99, 2),
                         "under hostile clients": round(p99, 2), "ratio / note": f"{p99 / b99:.2f}x ({pn} calls)"})
        budget_text = f"budget {budget // MiB} MiB" if budget else "no budget (before)"
        rows.append({"figure": "broker RSS MiB (peak while pushed)", "baseline": rest_rss // MiB,
                     "under hostile clients": peak[0] // MiB,
                     "ratio / note": f"+{(peak[0] - rest_rss) // MiB} MiB, {budget_text}"})
        rows.append({"figure": "broker heap (RssAnon) MiB (peak while pushed)", "baseline": rest_anon // MiB,
                     "under hostile clients": peak[1] // MiB,
                     "ratio / note": f"+{(peak[1] - rest_anon) // MiB} MiB, {budget_text}"})
        rows.append({"figure": "broker RSS MiB (5 s after they left)", "baseline": rest_rss // MiB,
                     "under hostile clients": after_rss // MiB,
                     "ratio / note": f"+{(after_rss - rest_rss) // MiB} MiB (heap +{(after_anon - rest_anon) // MiB})"})
        rows.append({"figure": "broker log lines (WARNING)", "baseline": 0,
                     "under hostile clients": output.count("WARNING"),
                     "ratio / note": f"{BURST} connections in a burst"})
        rows.append({"figure": "good client failures", "baseline": 0, "under hostile clients": len(good.failures),
                     "ratio / note": "; ".join(sorted(set(good.failures)))[:120]})
        notes = [f"{stream_count} stalled ReadRanges streams from {len(STREAM_ADDRESSES)} addresses: ended "
                 f"{streams or 'none'}",
                 *(f"{kind}: {text}" for kind, text in outcome.items()),
                 f"pushed for {elapsed:.0f} s; broker flags: {' '.join(flags[2:])}"]
        paths = report.write("soak-old" if args.old else "soak", rows, COLUMNS, notes)
        log = paths[0].with_suffix(".broker.log")
        log.write_text("".join(output.lines))
        print(f"the broker's output: {log}")


def _bytes(text: str) -> int:
    from broker_sim.cli import byte_size

    return byte_size(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline-s", type=float, default=8.0)
    p.add_argument("--push-s", type=float, default=40.0)
    p.add_argument("--budget", default="256m")
    p.add_argument("--share", default="64m", help="--memory-budget-per-client-bytes")
    p.add_argument("--old", action="store_true", help="a broker without the memory budget's flags (code before it)")
    run(p.parse_args())


if __name__ == "__main__":
    main()
