"""The producer's settings, with RocketMQ's defaults, in one place (units in the names)."""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.errors import ConfigError


@dataclass(frozen=True)
class ProducerConfig:
    """How the producer batches and sends.

    auto_batch : bool
        Group messages sent one by one into batches (RocketMQ's AutoBatch).
    batch_max_bytes : int
        A batch goes out as soon as its bodies pass this many bytes (256 KiB; RocketMQ's is
        32 KiB). Larger batches cost the broker and every reader less per message (a stored
        batch costs ~100 us to append and a Python step or two to read, whatever its size)
        and add no latency: a batch still goes within ``batch_max_delay_ms``.
    batch_max_delay_ms : int
        ... or as soon as it is this old (10 ms).
    total_batch_max_bytes : int
        Bytes of bodies held in batches not yet acknowledged; a send waits for room (32 MiB).
    send_timeout_ms : int
        How long ``send`` / ``send_async`` blocks: waiting for room in the buffer (then
        ``BufferFullError``: the producer's back-pressure), or for its topic's route while the
        topic's brokers cannot be reached (60 s, Kafka's max.block.ms: on a slow link the buffer
        stays full for seconds, and a send that blocks slows the application down where one that
        failed would lose its message).
    request_timeout_ms : int
        The deadline of each attempt to send a call of batches: its upload over the link
        included, so it must allow ``request_max_bytes`` through the slowest link the producer
        uses (30 s, Kafka's request.timeout.ms).
    delivery_timeout_ms : int
        How long a batch may take from its first attempt to its answer, retries included (120 s,
        Kafka's delivery.timeout.ms): a retriable failure (a timeout, the broker unavailable or
        restarting) is retried, with the transport's backoff, until this runs out; then the
        batch fails with a sentence naming both settings.
    request_max_bytes : int
        Ready batches go to the broker together, in one call of at most this many bytes of
        bodies (4 MiB; a larger batch goes alone).
    max_in_flight_requests : int
        Calls of ready batches sent and not yet answered (5, as Kafka's producer); while that
        many are out, batches that become ready wait and go together in the next call.

    Sends that fail retriably (the broker unavailable or slow) are retried, with the
    transport's backoff, for ``delivery_timeout_ms``; through our door retries are safe, as
    every send is idempotent (a retried batch is stored once).
    """

    auto_batch: bool = True
    batch_max_bytes: int = 256 * 1024
    batch_max_delay_ms: int = 10
    total_batch_max_bytes: int = 32 * 1024 * 1024
    send_timeout_ms: int = 60_000
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    request_max_bytes: int = 4 * 1024 * 1024
    max_in_flight_requests: int = 5

    def __post_init__(self):
        for name in ("batch_max_bytes", "batch_max_delay_ms", "total_batch_max_bytes", "send_timeout_ms",
                     "request_timeout_ms", "delivery_timeout_ms", "request_max_bytes", "max_in_flight_requests"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}={value!r}: must be a positive integer")
        if self.total_batch_max_bytes < self.batch_max_bytes:
            raise ConfigError(f"total_batch_max_bytes={self.total_batch_max_bytes} is below batch_max_bytes="
                              f"{self.batch_max_bytes}: a single batch could never be held")
        if self.delivery_timeout_ms < self.request_timeout_ms:
            raise ConfigError(f"delivery_timeout_ms={self.delivery_timeout_ms} is below request_timeout_ms="
                              f"{self.request_timeout_ms}: a batch would not have the time of one attempt; raise "
                              "delivery_timeout_ms or lower request_timeout_ms")

    @property
    def timer_interval_ms(self) -> float:
        """The age check runs every half delay, at least every millisecond (as RocketMQ)."""
        return max(1.0, self.batch_max_delay_ms / 2)
