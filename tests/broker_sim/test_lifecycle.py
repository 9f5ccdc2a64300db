"""Starting and stopping: broker_sim.embedded, Broker, and the `rmq-broker-sim` CLI as a process
(SIGTERM and SIGINT stop it cleanly, a restart serves what was written, bad flags, a data
directory in use and a port in use give clear errors)."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

import broker_sim
from broker_sim.broker import BindError, Broker
from broker_sim.store import DataDirInUseError, StoreConfig
from broker_sim.store.paths import StorePaths
from rmq_wire.contract import broker_pb2 as pb
from support.grpc_client import Client, filler_batch

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LISTENING = re.compile(r"^rmq-broker-sim listening on (127\.0\.0\.1:(\d+)), data in (.+)$")


def write_sample(client: Client) -> dict:
    """A BatchCQ and a SimpleCQ topic with some messages, and a group's offsets."""
    client.create("b", 2, pb.BATCH_CQ)
    client.create("s", 1)
    for i in range(5):
        client.send_inner("b", i % 2, [(b"b%d-%d" % (i, j), {}, 0) for j in range(10)], tags="T")
        client.send_single("s", 0, b"s%d" % i)
    client.admin.CommitOffsets(pb.CommitOffsetsRequest(group="g", offsets=[pb.GroupOffset(topic="s", offset=3)]))
    client.wait_readable("b", 0, 30)
    client.wait_readable("b", 1, 20)
    client.wait_readable("s", 0, 5)
    return read_sample(client)


def read_sample(client: Client) -> dict:
    reads = client.read([("b", 0, 0, 0), ("b", 1, 0, 0), ("s", 0, 0, 0)])
    groups = client.admin.QueryOffsets(pb.QueryOffsetsRequest(group="g"))
    return {
        "records": [[(r.queue_offset, bytes(r.body)) for r in read.records] for read in reads],
        "offsets": client.offsets("b") | {("s", 0): client.offsets("s")[0]},
        "groups": [(o.topic, o.queue_id, o.offset) for o in groups.offsets],
    }


# --- in-process ---------------------------------------------------------------------------------

def test_embedded_restart_between_write_and_read(tmp_path):
    data = tmp_path / "data"
    with broker_sim.embedded(data, segment_bytes=1 << 20) as endpoint:
        assert re.match(r"^127\.0\.0\.1:\d+$", endpoint)
        client = Client(endpoint)
        written = write_sample(client)
        client.close()
    assert not StorePaths(data).abort.exists()
    with broker_sim.embedded(data, segment_bytes=1 << 20) as endpoint:
        client = Client(endpoint)
        assert read_sample(client) == written
        assert written["groups"] == [("s", 0, 3)] and len(written["records"][2]) == 5
        client.close()


def test_embedded_without_a_data_dir_uses_a_temporary_one(tmp_path):
    with broker_sim.embedded() as endpoint:
        client = Client(endpoint)
        data_dir = Path(client.stats().data_dir)
        assert data_dir.is_dir() and StorePaths(data_dir).abort.exists()
        client.close()
    assert not data_dir.exists()


def test_broker_refuses_a_data_dir_in_use_and_frees_its_port(tmp_path):
    first = Broker(tmp_path / "data")
    first.start()
    try:
        second = Broker(tmp_path / "data")
        with pytest.raises(DataDirInUseError, match="in use by another broker"):
            second.start()
        with pytest.raises(BindError, match="cannot listen"):
            Broker(tmp_path / "other", port=first.port).start()
        with pytest.raises(RuntimeError, match="starts once"):
            first.start()
    finally:
        first.stop()
    first.stop()  # twice is harmless
    assert not StorePaths(tmp_path / "data").abort.exists()


