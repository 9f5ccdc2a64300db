"""AutoBatch against a real broker; batch ages are driven by a stepped clock, not by sleeping."""

import threading
import time

import grpc
import pytest

from rmq_spark import (
    Admin,
    BrokerUnavailableError,
    BufferFullError,
    ClosedError,
    ConfigError,
    Message,
    OffsetRange,
    Producer,
    RangeReader,
    TopicNotFoundError,
    TransportConfig,
)
from rmq_spark.client.grpc_transport import join_sends
from rmq_spark.structs import InnerBatchIds
from rmq_wire.contract.broker_pb2 import InnerBatch, SendManyRequest, SendRequest
from support.sdk import wait_indexed
from support.waits import wait_until


@pytest.fixture
def topic(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 2, "BatchCQ")
    return topic_name


def stepped(endpoint, clock, **options):
    return Producer(endpoint, now_ms=clock, background=False, **options)


def record_id(result):
    return result.message_id.rsplit("-", 1)[0]  # messages of one inner batch share their record's id


def test_a_full_batch_is_sent_by_the_appending_thread(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_bytes=4000)
    futures = [producer.send_async(Message(topic, b"x" * 1000, queue_id=0)) for _ in range(4)]
    # The fourth passed 4000 bytes: sent in place by this thread (no timer runs here).
    results = [f.result(10) for f in futures]
    assert [r.queue_offset for r in results] == [0, 1, 2, 3]
    assert len({record_id(r) for r in results}) == 1  # one stored record
    producer.close()


def test_a_batch_goes_when_it_is_old_enough(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_delay_ms=10)
    future = producer.send_async(Message(topic, b"x", queue_id=1))
    clock.now += 9
    assert producer.timer.tick() == 0 and not future.done()
    clock.now += 1
    assert producer.timer.tick() == 1 and future.result().queue_offset == 0
    producer.close()


def test_messages_without_keys_fill_a_batch_on_one_queue_then_take_the_next(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_bytes=4000)
    futures = [producer.send_async(Message(topic, b"x" * 1000)) for _ in range(10)]
    producer.flush()  # the last two went by the flush, in a third batch on the first queue again
    results = [f.result(10) for f in futures]
    first = results[0].queue_id  # a producer's turns start at a random queue
    assert [r.queue_id for r in results] == [first] * 4 + [1 - first] * 4 + [first] * 2
    assert [len({record_id(r) for r in results[i:i + 4]}) for i in (0, 4, 8)] == [1, 1, 1]
    producer.close()


