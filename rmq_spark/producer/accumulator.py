"""The record accumulator: open batches by key, ready by size or age, and the memory bound."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

from ..errors import BufferFullError
from ..structs import Message
from .batch import BatchKey, ProducerBatch
from .config import ProducerConfig


class RecordAccumulator:
    """Holds open batches. ``append`` returns the message's future and, when the batch has
    passed ``batch_max_bytes``, the batch itself, for the appending thread to send in place;
    ``ready`` hands out batches older than ``batch_max_delay_ms``. Held bytes are counted from
    ``append`` until ``release`` (the batch's answer, success or failure)."""

    def __init__(self, config: ProducerConfig, now_ms: Callable[[], float]):
        self.config = config
        self.now_ms = now_ms
        self._open: dict[BatchKey, ProducerBatch] = {}
        self._held_bytes = 0
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def append(self, message: Message, queue_id: int, timeout_s: float) -> tuple[Future, ProducerBatch | None]:
        size = len(message.body)
        key = BatchKey(message.topic, queue_id, message.tags)
        with self._room:
            if not self._room.wait_for(lambda: self._held_bytes + size <= self._limit(size), timeout_s):
                raise BufferFullError(
                    f"{self._held_bytes:,} bytes are waiting to be sent (total_batch_max_bytes="
                    f"{self.config.total_batch_max_bytes:,}) and no room came within {timeout_s:.1f} s: "
                    "the broker is slower than the senders; send less, or raise total_batch_max_bytes")
            self._held_bytes += size
            batch = self._open.get(key)
            if batch is None:
                batch = self._open[key] = ProducerBatch(key, self.now_ms())
            future = batch.append(message)
            if batch.body_bytes >= self.config.batch_max_bytes:
                del self._open[key]
                return future, batch
            return future, None

    def ready(self, flush_all: bool = False) -> list[ProducerBatch]:
        """Take the batches old enough to go (all of them with ``flush_all``)."""
        now = self.now_ms()
        with self._lock:
            keys = [key for key, batch in self._open.items()
                    if flush_all or batch.age_ms(now) >= self.config.batch_max_delay_ms]
            return [self._open.pop(key) for key in keys]

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait until no bytes are held (every batch handed out was answered)."""
        with self._room:
            return self._room.wait_for(lambda: self._held_bytes == 0 and not self._open, timeout_s)

    def release(self, batch: ProducerBatch) -> None:
        with self._room:
            self._held_bytes -= batch.body_bytes
            self._room.notify_all()

    def _limit(self, size: int) -> int:
        # A message larger than the whole bound may go when nothing else is held.
        return max(self.config.total_batch_max_bytes, size)
