"""The Producer facade: AutoBatch for messages sent one by one, batches by hand, single sends."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable

from ..client.transport import Transport, TransportConfig
from ..codec import Codec, Compression
from ..errors import ClosedError, ConfigError, RequestTimeoutError
from ..structs import Message, SendResult
from .accumulator import RecordAccumulator
from .config import ProducerConfig
from .routing import Router
from .sender import BatchTimer, Sender

# Messages that go out alone, as RocketMQ's AutoBatch sends them.
_RETRY_TOPIC_PREFIX = "%RETRY%"
_UNBATCHABLE_PROPERTIES = ("DELAY", "__STARTDELIVERTIME", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS",
                           "TRAN_MSG")


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class Producer:
    """Sends messages to one broker; safe to share between threads.

    With ``auto_batch`` (the default), ``send`` and ``send_async`` put each message into a
    batch of its (topic, queue, tag); a batch goes out when its bodies pass
    ``batch_max_bytes`` (sent by the thread whose message filled it) or when it is
    ``batch_max_delay_ms`` old (sent by one background timer). On a BatchCQ topic a batch is
    one inner batch (one stored record); on a SimpleCQ topic an early batch. Delayed,
    transactional and retry-topic messages go out alone.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    codec : {"rmq", "arrow"}
        Encoding of batches sent to BatchCQ topics (default "rmq", RocketMQ's MessageBatch).
    compression : {"none", "lz4", "zstd"}
        Compression of those batches, over the whole payload (default "none").
    queue_selector : {"hash", "round_robin"}
        How a queue is chosen when a message names none (see ``Router``).
    auto_batch, batch_max_bytes, batch_max_delay_ms, total_batch_max_bytes, send_timeout_ms
        See ``ProducerConfig`` (RocketMQ's defaults: 32 KiB, 10 ms, 32 MiB, 3 s).
    transport : TransportConfig, optional
        Deadlines and retries of metadata calls. Sends are not retried: a retry after a lost
        answer would store the messages twice.
    now_ms : callable, optional
        The clock of batch ages, for tests; ``background=False`` leaves the timer to
        ``producer.timer.tick()``.
    """

    def __init__(self, endpoint: str, *, codec: str = "rmq", compression: str = "none",
                 queue_selector: str = "hash", transport: TransportConfig | None = None,
                 now_ms: Callable[[], float] = _monotonic_ms, background: bool = True, **batching):
        unknown = sorted(set(batching) - set(ProducerConfig.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown producer option(s) {', '.join(unknown)}; the batching options are: "
                              f"{', '.join(ProducerConfig.__dataclass_fields__)}")
        try:
            self.codec = Codec.parse(codec)
            self.compression = Compression.parse(compression)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.config = ProducerConfig(**batching)
        self._transport = Transport(endpoint, transport)
        self._router = Router(self._transport, queue_selector)
        self._sender = Sender(self._transport, self._router, self.codec, self.compression)
        self._accumulator = RecordAccumulator(self.config, now_ms)
        self.timer = BatchTimer(self._accumulator, self._sender, self.config.timer_interval_ms)
        self._closed = False
        self._close_lock = threading.Lock()
        if background and self.config.auto_batch:
            self.timer.start()

    def send(self, message: Message) -> SendResult:
        """Send one message and wait for its own result (with AutoBatch, its batch's answer)."""
        if not self._batched(message):
            self._check_open()
            return self._send_alone(message)
        future = self.send_async(message)
        try:
            return future.result(self.config.send_timeout_ms / 1000)
        except TimeoutError:
            raise RequestTimeoutError(f"no answer for the batch of this message within send_timeout_ms="
                                      f"{self.config.send_timeout_ms}") from None

    def send_async(self, message: Message,
                   callback: Callable[[SendResult | None, BaseException | None], None] | None = None) -> Future:
        """Send one message without waiting; returns a future of its SendResult. ``callback``
        gets (result, None) or (None, error); the callbacks of one batch run in order."""
        self._check_open()
        if not self._batched(message):
            future: Future = Future()
            try:
                future.set_result(self._send_alone(message))
            except BaseException as error:
                future.set_exception(error)
        else:
            _route, queue_id = self._router.queue_for(message)
            future, full = self._accumulator.append(message, queue_id, self.config.send_timeout_ms / 1000)
            if full is not None:
                self._sender.send_batch(full, self._accumulator)
        if callback is not None:
            future.add_done_callback(lambda f: callback(None, f.exception()) if f.exception()
                                     else callback(f.result(), None))
        return future

    def send_batch(self, messages: list[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue as one batch, now: one inner batch (one
        stored record) on a BatchCQ topic, an early batch (a record per message) on a SimpleCQ
        topic. The queue is the first message's (its queue_id, or the selector's choice)."""
        self._check_open()
        if not messages:
            raise ConfigError("send_batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ConfigError(f"a batch goes to one topic; got {sorted({m.topic for m in messages})}")
        _route, queue_id = self._router.queue_for(messages[0])
        response = self._sender.send_messages(topic, queue_id, messages)
        return [SendResult(topic, response.queue_id, response.base_offset + i, message_id,
                           response.store_timestamp_ms) for i, message_id in enumerate(response.message_ids)]

    def flush(self) -> None:
        """Send every batch held now and wait until all sent batches are answered."""
        self.timer.tick(flush_all=True)
        self._accumulator.wait_empty(self.config.send_timeout_ms / 1000)

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
        return (self.config.auto_batch and not message.topic.startswith(_RETRY_TOPIC_PREFIX)
                and not any(name in message.properties for name in _UNBATCHABLE_PROPERTIES))

    def _send_alone(self, message: Message) -> SendResult:
        _route, queue_id = self._router.queue_for(message)
        response = self._sender.send_single(message, queue_id)
        return SendResult(message.topic, response.queue_id, response.base_offset, response.message_ids[0],
                          response.store_timestamp_ms)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the producer is closed: create a new one to send")

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