def test_batches_are_per_queue_and_tag(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    sent = [producer.send_async(Message(topic, b"x", queue_id=q, tags=t)) for q in (0, 1) for t in ("A", "B")
            for _ in range(3)]
    clock.now += 10
    assert producer.timer.tick() == 4
    results = [f.result() for f in sent]
    assert len({(r.queue_id, record_id(r)) for r in results}) == 4
    producer.close()


def test_callbacks_of_a_batch_run_in_order(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    seen = []
    for i in range(20):
        producer.send_async(Message(topic, b"%d" % i, queue_id=0), callback=lambda r, e: seen.append((r, e)))
    producer.flush()
    assert [r.queue_offset for r, e in seen] == list(range(20)) and all(e is None for r, e in seen)
    producer.close()


def test_a_failed_batch_fails_every_message_and_releases_its_bytes(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    producer.send_batch([Message(topic, b"r")])  # caches the route
    with Admin(endpoint) as admin:
        admin.delete_topic(topic)  # the producer's cached route is stale now
    futures = [producer.send_async(Message(topic, b"x" * 100, queue_id=0)) for _ in range(5)]
    errors = []
    futures[0].add_done_callback(lambda f: errors.append(f.exception()))
    producer.flush()
    assert all(isinstance(f.exception(), TopicNotFoundError) for f in futures)
    assert len({id(f.exception()) for f in futures}) == 1 and errors == [futures[0].exception()]
    assert producer._accumulator.held_bytes == 0
    producer.close()


def test_memory_bound_waits_then_fails_clearly(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_bytes=2000, total_batch_max_bytes=3000, send_timeout_ms=200)
    producer.send_async(Message(topic, b"x" * 1500, queue_id=0, tags="A"))
    producer.send_async(Message(topic, b"x" * 1500, queue_id=0, tags="B"))  # held: 3000
    with pytest.raises(BufferFullError, match="total_batch_max_bytes=3,000"):
        producer.send_async(Message(topic, b"x" * 10, queue_id=0, tags="C"))
    producer.flush()  # room again
    assert producer._accumulator.held_bytes == 0
    assert producer.send_async(Message(topic, b"x" * 10, queue_id=0, tags="C")) is not None
    producer.close()


def test_unbatchable_messages_go_alone(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    future = producer.send_async(Message(topic, b"later", queue_id=0, properties={"DELAY": "3"}))
    assert future.result(10).queue_offset == 0  # sent at once, not held for a batch (no timer runs here)
    producer.close()


def test_a_message_the_transport_cannot_encode_fails_its_own_future(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    refused = producer.send_async(Message(topic, b"x", queue_id=0, properties={"DELAY": 3}))  # not a string
    assert isinstance(refused.exception(10), TypeError)
    assert producer.send_async(Message(topic, b"next", queue_id=0, properties={"DELAY": "3"})).result(10)
    producer.close()


def test_close_flushes_then_refuses(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    futures = [producer.send_async(Message(topic, b"x", queue_id=1)) for _ in range(3)]
    producer.close()
    assert [f.result().queue_offset for f in futures] == [0, 1, 2]
    with pytest.raises(ClosedError):
        producer.send(Message(topic, b"x"))


def test_bad_options_are_named(endpoint):
    with pytest.raises(ConfigError, match="batch_max_bytes=0"):
        Producer(endpoint, batch_max_bytes=0)
    with pytest.raises(ConfigError, match="unknown producer option.*linger_ms"):
        Producer(endpoint, linger_ms=5)


def test_blocking_sends_from_many_threads(endpoint, topic):
    with Producer(endpoint) as producer:  # the real background timer
        results, errors = [], []

        def worker(thread):
            for i in range(100):
                try:
                    results.append(producer.send(Message(topic, b"%d-%d" % (thread, i), keys=f"k{thread}")))
                except Exception as error:  # noqa: BLE001
                    errors.append(error)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == [] and len(results) == 1600
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 1600
    for queue_id in (0, 1):
        offsets = sorted(r.queue_offset for r in results if r.queue_id == queue_id)
        assert offsets == list(range(len(offsets)))


def test_a_blocking_send_does_not_wait_out_the_delay_when_nothing_is_in_flight(endpoint, clock, topic):
    producer = stepped(endpoint, clock)  # no timer, and a clock that never moves
    assert producer.send(Message(topic, b"alone", queue_id=0)).queue_offset == 0
    producer.close()


def test_blocked_senders_share_a_call_per_round_trip_not_per_delay(endpoint, topic):
    # A delay no test outlasts: every send below completes only if the batches that fill while
    # a call is out go when it is answered.
    with Producer(endpoint, batch_max_delay_ms=600_000) as producer:
        results = []

        def worker(thread):
            results.extend(producer.send(Message(topic, b"%d-%d" % (thread, i))) for i in range(25))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 200 and len({(r.queue_id, r.queue_offset) for r in results}) == 200


class CallSpy:
    """Wraps the gRPC transport's SendMany call (made on the transport's caller threads):
    counts calls, and can lose the first answers (the broker stores the batches, the client
    hears UNAVAILABLE), as a dropped connection would."""

    def __init__(self, producer, lose_answers=0):
        self.real = producer._transport._send_many
        self.calls = []
        self.lose_answers = lose_answers
        self._called = threading.Condition()
        producer._transport._send_many = self

    def __call__(self, request, **call):  # timeout, metadata
        response = self.real(request, **call)
        with self._called:
            self.calls.append(len(SendManyRequest.FromString(request).sends))
            self._called.notify_all()
            lose = self.lose_answers > 0
            self.lose_answers -= lose
        if lose:
            raise LostAnswer()
        return response

    def wait_calls(self, count: int) -> list:
        """The calls once ``count`` were made (the caller threads make them)."""
        with self._called:
            assert self._called.wait_for(lambda: len(self.calls) >= count, 10), f"{self.calls}: fewer than {count}"
            return list(self.calls)


class LostAnswer(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection reset (the answer was lost)"

    def trailing_metadata(self):
        return ()


def test_ready_batches_go_together_in_one_call(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    spy = CallSpy(producer)
    futures = [producer.send_async(Message(topic, b"x", queue_id=q, tags=t)) for q in (0, 1) for t in "ABC"]
    clock.now += 10
    assert producer.timer.tick() == 6
    stored = {(f.result(10).queue_id, f.result().queue_offset) for f in futures}
    assert spy.calls == [6]
    assert stored == {(q, o) for q in (0, 1) for o in range(3)}
    producer.close()


def test_a_call_carries_at_most_request_max_bytes(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_bytes=1000, request_max_bytes=2500)
    spy = CallSpy(producer)
    for t in "ABCDE":
        producer.send_async(Message(topic, b"x" * 900, queue_id=0, tags=t))
    producer.flush()
    # Each 900-byte batch is full on arrival, so the sender may take some before the rest are
    # queued: how the five are grouped is the threads' timing; that no call carries three is not.
    assert sum(spy.calls) == 5 and max(spy.calls) <= 2, spy.calls
    producer.close()


def test_a_lost_answer_is_retried_and_stored_once(endpoint, clock, topic):
    producer = stepped(endpoint, clock, transport=TransportConfig(retry_backoff_ms=1))
    spy = CallSpy(producer, lose_answers=2)
    futures = [producer.send_async(Message(topic, b"m%d" % i, queue_id=1)) for i in range(10)]
    producer.flush()
    assert spy.calls == [1, 1, 1]  # the batch went three times
    assert [f.result().queue_offset for f in futures] == list(range(10))
    wait_indexed(endpoint, topic, 10)
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, 1, 0, 100)])
    assert table.column("body").to_pylist() == [b"m%d" % i for i in range(10)]  # stored once
    producer.close()


def test_retries_end_at_the_delivery_timeout_with_the_last_error(endpoint, clock, topic):
    """Every answer lost: the batch is sent again (stored once: the broker answers a repeat with
    its first answer) until delivery_timeout_ms has passed on the producer's clock."""
    producer = stepped(endpoint, clock, request_timeout_ms=30_000, delivery_timeout_ms=30_000,
                       transport=TransportConfig(retry_backoff_ms=1, retry_backoff_max_ms=1))
    spy = CallSpy(producer, lose_answers=10**9)
    future = producer.send_async(Message(topic, b"x", queue_id=0))
    clock.now += producer.config.batch_max_delay_ms
    producer.timer.tick()
    spy.wait_calls(3)
    clock.now += 30_000
    assert isinstance(future.exception(10), BrokerUnavailableError) and "answer was lost" in str(future.exception())
    assert "in delivery_timeout_ms=30000" in str(future.exception())
    assert producer._accumulator.held_bytes == 0
    with Admin(endpoint) as admin:
        assert admin.offsets([topic])[topic][0].max_offset == 1  # every attempt, stored once
    producer.close()


def test_a_retry_whose_delivery_time_ran_out_while_it_waited_fails_with_the_error_it_waited_on(endpoint, clock,
                                                                                                  topic):
    """The delivery time runs out during a retry's backoff: the batch fails with the error the retry
    was for (the lost answer), after one attempt, not with an attempt left no time (a timeout)."""
    producer = stepped(endpoint, clock, request_timeout_ms=30_000, delivery_timeout_ms=30_000,
                       transport=TransportConfig(retry_backoff_ms=300, retry_backoff_max_ms=300))
    CallSpy(producer, lose_answers=10**9)
    future = producer.send_async(Message(topic, b"x", queue_id=0))
    clock.now += producer.config.batch_max_delay_ms
    producer.timer.tick()
    wait_until(lambda: future._batch.maybe_stored, "the lost answer, and its retry decided")
    clock.now += 30_000  # before the retry's 300 ms backoff ends
    assert isinstance(future.exception(10), BrokerUnavailableError) and "answer was lost" in str(future.exception())
    assert "after 1 attempt(s)" in str(future.exception())
    producer.close()


def test_a_failing_batch_does_not_fail_the_others_of_its_call(endpoint, clock, topic):
    with Admin(endpoint) as admin:
        admin.create_topic(topic + "-gone", 1, "BatchCQ")
    producer = stepped(endpoint, clock)
    producer.send_batch([Message(topic + "-gone", b"r")])  # caches the route
    with Admin(endpoint) as admin:
        admin.delete_topic(topic + "-gone")
    spy = CallSpy(producer)
    gone = producer.send_async(Message(topic + "-gone", b"x", queue_id=0))
    kept = producer.send_async(Message(topic, b"x", queue_id=0))
    producer.flush()
    assert spy.calls == [2]
    assert isinstance(gone.exception(), TopicNotFoundError) and kept.result().queue_offset == 0
    producer.close()


def test_sends_joined_by_hand_are_the_request_protobuf_would_make():
    sends = [SendRequest(topic="t", queue_id=q, producer_id="p", sequence=q,
                         inner_batch=InnerBatch(payload=b"x" * size, count=1))
             for q, size in enumerate((0, 1, 127, 128, 300, 70_000))]
    joined = join_sends([send.SerializeToString() for send in sends])
    assert joined == SendManyRequest(sends=sends).SerializeToString()
    assert list(SendManyRequest.FromString(joined).sends) == sends


class HeldCalls(CallSpy):
    """A spy whose calls are answered only when the test says so."""

    def __init__(self, producer):
        super().__init__(producer)
        self._answer = threading.Semaphore(0)

    def __call__(self, request, **call):
        response = super().__call__(request, **call)
        assert self._answer.acquire(timeout=10), "the test did not answer the call"
        return response

    def answer(self, calls: int):
        for _ in range(calls):
            self._answer.release()


def test_batches_ready_while_max_in_flight_calls_are_out_go_together_later(endpoint, clock, topic):
    producer = stepped(endpoint, clock, batch_max_bytes=100, max_in_flight_requests=1)
    spy = HeldCalls(producer)
    futures = [producer.send_async(Message(topic, b"x" * 100, queue_id=0, tags=t)) for t in "ABCD"]
    assert spy.wait_calls(1) == [1]  # the first filled batch went; the other three wait for the call's answer
    assert not futures[0].done() and producer.timer.tick() == 0
    spy.answer(1)
    futures[0].result(10)
    deadline = time.monotonic() + 10  # the call's slot is freed right after its batches are answered
    while not producer._sender.idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert producer.timer.tick() == 3 and spy.wait_calls(2) == [1, 3]
    spy.answer(1)
    assert [f.result(10).queue_offset for f in futures] == [0, 1, 2, 3]
    producer.close()


def test_a_body_that_is_not_bytes_is_refused_at_once(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    with pytest.raises(ConfigError, match="body is str: give bytes"):
        producer.send_async(Message(topic, "text"))
    producer.close()


def test_inner_batch_ids_made_one_or_many_at_a_time_agree():
    ids = InnerBatchIds("AB12", 4)
    assert ids.at(range(4)) == ids[:] == [ids[i] for i in range(4)] == ["AB12-0", "AB12-1", "AB12-2", "AB12-3"]
    assert ids[-1] == "AB12-3" and ids[1:3] == ["AB12-1", "AB12-2"] and ids == ids.at([0, 1, 2, 3])
    with pytest.raises(IndexError, match="message 4 of an inner batch of 4"):
        ids[4]


def test_callbacks_get_the_results_futures_give(endpoint, clock, topic):
    producer = stepped(endpoint, clock)
    called = []
    futures = [producer.send_async(Message(topic, b"m%d" % i, queue_id=0), callback=lambda r, e: called.append(r))
               for i in range(5)]
    producer.flush()
    assert called == [f.result(10) for f in futures]
    assert [r.queue_offset for r in called] == list(range(5))
    assert all(r.message_id.endswith(f"-{i}") for i, r in enumerate(called)) and len({*called}) == 5
    producer.close()


def test_a_send_on_a_closed_transport_fails_at_once(endpoint, clock, topic):
    """A batch sent after its transport closed is failed with ClosedError, never left unanswered."""
    producer = stepped(endpoint, clock)
    producer.send_batch([Message(topic, b"w", queue_id=0)])  # the topic's route is known
    producer._transport.close()
    with pytest.raises(ClosedError, match="is closed"):
        producer.send_batch([Message(topic, b"x", queue_id=0)])
    with pytest.raises(ClosedError, match="create a new"):
        producer._transport.describe_topic(topic)  # any call, not only sends
    future = producer.send_async(Message(topic, b"y", queue_id=0))
    with pytest.raises(ClosedError):
        producer.timer.tick(flush_all=True)
    assert isinstance(future.exception(10), ClosedError)
