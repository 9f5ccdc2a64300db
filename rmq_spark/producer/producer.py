"""The Producer facade: AutoBatch for messages sent one by one, batches by hand, single sends."""

from __future__ import annotations

import threading
import time
from typing import Callable

from rmq_spark.client.connect import connect
from rmq_spark.client.transactions import check_id
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import ClosedError, ConfigError, RequestTimeoutError
from rmq_spark.producer.accumulator import RecordAccumulator
from rmq_spark.producer.batch import BatchKey, ProducerBatch, SendFuture
from rmq_spark.producer.columns import ArrowSend, as_record_batch, plan_batches, split_by_topic
from rmq_spark.producer.config import ProducerConfig
from rmq_spark.producer.routing import Router
from rmq_spark.producer.sender import BatchTimer, Sender
from rmq_spark.structs import Message, PreparedTransaction, SendResult
from rmq_wire.codec import Codec, Compression
from rmq_wire.record import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_TIMER_PROPERTIES,
    PROPERTY_TRANSACTION_PREPARED,
    RETRY_TOPIC_PREFIX,
)

# Messages that go out alone, as RocketMQ's AutoBatch sends them.
_UNBATCHABLE_PROPERTIES = (PROPERTY_DELAY_TIME_LEVEL, *PROPERTY_TIMER_PROPERTIES, PROPERTY_TRANSACTION_PREPARED)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class Producer:
    """Sends messages to a broker, or to a RocketMQ cluster; safe to share between threads.

    With ``auto_batch`` (the default), ``send`` and ``send_async`` put each message into a
    batch of its (topic, queue, tag); a batch is ready when its bodies pass
    ``batch_max_bytes`` (then the thread whose message filled it sends it, with any other
    ready batches, in one call) or when it is ``batch_max_delay_ms`` old (then one background
    timer sends it). On a BatchCQ topic a batch is one inner batch (one stored record); on a
    SimpleCQ topic an early batch. Delayed, transactional and retry-topic messages go out
    alone.

    Through our door every send is idempotent: it carries the producer's id and a sequence
    number, and the broker stores it once. Retriable failures (the broker unavailable,
    restarting or slow) are therefore retried (with the transport's backoff, for
    ``delivery_timeout_ms``, each attempt given ``request_timeout_ms``) without duplicates.
    Through name servers (RocketMQ's remoting protocol) sends are RocketMQ's own: batches in
    RocketMQ's MessageBatch encoding, uncompressed, each message with a UNIQ_KEY
    (``SendResult.message_id``), and a retried send may be stored twice (at least once).

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of broker_sim's own door.
    name_server : str
        Or RocketMQ's name servers, ``HOST:PORT;HOST:PORT``: any RocketMQ cluster. A topic's
        queues are then (broker, queue id): ``Message.broker`` names a queue's broker.
    codec : {"rmq", "arrow"}
        Encoding of batches sent to BatchCQ topics (default "rmq", RocketMQ's MessageBatch).
    compression : {"none", "lz4", "zstd", "zlib"}
        Compression of those batches, over the whole payload (default "none").
    queue_selector : {"hash", "round_robin"}
        How a queue is chosen when a message names none (see ``Router``): ``hash`` places
        messages with keys by their keys; the others take the queues in turn, a batch at a
        time (AutoBatch fills one batch on a queue, then the next batch goes to the next).
    auto_batch, batch_max_bytes, batch_max_delay_ms, total_batch_max_bytes, send_timeout_ms, request_timeout_ms,
    delivery_timeout_ms, request_max_bytes, max_in_flight_requests
        See ``ProducerConfig`` (256 KiB, where RocketMQ's is 32 KiB; then RocketMQ's: 10 ms, 32 MiB, 3 s to wait
        for room; Kafka's: 30 s an attempt, 120 s a batch).
    transport : TransportConfig, optional
        Deadlines, retries, backoff and TLS of calls.
    transaction_id : str, optional
        Prepare every send under this transaction (one id per writer attempt, e.g. from
        ``new_transaction_id()``): stored, invisible until ``Transactions.commit``; results
        then have queue_offset -1. ``prepared()`` says what was prepared, for the committer.
    now_ms : callable, optional
        The clock of batch ages, for tests; ``background=False`` leaves the timer to
        ``producer.timer.tick()``.
    """

    def __init__(self, endpoint: str | None = None, *, name_server: str | None = None, codec: str = "rmq",
                 compression: str = "none", queue_selector: str = "hash", transport: TransportConfig | None = None,
                 transaction_id: str | None = None, now_ms: Callable[[], float] = _monotonic_ms,
                 background: bool = True, **batching):
        unknown = sorted(set(batching) - set(ProducerConfig.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown producer option(s) {', '.join(unknown)}; the batching options are: "
                              f"{', '.join(ProducerConfig.__dataclass_fields__)}")
        try:
            codec, compression = Codec.parse(codec), Compression.parse(compression)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.config = ProducerConfig(**batching)
        transaction_id = "" if transaction_id is None else check_id(transaction_id)
        self._transport = connect(endpoint, transport, name_server=name_server)
        try:
            self._transport.check_write(codec, compression, transaction_id)
        except ConfigError:
            self._transport.close()
            raise
        self._router = Router(self._transport, queue_selector, wait_ms=self.config.send_timeout_ms)
        self._accumulator = RecordAccumulator(self.config, now_ms, self._router.next_queue)
        self._sender = Sender(self._transport, self._router, self._accumulator, self.config, codec, compression,
                              now_ms)
        self._sender.transaction_id = transaction_id
        self.timer = BatchTimer(self._accumulator, self._sender, self.config.timer_interval_ms)
        # A blocking send appended since the timer last sent every open batch (a flag, not a count:
        # set and cleared without a lock, which 64 threads blocked in send would contend for).
        self._blocked_send = False
        self._sender.on_idle = self._on_idle
        self._closed = False
        self._close_lock = threading.Lock()
        # Every batch is answered within its delivery timeout (an attempt begun before it runs out
        # ends within it too); a send waits that long.
        self._answer_timeout_s = (self.config.delivery_timeout_ms
                                  + self._transport.config.retry_backoff_max_ms) / 1000 + 1
        self._room_timeout_s = self.config.send_timeout_ms / 1000
        if background and self.config.auto_batch:
            self.timer.start()

    @property
    def producer_id(self) -> str:
        """The id that stamps this producer's sends (random, one per Producer)."""
        return self._sender.producer_id

    def prepared(self) -> PreparedTransaction:
        """What this producer prepared under its transaction and the broker acknowledged (call
        after ``flush``), to hand to the committer."""
        if not self._sender.transaction_id:
            raise ConfigError("this producer sends no transaction: create it with transaction_id=...")
        return PreparedTransaction(self._sender.transaction_id, self._sender.prepared_batches,
                                   self._sender.prepared_messages)

    def send(self, message: Message) -> SendResult:
        """Send one message and wait for its own result (with AutoBatch, its batch's answer).

        A blocking send does not wait out ``batch_max_delay_ms`` when the producer has no call
        out: its batch goes at once, and the batches that fill meanwhile (other threads' sends)
        go as soon as that call is answered, as Nagle's algorithm sends. Threads blocked in
        ``send`` thus share a call each round trip, not each delay."""
        future = self.send_async(message)
        # Set after the append, then the sender looked at: either no call is out and this thread
        # sends its batch, or a call is, and its answer sees the flag (``_on_idle``).
        self._blocked_send = True
        if not future.done() and self._sender.idle and self.config.auto_batch:
            self.timer.tick(flush_all=True)
        try:
            return future.result(self._answer_timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(f"no answer for the batch of this message within "
                                      f"{self._answer_timeout_s:.0f} s") from None

    def _on_idle(self) -> None:
        """The last call out was answered: blocked sends' batches need not wait out their delay."""
        if self._blocked_send:
            self._blocked_send = False
            self.timer.send_open()

    def send_async(self, message: Message,
                   callback: Callable[[SendResult | None, BaseException | None], None] | None = None) -> SendFuture:
        """Send one message without waiting; returns a future of its SendResult. ``callback``
        gets (result, None) or (None, error); the callbacks of one batch run in order."""
        if self._closed:
            raise ClosedError("the producer is closed: create a new one to send")
        if not isinstance(message.body, (bytes, bytearray, memoryview)):
            raise ConfigError(f"the message body is {type(message.body).__name__}: give bytes (text.encode())")
        if self._batched(message):
            queue = self._router.placed_queue(message)  # None: the batch's turn decides
            future, ready = self._accumulator.append(message, queue, self._room_timeout_s, callback)
            if ready:
                self._sender.send_ready()
        else:
            queue = self._router.queue_for(message)
            batch = ProducerBatch(BatchKey(message.topic, queue[1], message.tags, queue[0]), alone=True)
            future = batch.append(message, callback)
            self._sender.send([batch])
        return future

    def send_batch(self, messages: list[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue as one batch, now: one inner batch (one
        stored record) on a BatchCQ topic, an early batch (a record per message) on a SimpleCQ
        topic. The queue is the one the messages name (queue_id, and broker), or the selector's
        choice for the first message when none names one.

        Messages naming different queues are refused, as different topics are, rather than
        split: a batch is stored whole or not at all under one answer, which a batch split
        over queues could not promise (``send`` groups messages by queue by itself)."""
        self._check_open()
        if not messages:
            raise ConfigError("send_batch needs at least one message")
        chosen = messages[0]
        topic, queue_named, broker_named = chosen.topic, chosen.queue_id, chosen.broker
        if any(m.topic != topic or m.queue_id != queue_named or m.broker != broker_named for m in messages):
            if any(m.topic != topic for m in messages):
                raise ConfigError(f"a batch goes to one topic; got {sorted({m.topic for m in messages})}")
            chosen = _named_queue(messages)
        broker, queue_id = self._router.queue_for(chosen)
        batch = ProducerBatch.of(BatchKey(topic, queue_id, None, broker), messages)
        self._sender.send([batch])
        if not batch.wait(self._answer_timeout_s):
            raise RequestTimeoutError(f"no answer for the batch within {self._answer_timeout_s:.0f} s")
        return batch.results()

    def send_arrow(self, columns, topic: str | None = None) -> ArrowSend:
        """Send the rows of an Arrow record batch or table without a Python object per row;
        returns an ``ArrowSend`` whose ``wait()`` gives the rows stored or raises.

        Columns: ``body`` (binary or string, required), and optionally ``topic`` (string; rows
        without one go to ``topic``), ``tags``, ``keys`` (strings), ``properties``
        (map<string, string>), ``queue_id`` (integer; otherwise the queue selector chooses,
        hashing keys, or taking the queues in turn a batch at a time) with ``broker`` (string)
        where the topic is served by several brokers, ``born_timestamp``; through name servers
        ``message_id`` (string, each row's UNIQ_KEY; made when absent).
        Rows are grouped by (topic, queue, tag) and cut into batches of about
        ``batch_max_bytes``, each encoded once with the producer's codec and compression
        (an early batch on a SimpleCQ topic), and sent many per call.
        """
        self._check_open()
        record_batch = as_record_batch(columns)
        planned = []
        for name, rows in split_by_topic(record_batch, topic):
            route = self._router.route(name)
            planned += plan_batches(rows, route, self._router, form=self._sender.form(name),
                                    batch_max_bytes=self.config.batch_max_bytes,
                                    unique_keys=self._sender.unique_keys)
        chunk, chunk_bytes = [], 0
        for index, batch in enumerate(planned):
            if chunk and chunk_bytes + batch.body_bytes > self.config.request_max_bytes:
                self._sender.send(chunk, self._accumulator.release)
                chunk, chunk_bytes = [], 0
            try:
                self._accumulator.hold(batch, self._room_timeout_s)
            except BaseException as error:  # no room: what was not sent fails, and is not held
                for unsent in chunk:
                    unsent.fail(error)
                    self._accumulator.release(unsent)
                for unsent in planned[index:]:
                    unsent.fail(error)
                raise
            chunk.append(batch)
            chunk_bytes += batch.body_bytes
        if chunk:
            self._sender.send(chunk, self._accumulator.release)
        return ArrowSend(planned, record_batch.num_rows)

    def flush(self) -> None:
        """Send every batch held now and wait until all sent batches are answered."""
        self.timer.tick(flush_all=True)
        self._accumulator.wait_empty(self._answer_timeout_s)

    def close(self) -> None:
        """Flush, then refuse new sends."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.flush()
        finally:
            self.timer.stop()
            self._transport.close()

    def _batched(self, message: Message) -> bool:
        return (self.config.auto_batch and not message.topic.startswith(RETRY_TOPIC_PREFIX)
                and not (message.properties and any(name in message.properties for name in _UNBATCHABLE_PROPERTIES)))

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the producer is closed: create a new one to send")

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _named_queue(messages: list[Message]) -> Message:
    """The message naming the one queue that those of ``messages`` naming a queue name (the
    first message if none does); ConfigError when they name several."""
    named = {(m.queue_id, m.broker or ""): m for m in messages if m.queue_id is not None}
    if len(named) > 1:
        queues = ", ".join(f"queue {q}" + (f" of broker {b}" if b else "") for q, b in sorted(named))
        raise ConfigError(f"a batch goes to one queue; got {queues}: give its messages the same queue_id (and "
                          "broker), or none, or send each queue's messages as a batch of its own")
    return next(iter(named.values()), messages[0])
