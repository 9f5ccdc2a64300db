"""The producer's settings, with RocketMQ's defaults, in one place (units in the names)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class ProducerConfig:
    """How the producer batches and sends.

    auto_batch : bool
        Group messages sent one by one into batches (RocketMQ's AutoBatch).
    batch_max_bytes : int
        A batch goes out as soon as its bodies pass this many bytes (32 KiB).
    batch_max_delay_ms : int
        ... or as soon as it is this old (10 ms).
    total_batch_max_bytes : int
        Bytes of bodies held in batches not yet acknowledged; a send waits for room (32 MiB).
    send_timeout_ms : int
        How long a blocking send waits: for room, and for its batch's answer (3 s).
    """

    auto_batch: bool = True
    batch_max_bytes: int = 32 * 1024
    batch_max_delay_ms: int = 10
    total_batch_max_bytes: int = 32 * 1024 * 1024
    send_timeout_ms: int = 3_000

    def __post_init__(self):
        for name in ("batch_max_bytes", "batch_max_delay_ms", "total_batch_max_bytes", "send_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r}: must be a positive integer")
        if self.total_batch_max_bytes < self.batch_max_bytes:
            raise ConfigError(f"total_batch_max_bytes={self.total_batch_max_bytes} is below batch_max_bytes="
                              f"{self.batch_max_bytes}: a single batch could never be held")

    @property
    def timer_interval_ms(self) -> float:
        """The age check runs every half delay, at least every millisecond (as RocketMQ)."""
        return max(1.0, self.batch_max_delay_ms / 2)
