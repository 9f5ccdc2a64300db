"""The store's settings, with RocketMQ's defaults, in one place."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from . import format as fmt


class FlushMode(str, enum.Enum):
    ASYNC = "async"  # a flusher writes back on an interval; an OS crash can lose the last interval
    SYNC = "sync"  # an append is acknowledged only after its bytes are on disk


@dataclass(frozen=True)
class StoreConfig:
    segment_bytes: int = 1 << 30
    max_message_bytes: int = 4 << 20
    flush_mode: FlushMode = FlushMode.ASYNC
    flush_interval_ms: int = 500
    index_flush_interval_ms: int = 1000  # flushes the indexes with two dirty pages or more
    index_flush_thorough_interval_ms: int = 60_000  # flushes all of them and checkpoints the index
    index_flush_least_bytes: int = 2 * 4096
    simple_cq_units_per_file: int = 300_000
    batch_cq_units_per_file: int = 300_000
    max_batch_messages: int = 32767  # BatchCQ's batchSize is a Java short
    store_host: str = "127.0.0.1"
    store_port: int = 10911

    def __post_init__(self):
        object.__setattr__(self, "flush_mode", FlushMode(self.flush_mode))
        smallest_segment = 4096
        if self.segment_bytes < smallest_segment:
            raise ValueError(f"segment_bytes={self.segment_bytes}: use at least {smallest_segment}")
        if self.max_message_bytes < 1:
            raise ValueError(f"max_message_bytes={self.max_message_bytes}: must be positive")
        for name in ("flush_interval_ms", "index_flush_interval_ms", "index_flush_thorough_interval_ms",
                     "simple_cq_units_per_file", "batch_cq_units_per_file"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive")
        if not 1 <= self.max_batch_messages <= 32767:
            raise ValueError(f"max_batch_messages={self.max_batch_messages}: use 1 to 32767")

    @property
    def store_host_bytes(self) -> bytes:
        return fmt.encode_host(self.store_host, self.store_port)
