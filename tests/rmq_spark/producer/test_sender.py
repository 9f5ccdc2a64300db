"""The producer's Sender alone, without a broker: a fake transport records each SendMany call
and answers it when the test says so. What goes in a call (single, early or inner batch, one
stamp per batch), how answers reach the batches, retries, and the bound on calls in flight."""

import pytest

from rmq_spark import BrokerUnavailableError, Message, TopicNotFoundError, TransportConfig
from rmq_spark.client.transport import EarlyBatch, InnerBatch, Send, Stored
from rmq_spark.errors import error_for
from rmq_spark.producer.accumulator import RecordAccumulator
from rmq_spark.producer.batch import BatchKey, ProducerBatch
from rmq_spark.producer.config import ProducerConfig
from rmq_spark.producer.sender import Sender
from rmq_spark.structs import QueueType, TopicInfo
from rmq_wire.codec import Codec, Compression


class FakeCall:
    """A SendMany call: answered later with ``answer(outcomes)``."""

    def __init__(self, sends: list[Send], timeout_ms: int, on_answer):
        self.sends = sends
        self.timeout_ms = timeout_ms
        self._on_answer = on_answer

    def answer(self, outcomes):
        self._on_answer(outcomes, None)


class FakeTransport:
    """What the sender uses of the transport: SendMany without waiting, and the retries' backoff."""

    native_rocketmq = False
    unique_keys = None

    def __init__(self):
        self.config = TransportConfig()
        self.calls: list[FakeCall] = []

    def send_many(self, sends, timeout_ms, answer):
        self.calls.append(FakeCall(sends, timeout_ms, answer))

    def backoff_s(self, attempt: int) -> float:
        return 0.0


class Routes:
    """Topic routes as the Router caches them; ``forgotten`` lists the dropped ones."""

    def __init__(self):
        self.forgotten = []

    def topic(self, name: str) -> TopicInfo:
        queue_type = QueueType.BATCH_CQ if name.startswith("batch") else QueueType.SIMPLE_CQ
        return TopicInfo(name, 4, queue_type)

    def forget(self, topic: str) -> None:
        self.forgotten.append(topic)


def stored(send: Send, base_offset=0) -> Stored:
    count = 1 if isinstance(send.content, Message) else send.content.count
    return Stored(send.queue_id, base_offset, count, [f"id{i}" for i in range(count)], 0)


def refused(reason: str):
    return error_for("", f"refused: {reason}", reason)


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
def routes():
    return Routes()


def sender_with(transport, routes, now_ms=lambda: 0.0, **config) -> Sender:
    settings = ProducerConfig(**config)
    return Sender(transport, routes, RecordAccumulator(settings, lambda: 0.0), settings, Codec.RMQ,
                  Compression.NONE, now_ms=now_ms)


def batch_of(topic: str, count: int, queue_id=0, alone=False) -> ProducerBatch:
    return ProducerBatch.of(BatchKey(topic, queue_id, None), [Message(topic, b"m%d" % i) for i in range(count)],
                            alone=alone)


def test_one_call_carries_each_batch_in_the_form_its_topic_takes(transport, routes):
    sender = sender_with(transport, routes)
    batches = [batch_of("batch-t", 3), batch_of("simple-t", 2), batch_of("simple-t", 1, alone=True)]
    sender.send(batches)
    [call] = transport.calls
    assert [type(send.content) for send in call.sends] == [InnerBatch, EarlyBatch, Message]
    assert [send.producer_id for send in call.sends] == [sender.producer_id] * 3
    assert len({send.sequence for send in call.sends}) == 3  # a stamp per batch
    assert not any(batch.finished for batch in batches)  # sent without waiting
    call.answer([stored(send, base_offset=10) for send in call.sends])
    assert [r.queue_offset for r in batches[0].results()] == [10, 11, 12]
    assert batches[2].results()[0].message_id == "id0"


def test_a_failed_batch_fails_alone_and_a_missing_topic_is_forgotten(transport, routes):
    sender = sender_with(transport, routes)
    batches = [batch_of("batch-gone", 1), batch_of("batch-t", 1)]
    sender.send(batches)
    [call] = transport.calls
    call.answer([refused("TOPIC_NOT_FOUND"), stored(call.sends[1])])
    with pytest.raises(TopicNotFoundError, match="refused: TOPIC_NOT_FOUND"):
        batches[0].results()
    assert len(batches[1].results()) == 1
    assert routes.forgotten == ["batch-gone"]


def test_a_retriable_refusal_is_sent_again_with_the_same_stamp_until_the_delivery_timeout(routes):
    """Each attempt has request_timeout_ms (the last what is left of delivery_timeout_ms); a
    retriable failure is sent again until delivery_timeout_ms from the first attempt, then the
    batch fails with a sentence naming both and still retriable (Kafka's split of the two)."""
    transport, now = FakeTransport(), [0.0]
    sender = sender_with(transport, routes, now_ms=lambda: now[0], request_timeout_ms=1000, delivery_timeout_ms=2500)
    batch = batch_of("batch-t", 2)
    sender.send([batch])
    attempts = [transport.calls[0]]
    for when in (900, 2000):
        now[0] = when
        attempts[-1].answer([refused("SERVICE_NOT_AVAILABLE")])
        for _ in range(500):  # the retry goes from a timer thread, after a zero backoff
            if len(transport.calls) == len(attempts) + 1:
                break
            batch.wait(0.01)
        attempts.append(transport.calls[-1])
    assert [a.timeout_ms for a in attempts] == [1000, 1000, 500]  # the last gets what is left
    assert len({a.sends[0].sequence for a in attempts}) == 1  # the same stamp: stored once by the broker
    now[0] = 2500
    attempts[-1].answer([refused("SERVICE_NOT_AVAILABLE")])
    with pytest.raises(BrokerUnavailableError, match="refused: SERVICE_NOT_AVAILABLE") as failed:
        batch.results()
    assert "failed after 3 attempt(s) in delivery_timeout_ms=2500" in str(failed.value)
    assert "raise request_timeout_ms and delivery_timeout_ms" in str(failed.value) and failed.value.retriable


def test_ready_batches_wait_while_max_in_flight_requests_calls_are_unanswered(transport, routes):
    sender = sender_with(transport, routes, batch_max_bytes=2, max_in_flight_requests=1, request_max_bytes=2)
    accumulator = sender.accumulator
    for queue_id in range(3):  # each pair of 1-byte bodies fills a batch
        for _ in range(2):
            accumulator.append(Message("batch-t", b"m"), ("", queue_id), 1.0)
    assert sender.send_ready() == 1 and len(transport.calls) == 1
    assert sender.send_ready() == 0  # the one slot is taken
    transport.calls[0].answer([stored(transport.calls[0].sends[0])])
    assert accumulator.held_bytes == 4  # the answered batch's bytes are free
    assert sender.send_ready() == 1 and len(transport.calls) == 2
