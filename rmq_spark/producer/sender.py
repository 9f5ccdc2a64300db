"""The sender: encodes batches (an inner batch on a BatchCQ topic, an early batch on a SimpleCQ
topic, a single message when alone), sends many in one call of the transport without waiting
for it, retries what failed retriably until its delivery timeout, and answers every batch; and
the batch timer.

Two deadlines, as Kafka's producer has them: each attempt has ``request_timeout_ms`` (its upload
included: a call of 4 MiB over a slow link is not failed for its size), and a batch is retried
until ``delivery_timeout_ms`` from its first attempt. A batch that runs out fails with a sentence
naming both and saying that it may have been stored."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from itertools import count
from typing import Callable

from rmq_spark.client.transport import EarlyBatch, InnerBatch, Send, Transport
from rmq_spark.errors import RequestTimeoutError, RmqError, TopicNotFoundError
from rmq_spark.producer.accumulator import RecordAccumulator
from rmq_spark.producer.batch import BatchForm, ProducerBatch, batch_form
from rmq_spark.producer.config import ProducerConfig
from rmq_spark.producer.routing import Router
from rmq_wire.codec import Codec, Compression, compress, encode_messages, rmq

log = logging.getLogger(__name__)


class Sender:
    """Sends batches; every send is stamped with the producer's id and a sequence, so a retry
    after a lost answer is stored once (the broker answers it with the first answer)."""

    def __init__(self, transport: Transport, router: Router, accumulator: RecordAccumulator,
                 config: ProducerConfig, codec: Codec, compression: Compression,
                 now_ms: Callable[[], float] = lambda: time.monotonic() * 1000):
        self.transport = transport
        self.now_ms = now_ms
        self.accumulator = accumulator
        self.router = router
        self.config = config
        self.codec = codec
        self.compression = compression
        self.producer_id = uuid.uuid4().hex
        self._sequences = count()
        self._in_flight = 0  # SendMany calls of ready batches not yet answered
        self._lock = threading.Lock()
        self.on_idle: Callable[[], None] | None = None  # called when the last call out is answered
        self.transaction_id = ""  # set: every send is prepared under this transaction
        self.prepared_batches = 0
        self.prepared_messages = 0
        # RocketMQ's own sends: each message gets its id (UNIQ_KEY) from the producer.
        self.unique_keys = transport.unique_keys

    def send_ready(self) -> int:
        """Send the accumulator's ready batches, many per call, while fewer than
        ``max_in_flight_requests`` calls are unanswered; returns how many batches went. Batches
        that become ready while that many are out go together in a later call."""
        sent = 0
        while True:
            with self._lock:
                if self._in_flight >= self.config.max_in_flight_requests:
                    return sent
                batches = self.accumulator.drain(self.config.request_max_bytes)
                if not batches:
                    return sent
                self._in_flight += 1
            self.send(batches, self.accumulator.release, on_answered=self._call_answered)
            sent += len(batches)

    def _call_answered(self) -> None:
        # Only the slot is freed here, on the transport's thread: the batches ready meanwhile go with the
        # next append that fills a batch, or the timer's next tick (within half a delay), so
        # encoding never holds up the thread that answers calls.
        with self._lock:
            self._in_flight -= 1
            idle = self._in_flight == 0
        if idle and self.on_idle is not None:
            self.on_idle()

    @property
    def idle(self) -> bool:
        """No call of ready batches is out."""
        return self._in_flight == 0

    def send(self, batches: list[ProducerBatch], release: Callable[[ProducerBatch], None] | None = None,
             on_answered: Callable[[], None] | None = None) -> None:
        """Send batches in one call without waiting. Each batch is answered (completed or
        failed) when the broker answers, then ``release(batch)`` is called, failures
        included; ``on_answered()`` once the call is answered (before retries, if any)."""
        pending = []
        deadline_ms = self.now_ms() + self.config.delivery_timeout_ms
        for batch in batches:
            if not batch.attempts:
                batch.deadline_ms = deadline_ms
            try:
                pending.append((batch, self._send_of(batch)))
            except BaseException as error:  # e.g. the topic does not exist: this batch fails alone
                _answer(batch, error, None, release)
        if pending:
            self._call(pending, 0, release, on_answered)
        elif on_answered is not None:
            on_answered()

    def _call(self, pending: list, attempt: int, release, on_answered=None, last_errors=None) -> None:
        left_ms = min(batch.deadline_ms for batch, _send in pending) - self.now_ms()
        if last_errors is not None and left_ms <= 0:  # its time ran out while it waited to be sent again
            for (batch, send), error in zip(pending, last_errors):
                _answer(batch, self._out_of_time(batch, send, error), None, release)
            return
        timeout_ms = max(1, int(min(self.config.request_timeout_ms, left_ms)))
        for batch, _send in pending:
            batch.attempts += 1
        try:
            self.transport.send_many([send for _, send in pending], timeout_ms,
                                     lambda outcomes, error: self._on_answer(outcomes, error, pending, attempt,
                                                                             release, on_answered))
        except BaseException as error:
            for batch, _send in pending:
                _answer(batch, error, None, release)
            if on_answered is not None:
                on_answered()
            raise

    def _on_answer(self, outcomes, error, pending: list, attempt: int, release, on_answered) -> None:
        try:
            self._answer_call(outcomes, error, pending, attempt, release)
        finally:
            if on_answered is not None:
                on_answered()

    def _answer_call(self, outcomes, error, pending: list, attempt: int, release) -> None:
        """Answer the batches of a call (on the transport's thread); retry the retriable
        failures whose delivery timeout leaves room for another attempt after the backoff."""
        retry_by_ms = self.now_ms() + self.transport.backoff_s(attempt) * 1000
        retry = []
        for index, (batch, send) in enumerate(pending):
            outcome = error if error is not None else outcomes[index]
            if not isinstance(outcome, BaseException):
                if self.transaction_id:
                    self._count_prepared(outcome)
                _answer(batch, None, outcome, release)
                continue
            if isinstance(outcome, RmqError) and outcome.retriable:
                if _refused(outcome):
                    batch.refusal = outcome
                else:
                    batch.maybe_stored = True
                if retry_by_ms < batch.deadline_ms:
                    retry.append((batch, send, outcome))
                    continue
                if isinstance(outcome, RequestTimeoutError) and batch.refusal is not None:
                    outcome = batch.refusal  # the last attempt ran out of the time left: the broker's reason says more
                outcome = self._out_of_time(batch, send, outcome)
            if isinstance(outcome, TopicNotFoundError):
                self.router.forget(send.topic)
            _answer(batch, outcome, None, release)
        if retry:
            self._retry(retry, attempt, release)

    def _out_of_time(self, batch: ProducerBatch, send: Send, error: RmqError) -> RmqError:
        """The error a batch fails with when its delivery timeout ran out on a retriable one:
        of the same type (still retriable), saying what ran out and what to raise."""
        config = self.config
        stored = ("it may have been stored, so sending it again may store it twice" if batch.maybe_stored else
                  "the broker refused every attempt, so nothing of it was stored")
        sentence = (f"a batch of {max(len(batch.messages), 1)} message(s) to {send.topic!r} queue {send.queue_id} "
                    f"failed after {batch.attempts} attempt(s) in delivery_timeout_ms={config.delivery_timeout_ms} "
                    f"(each attempt up to request_timeout_ms={config.request_timeout_ms}, its upload included): "
                    f"{error}. For a slow or lossy link raise request_timeout_ms and delivery_timeout_ms; {stored}")
        try:
            failed = type(error)(sentence, code=error.code, reason=error.reason)
        except TypeError:  # an error type made otherwise: a timeout is what it came to
            failed = RequestTimeoutError(sentence, code=error.code, reason=error.reason)
        failed.__cause__ = error
        return failed

    def _retry(self, failed: list, attempt: int, release) -> None:
        """Send again after the backoff, from a timer thread (retries are rare); ``failed`` holds
        (batch, send, its error): a batch whose delivery time is spent by then fails with that error,
        not with an attempt left no time."""
        pending, errors = [(batch, send) for batch, send, _error in failed], [error for *_, error in failed]
        timer = threading.Timer(self.transport.backoff_s(attempt), self._call,
                                (pending, attempt + 1, release, None, errors))
        timer.daemon = True
        timer.start()

    def _count_prepared(self, stored) -> None:
        with self._lock:  # answers arrive on the transport's threads
            self.prepared_batches += 1
            self.prepared_messages += stored.count

    def _send_of(self, batch: ProducerBatch) -> Send:
        if batch.sequence < 0:
            batch.sequence = next(self._sequences)
        key = batch.key
        return Send(key.topic, key.queue_id, self._content(batch), self.producer_id, batch.sequence,
                    self.transaction_id, key.broker)

    def _content(self, batch: ProducerBatch):
        """What a batch sends: its message alone, an inner batch (BatchCQ) or an early batch."""
        if batch.alone:
            return batch.messages[0]
        form = self.form(batch.key.topic)
        if batch.encoded is not None:
            payload, count, codec, compression, ids = batch.encoded
            if form.inner:
                return InnerBatch(payload, count, codec, compression, batch.key.tags, ids)
            return EarlyBatch(payload, count, ids)
        messages = batch.messages
        ids = self.unique_keys.many(len(messages)) if self.unique_keys is not None else ()
        payload = _encode(messages, form.codec, form.compression, ids or None)
        if form.inner:
            tags = {m.tags for m in messages}
            return InnerBatch(payload, len(messages), form.codec, form.compression,
                              next(iter(tags)) if len(tags) == 1 else None, ids)
        return EarlyBatch(payload, len(messages), ids)

    def form(self, topic: str) -> BatchForm:
        """How batches of ``topic`` go (``batch_form``): the route's queue type decides."""
        return batch_form(self.router.topic(topic).queue_type, self.codec, self.compression)


def _encode(messages: list, codec: Codec, compression: Compression, unique_keys=None) -> bytes:
    if codec is Codec.RMQ:  # joined from the messages' own values: no column is built for tens of rows
        tags = messages[0].tags
        if unique_keys is None and all(m.keys is None and not m.properties and m.tags == tags for m in messages):
            return compress(rmq.encode_plain([m.body for m in messages], tags), compression)
        return compress(rmq.encode_rows([(m.body, m.properties.items() if m.properties else None, m.keys, m.tags)
                                         for m in messages], unique_keys), compression)
    return encode_messages([(m.body, m.properties, m.keys, m.tags, None) for m in messages], codec, compression)


def _answer(batch: ProducerBatch, error, response, release) -> None:
    try:
        if error is not None:
            batch.fail(error)
        else:
            batch.complete(response)
    finally:
        if release is not None:
            release(batch)


class BatchTimer:
    """The one background thread: every half delay it sends the batches that are old enough,
    and, woken by ``send_open``, every open batch at once."""

    def __init__(self, accumulator: RecordAccumulator, sender: Sender, interval_ms: float):
        self.accumulator = accumulator
        self.sender = sender
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmq-producer-timer", daemon=True)
        self._thread.start()

    def tick(self, flush_all: bool = False) -> int:
        """Send the batches that are ready now (every open one with ``flush_all``); returns
        how many batches were sent."""
        self.accumulator.seal_aged(flush_all)
        return self.sender.send_ready()

    def send_open(self) -> None:
        """Have the timer's thread send every open batch now (not the caller's thread: it may
        be the transport's, which must not encode)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick(flush_all=woken)
            except Exception:  # the sender answers batches itself; this is a bug guard
                log.exception("producer timer failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _refused(error: RmqError) -> bool:
    """The broker answered and refused (nothing stored): our door's refusals carry a reason,
    RocketMQ's a response code; a timeout, a lost answer or a lost connection carry neither."""
    return bool(error.reason) or (isinstance(error.code, int) and not isinstance(error.code, bool))