def test_stop_during_a_read_stream_is_bounded_and_clean(tmp_path):
    broker = Broker(tmp_path / "data", store_config=StoreConfig(segment_bytes=16 << 20))
    broker.start()
    client = Client(broker.endpoint)
    client.create("big", 1, pb.BATCH_CQ)
    for i in range(12):
        batch = pb.InnerBatch(payload=filler_batch(i, 1 << 20, 4), count=4, codec=pb.CODEC_RMQ)
        client.send("big", 0, inner_batch=batch)
    client.wait_readable("big", 0, 48)
    stream = client.messaging.ReadRanges(pb.ReadRangesRequest(ranges=[pb.ReadRange(topic="big")]), timeout=30)
    first = next(stream)  # the first chunk; the rest waits for us
    started = time.monotonic()
    broker.stop(grace=0.2)
    assert time.monotonic() - started < 15
    try:
        records = first.record_count + sum(chunk.record_count for chunk in stream)
    except grpc.RpcError:
        pass  # cut when the grace ended, with the rest still unsent: the usual end
    else:  # gRPC's buffers took the rest within the grace (seen on a loaded machine): served whole
        assert records == 12, f"a stream the stop did not cut ended with {records} of 12 records"
    client.close()
    assert not StorePaths(tmp_path / "data").abort.exists()
    again = Broker(tmp_path / "data")
    again.start()
    assert again.core.store.recovery.clean
    again.stop()


def test_an_unexpected_fault_is_internal_with_a_reason(broker, client, monkeypatch):
    client.create("s", 1)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(broker.core.store, "get_messages", broken)
    with pytest.raises(grpc.RpcError) as caught:
        client.read([("s", 0, 0, 0)])
    err = caught.value
    assert err.code() == grpc.StatusCode.INTERNAL and dict(err.trailing_metadata())["rmq-reason"] == "INTERNAL"
    assert "RuntimeError: disk on fire" in err.details() and "broker bug" in err.details()
    assert client.create("t", 1).created  # and it serves on


# --- the CLI as a process -----------------------------------------------------------------------

def cli_command() -> list[str]:
    script = Path(sys.executable).parent / "rmq-broker-sim"
    found = str(script) if script.exists() else shutil.which("rmq-broker-sim")
    assert found, "rmq-broker-sim is not installed: run `.venv/bin/pip install -e .`"
    return [found]


