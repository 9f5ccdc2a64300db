"""The record accumulator: open batches by key, batches ready to go, and the memory bound."""

from __future__ import annotations

import collections
import threading
from typing import Callable

from rmq_spark.errors import BufferFullError
from rmq_spark.producer.batch import BatchKey, ProducerBatch, SendFuture
from rmq_spark.producer.config import ProducerConfig
from rmq_spark.structs import Message


class RecordAccumulator:
    """Holds open batches and the ready ones.

    ``append`` puts a message into its key's open batch; a batch whose bodies pass
    ``batch_max_bytes`` moves to the ready queue (``append`` says so, and the appending thread
    sends); ``seal_aged`` moves batches older than ``batch_max_delay_ms`` there (the timer).
    ``drain`` hands out ready batches, several per request. Held bytes are counted from
    ``append`` until ``release`` (the batch's answer, success or failure).
    """

    def __init__(self, config: ProducerConfig, now_ms: Callable[[], float],
                 next_queue: Callable[[str], tuple[str, int]] | None = None):
        self.config = config
        self.now_ms = now_ms
        self.next_queue = next_queue  # the queue of a new batch of messages that take turns
        self._total_bytes = config.total_batch_max_bytes
        self._open: dict[tuple, ProducerBatch] = {}
        self._ready: collections.deque[ProducerBatch] = collections.deque()
        self._held_bytes = 0
        self._in_flight = 0  # batches drained and not yet released
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def append(self, message: Message, queue: tuple[str, int] | None, timeout_s: float,
               callback=None) -> tuple[SendFuture, bool]:
        """The message's future, and whether a batch became ready; ``queue`` is (broker, queue
        id), or None for a message that takes turns: it joins its topic's and tag's open batch of
        such messages, whose queue ``next_queue`` chose when it opened;
        ``callback(result, error)`` runs once the batch is answered."""
        size = len(message.body)
        key = (message.topic, message.tags, queue)  # a plain tuple: the hottest line of sending
        with self._lock:  # the condition's lock; the condition only when there is no room
            if self._held_bytes + size > self._total_bytes and size <= self._total_bytes and \
                    not self._room.wait_for(lambda: self._held_bytes + size <= self._limit(size), timeout_s):
                raise self._full(timeout_s)
            self._held_bytes += size
            batch = self._open.get(key)
            if batch is None:
                broker, queue_id = queue or self.next_queue(message.topic)
                batch = self._open[key] = ProducerBatch(BatchKey(message.topic, queue_id, message.tags, broker),
                                                        self.now_ms())
            future = batch.append(message, callback)
            if batch.body_bytes < self.config.batch_max_bytes:
                return future, False
            del self._open[key]
            self._ready.append(batch)
            return future, True

    def seal_aged(self, flush_all: bool = False) -> int:
        """Move the batches old enough to go (all of them with ``flush_all``) to the ready
        queue; returns how many."""
        now = self.now_ms()
        with self._lock:
            keys = [key for key, batch in self._open.items()
                    if flush_all or batch.age_ms(now) >= self.config.batch_max_delay_ms]
            self._ready.extend(self._open.pop(key) for key in keys)
            return len(keys)

    def drain(self, max_bytes: int) -> list[ProducerBatch]:
        """Take ready batches for one request: at least one (if any), then while their bodies
        stay within ``max_bytes``."""
        with self._lock:
            batches, size = [], 0
            while self._ready and (not batches or size + self._ready[0].body_bytes <= max_bytes):
                batch = self._ready.popleft()
                batches.append(batch)
                size += batch.body_bytes
            self._in_flight += len(batches)
            return batches

    def hold(self, batch: ProducerBatch, timeout_s: float) -> None:
        """Count a batch made elsewhere (from columns) as held and in flight, once there is
        room for it; ``release`` frees it as any other."""
        size = batch.body_bytes
        with self._lock:
            if self._held_bytes + size > self._limit(size) and not self._room.wait_for(
                    lambda: self._held_bytes + size <= self._limit(size), timeout_s):
                raise self._full(timeout_s)
            self._held_bytes += size
            self._in_flight += 1

    def release(self, batch: ProducerBatch) -> None:
        """A drained batch was answered: its bytes are free."""
        with self._room:
            self._held_bytes -= batch.body_bytes
            self._in_flight -= 1
            self._room.notify_all()

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait until nothing is held: no open or ready batch, every drained one answered."""
        with self._room:
            return self._room.wait_for(lambda: not (self._open or self._ready or self._in_flight), timeout_s)

    def _full(self, timeout_s: float) -> BufferFullError:
        return BufferFullError(
            f"{self._held_bytes:,} bytes are waiting to be sent (total_batch_max_bytes="
            f"{self.config.total_batch_max_bytes:,}) and no room came within {timeout_s:.1f} s: "
            "the broker is slower than the senders; send less, or raise total_batch_max_bytes")

    def _limit(self, size: int) -> int:
        # A message larger than the whole bound may go when nothing else is held.
        return max(self.config.total_batch_max_bytes, size)
