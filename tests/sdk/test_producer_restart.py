"""AutoBatch against a broker process that is killed (SIGKILL) and restarted while producers
send: no message whose send returned is lost, and no message is stored twice."""

import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader, TransportConfig

LISTENING = re.compile(r"listening on (127\.0\.0\.1):(\d+)")


def start_broker(data_dir, port=0):
    process = subprocess.Popen([sys.executable, "-m", "broker_sim.server.cli", "--data-dir", str(data_dir),
                                "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line, "the broker exited before listening"
        match = LISTENING.search(line)
        if match:
            # Keep reading its output, so that a full pipe never blocks the broker.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, f"{match.group(1)}:{match.group(2)}"
    process.kill()
    raise AssertionError("the broker did not listen within 60 s")


def wait_until(condition, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_kill_and_restart_while_sending(tmp_path):
    data = tmp_path / "data"
    broker, endpoint = start_broker(data)
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("restart", 4, "BatchCQ")
        futures, acked, stop = {}, Counter(), threading.Event()
        patient = TransportConfig(retries=10, retry_backoff_ms=50, retry_backoff_max_ms=1000)
        producer = Producer(endpoint, transport=patient, send_timeout_ms=2000)

        def send(thread):
            for i in range(100_000):  # bounded; stopped long before
                if stop.is_set():
                    return
                body = b"%d-%d" % (thread, i) + b"." * 500
                futures[body] = producer.send_async(
                    Message("restart", body), callback=lambda r, e: e is None and acked.update(ok=1))
                if i % 50 == 49:
                    time.sleep(0.002)  # pace the senders, so that sending spans the kill and the restart

        threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: acked["ok"] >= 2000)
        broker.send_signal(signal.SIGKILL)
        broker.wait(10)
        sent_at_kill = len(futures)
        broker, _ = start_broker(data, int(endpoint.rsplit(":", 1)[1]))
        wait_until(lambda: acked["ok"] >= sent_at_kill + 2000)  # sends before and after the kill are answered
        stop.set()
        for t in threads:
            t.join(60)
        producer.close()

        acknowledged = {body: (f.result(0).queue_id, f.result(0).queue_offset)
                        for body, f in futures.items() if f.exception(0) is None}
        print(f"sent at the kill: {sent_at_kill}, sent: {len(futures)}, acknowledged: {len(acknowledged)}")
        assert len(futures) > sent_at_kill + 2000, "producers kept sending across the restart"
        with Admin(endpoint) as admin:
            ends = {q.queue_id: q.max_offset for q in admin.offsets(["restart"])["restart"]}
        with RangeReader(endpoint) as reader:
            table = reader.read_table([OffsetRange("restart", q, 0, end) for q, end in ends.items() if end])
        stored = list(zip(table.column("body").to_pylist(), table.column("queue_id").to_pylist(),
                          table.column("queue_offset").to_pylist()))
        copies = Counter(body for body, _q, _o in stored)
        assert [body for body, n in copies.items() if n > 1] == [], "a message was stored twice"
        where = {body: (q, o) for body, q, o in stored}
        lost = [body for body in acknowledged if body not in where]
        assert lost == [], f"{len(lost)} acknowledged messages are missing"
        assert all(where[body] == position for body, position in acknowledged.items())
    finally:
        broker.kill()
        broker.wait(10)