class BrokerProcess:
    def __init__(self, tmp_path: Path, data_dir: Path, *args: str, name: str = "broker", own_group: bool = False):
        self.stderr_path = tmp_path / f"{name}-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(
            cli_command() + ["--port", "0", "--data-dir", str(data_dir), "--segment-bytes", "1m", *args],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True, start_new_session=own_group)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_listening(self) -> str:
        """The endpoint of the CLI's listening line (the lines of other ports it serves come first)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no listening line within {START_TIMEOUT_S} s: {self.stderr()}") from None
            assert line is not None, f"the broker exited: {self.stderr()}"
            if match := LISTENING.match(line.rstrip("\n")):
                return match.group(1)
            assert line.startswith("rmq-broker-sim "), line

    def stop(self, signum=signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return self.wait()

    def wait(self) -> int:
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        finally:
            self._stderr.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
        self._stderr.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_restart_between_write_and_read(tmp_path, processes, signum):
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path, data)
    processes.append(first)
    endpoint = first.wait_listening()
    assert StorePaths(data).abort.exists()
    client = Client(endpoint)
    written = write_sample(client)
    client.close()
    assert first.stop(signum) == 0, first.stderr()
    assert not StorePaths(data).abort.exists(), "a clean stop leaves no abort marker"
    assert "Traceback" not in first.stderr()

    second = BrokerProcess(tmp_path, data)
    processes.append(second)
    client = Client(second.wait_listening())
    assert read_sample(client) == written
    assert client.stats().data_dir == str(data.resolve())
    client.close()
    assert second.stop(signal.SIGINT if signum == signal.SIGTERM else signal.SIGTERM) == 0
    assert not StorePaths(data).abort.exists()


def test_cli_concurrent_dispatch_then_serial_after_a_restart(tmp_path, processes):
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path, data, "--dispatch", "concurrent")
    processes.append(first)
    client = Client(first.wait_listening())
    written = write_sample(client)
    client.close()
    assert first.stop() == 0, first.stderr()
    assert "Traceback" not in first.stderr()
    second = BrokerProcess(tmp_path, data, "--dispatch", "serial")
    processes.append(second)
    client = Client(second.wait_listening())
    assert read_sample(client) == written
    client.close()
    assert second.stop() == 0


def test_cli_ctrl_c_to_the_process_group_stops_concurrent_dispatch_cleanly(tmp_path, processes):
    """Ctrl-C in a terminal reaches the dispatch workers too: they leave it to the broker."""
    data = tmp_path / "data"
    broker = BrokerProcess(tmp_path, data, "--dispatch", "concurrent", own_group=True)
    processes.append(broker)
    client = Client(broker.wait_listening())
    written = write_sample(client)
    client.close()
    os.killpg(broker.process.pid, signal.SIGINT)
    assert broker.wait() == 0, broker.stderr()
    assert "Traceback" not in broker.stderr() and not StorePaths(data).abort.exists()
    again = BrokerProcess(tmp_path, data)
    processes.append(again)
    client = Client(again.wait_listening())
    assert read_sample(client) == written
    client.close()
    assert again.stop() == 0


def test_cli_data_dir_in_use(tmp_path, processes):
    data = tmp_path / "data"
    first = BrokerProcess(tmp_path, data)
    processes.append(first)
    first.wait_listening()
    second = BrokerProcess(tmp_path, data, name="second")
    processes.append(second)
    assert second.wait() == 2
    lines = second.stderr().strip().splitlines()
    assert len(lines) == 1 and "in use by another broker" in lines[0] and lines[0].startswith("rmq-broker-sim: error:")
    assert first.process.poll() is None  # the first one serves on
    assert first.stop() == 0


def test_cli_port_in_use(tmp_path, processes):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = BrokerProcess(tmp_path, tmp_path / "data", "--port", str(port))
        processes.append(process)
        assert process.wait() == 2
        lines = process.stderr().strip().splitlines()
        assert len(lines) == 1 and "cannot listen on 127.0.0.1:%d" % port in lines[0]
    assert not StorePaths(tmp_path / "data").abort.exists()


@pytest.mark.parametrize("args, expected", [
    (["--flush", "maybe"], "invalid choice: 'maybe'"),
    (["--dispatch", "parallel"], "invalid choice: 'parallel'"),
    (["--port", "70000"], "'70000' is not a port"),
    (["--port", "x"], "'x' is not a port"),
    (["--segment-bytes", "12"], "segment_bytes=12: use at least 4096"),
    (["--segment-bytes", "lots"], "'lots' is not a size"),
    (["--log-level", "loud"], "invalid choice: 'LOUD'"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_cli_bad_flags(tmp_path, args, expected):
    result = subprocess.run(cli_command() + ["--data-dir", str(tmp_path / "data"), *args], capture_output=True,
                            text=True, timeout=STOP_TIMEOUT_S)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("rmq-broker-sim: error: ") and expected in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, "one line, not the usage"
    assert not (tmp_path / "data").exists()


def test_cli_flags_reach_the_store(tmp_path, processes):
    process = BrokerProcess(tmp_path, tmp_path / "data", "--flush", "sync", "--log-level", "debug")
    processes.append(process)
    client = Client(process.wait_listening())
    stats = client.stats()
    assert stats.flush_mode == "sync"
    client.create("s", 1)
    client.send_single("s", 0, bytes(600_000))
    client.send_single("s", 0, bytes(600_000))  # with 1 MiB segments, the second goes to the next
    client.close()
    assert process.stop() == 0
    assert sorted(p.name for p in StorePaths(tmp_path / "data").commitlog.iterdir()) == [
        "00000000000000000000", "00000000000001048576"]


def test_cli_runs_as_a_module(tmp_path):
    """`python -m broker_sim.cli` is the same program."""
    result = subprocess.run([sys.executable, "-m", "broker_sim.cli", "--help"], capture_output=True,
                            text=True, timeout=STOP_TIMEOUT_S, env=os.environ)
    assert result.returncode == 0 and "--data-dir" in result.stdout
