"""kill -9 of a broker process while consumers pop and ack: after a restart on the same data
directory, no message acked before the kill is delivered again, and none is lost (the ones
in flight come back after their invisible time)."""

import threading
import time

from broker_sim.testing import broker_process
from rmq_spark import Admin, Message, PopConsumer, Producer, RmqError

MESSAGES = 3000
CONSUMERS = 4
INVISIBLE_MS = 1_500


class Ledger:
    """What the consumers saw: bodies delivered, acks confirmed, acks whose answer was lost."""

    def __init__(self):
        self.lock = threading.Lock()
        self.delivered: set[bytes] = set()
        self.acked: set[bytes] = set()
        self.ack_unknown: set[bytes] = set()  # the broker stopped under the ack: done or not
        self.redelivered_after_ack: list[bytes] = []

    def consume(self, endpoint: str, stop: threading.Event, until: float) -> None:
        with PopConsumer(endpoint, "g", "t", invisible_ms=INVISIBLE_MS, max_messages=16, poll_ms=100) as consumer:
            while not stop.is_set() and time.monotonic() < until:
                try:
                    deliveries = consumer.receive()
                except RmqError:
                    time.sleep(0.05)
                    continue
                bodies = [m.body for d in deliveries for m in d.messages()]
                with self.lock:
                    self.redelivered_after_ack += [b for b in bodies if b in self.acked]
                    self.delivered.update(bodies)
                if not deliveries:
                    continue
                try:
                    consumer.ack(deliveries)
                except RmqError:
                    with self.lock:
                        self.ack_unknown.update(bodies)
                    continue
                with self.lock:
                    self.acked.update(bodies)

    def run(self, endpoint: str, stop: threading.Event, seconds: float) -> list[threading.Thread]:
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=self.consume, args=(endpoint, stop, until)) for _ in range(CONSUMERS)]
        for thread in threads:
            thread.start()
        return threads


def _wait(predicate, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_kill_9_with_concurrent_consumers_loses_nothing_and_redelivers_no_acked_message(tmp_path):
    data_dir = tmp_path / "data"
    everything = {b"%06d" % i for i in range(MESSAGES)}
    ledger = Ledger()
    with broker_process(data_dir) as (endpoint, process):
        with Admin(endpoint) as admin:
            admin.create_topic("t", 4, "SimpleCQ")
        with Producer(endpoint) as producer:
            for body in sorted(everything):
                producer.send_async(Message("t", body))
            producer.flush()
        stop = threading.Event()
        threads = ledger.run(endpoint, stop, 60)
        assert _wait(lambda: len(ledger.acked) >= MESSAGES // 3, 60), "the consumers made no progress"
        process.kill()  # kill -9, in the middle of pops and acks
        process.wait(30)
        stop.set()
        for thread in threads:
            thread.join(30)
    acked_before = set(ledger.acked)
    assert acked_before and len(acked_before) < MESSAGES

    with broker_process(data_dir) as (endpoint, process):
        stop = threading.Event()
        threads = ledger.run(endpoint, stop, 90)
        done = _wait(lambda: ledger.delivered >= everything and everything <= ledger.acked | ledger.ack_unknown,
                     90)
        # Whatever was in flight at the kill has come back by now; let it be seen, then stop.
        time.sleep(INVISIBLE_MS / 1000 * 2)
        stop.set()
        for thread in threads:
            thread.join(30)
        with Admin(endpoint) as admin:
            committed = {o.queue_id: o.offset for o in admin.group_offsets("g", ["t"])}
            # AutoBatch takes a queue per batch: a queue may have got none of the messages.
            ends = {q.queue_id: q.max_offset for q in admin.offsets(["t"])["t"] if q.max_offset}
    assert done, f"{len(everything - ledger.delivered)} messages never delivered after the restart"
    assert ledger.redelivered_after_ack == []  # no acked message came again as new work
    assert everything <= ledger.acked | ledger.ack_unknown  # none lost: each was acked in the end
    assert committed == ends  # every queue is consumed to its end
