"""AutoBatch against a broker process that is killed (SIGKILL) and restarted while producers
send: no message whose send returned is lost, and no message is stored twice."""

import signal
import threading
import time
from collections import Counter

from broker_sim.testing import broker_process
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader, TransportConfig
from rmq_spark.errors import BufferFullError
from support.waits import wait_until


def test_kill_and_restart_while_sending(tmp_path):
    data = tmp_path / "data"
    futures, acked, stop = {}, Counter(), threading.Event()
    with broker_process(data) as (endpoint, broker):
        with Admin(endpoint) as admin:
            admin.create_topic("restart", 4, "BatchCQ")
        patient = TransportConfig(retries=10, retry_backoff_ms=50, retry_backoff_max_ms=1000)
        producer = Producer(endpoint, transport=patient, send_timeout_ms=2000)

        def send(thread):
            for i in range(100_000):  # bounded; stopped long before
                if stop.is_set():
                    return
                body = b"%d-%d" % (thread, i) + b"." * 500
                try:
                    futures[body] = producer.send_async(
                        Message("restart", body), callback=lambda r, e: e is None and acked.update(ok=1))
                except BufferFullError:  # the broker is down and the buffer full: back off, as a sender would
                    time.sleep(0.05)
                if i % 50 == 49:
                    time.sleep(0.002)  # pace the senders, so that sending spans the kill and the restart

        threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: acked["ok"] >= 2000, "2,000 sends answered", 60, poll_s=0.01)
        broker.send_signal(signal.SIGKILL)
        broker.wait(10)
        sent_at_kill = len(futures)
    with broker_process(data, "--port", endpoint.rsplit(":", 1)[1]):  # again, on the same port
        # sends before and after the kill are answered
        wait_until(lambda: acked["ok"] >= sent_at_kill + 2000, "2,000 more answered", 60, poll_s=0.01)
        stop.set()
        for t in threads:
            t.join(60)
        producer.close()
        print(f"sent at the kill: {sent_at_kill}, sent: {len(futures)}")
        assert len(futures) > sent_at_kill + 2000, "producers kept sending across the restart"
        check_stored_once(endpoint, futures)


def check_stored_once(endpoint, futures):
    """Every acknowledged message is stored where its result says, and nothing twice."""
    acknowledged = {body: (f.result(0).queue_id, f.result(0).queue_offset)
                    for body, f in futures.items() if f.exception(0) is None}
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
