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


def test_kill_and_restart_while_sending(tmp_path):
    data = tmp_path / "data"
    broker, endpoint = start_broker(data)
    try:
        with Admin(endpoint) as admin:
            admin.create_topic("restart", 4, "BatchCQ")
        producers, per_producer = 4, 1500
        sent = Counter()
        futures = {}
        patient = TransportConfig(retries=10, retry_backoff_ms=50, retry_backoff_max_ms=1000)
        producer = Producer(endpoint, transport=patient, send_timeout_ms=2000)

        def send(thread):
            for i in range(per_producer):
                body = b"%d-%d" % (thread, i) + b"." * 500
                futures[body] = producer.send_async(Message("restart", body))
                sent[thread] += 1

        threads = [threading.Thread(target=send, args=(t,)) for t in range(producers)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(sent.values()) < producers * per_producer // 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        broker.send_signal(signal.SIGKILL)
        broker.wait(10)
        sent_before_kill = sum(sent.values())
        broker, _ = start_broker(data, int(endpoint.rsplit(":", 1)[1]))
        for t in threads:
            t.join(120)
        producer.close()

        acked = {}
        for body, future in futures.items():
            if future.exception(0) is None:
                result = future.result(0)
                acked[body] = (result.queue_id, result.queue_offset)
        failed = len(futures) - len(acked)
        print(f"sent before the kill: {sent_before_kill}, acknowledged: {len(acked)}, failed: {failed}")
        assert sent_before_kill < producers * per_producer, "the broker was killed while producers were sending"
        assert len(acked) > producers * per_producer // 2, "most sends succeed after the restart"
        with Admin(endpoint) as admin:
            ends = {q.queue_id: q.max_offset for q in admin.offsets(["restart"])["restart"]}
        with RangeReader(endpoint) as reader:
            table = reader.read_table([OffsetRange("restart", q, 0, end) for q, end in ends.items() if end])
        stored = list(zip(table.column("body").to_pylist(), table.column("queue_id").to_pylist(),
                          table.column("queue_offset").to_pylist()))
        copies = Counter(body for body, _q, _o in stored)
        assert [body for body, n in copies.items() if n > 1] == [], "a message was stored twice"
        where = {body: (q, o) for body, q, o in stored}
        lost = [body for body in acked if body not in where]
        assert lost == [], f"{len(lost)} acknowledged messages are missing"
        assert all(where[body] == position for body, position in acked.items())
    finally:
        broker.kill()
        broker.wait(10)
