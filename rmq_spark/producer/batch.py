"""A batch being filled: its messages, their futures, and how it is encoded for sending."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from ..structs import Message, SendResult


@dataclass(frozen=True)
class BatchKey:
    """Messages are grouped by topic, queue and tag (RocketMQ's ProduceAccumulator key)."""

    topic: str
    queue_id: int
    tags: str | None


@dataclass
class ProducerBatch:
    key: BatchKey
    created_ms: float
    messages: list[Message] = field(default_factory=list)
    futures: list[Future] = field(default_factory=list)
    body_bytes: int = 0

    def append(self, message: Message) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()
        self.messages.append(message)
        self.futures.append(future)
        self.body_bytes += len(message.body)
        return future

    def age_ms(self, now_ms: float) -> float:
        return now_ms - self.created_ms

    def complete(self, base_offset: int, message_ids, store_timestamp_ms: int, queue_id: int) -> None:
        """Every message gets its own result; callbacks run in message order."""
        for index, future in enumerate(self.futures):
            future.set_result(SendResult(self.key.topic, queue_id, base_offset + index, message_ids[index],
                                         store_timestamp_ms))

    def fail(self, error: BaseException) -> None:
        """Every message of the batch fails with the same error."""
        for future in self.futures:
            future.set_exception(error)
