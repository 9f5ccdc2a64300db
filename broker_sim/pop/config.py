"""The pop service's settings, with RocketMQ's defaults where it has them, in one place."""

from __future__ import annotations

from dataclasses import dataclass

# RocketMQ's backoffs for revives that failed (PopReviveService), in seconds.
REVIVE_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


@dataclass(frozen=True)
class PopConfig:
    """Limits and intervals of pop consumption.

    Parameters
    ----------
    max_pop_messages : int
        Deliveries one pop may return. RocketMQ's broker allows 32; broker_sim allows more, so
        that one call can carry many SimpleCQ messages (as a BatchCQ unit does): a gRPC call
        costs as much as a few dozen messages. A BatchCQ unit is one delivery.
    max_pop_bytes : int
        Stored bytes one pop returns at most (its first delivery is returned even when larger).
    min_invisible_time_ms, max_invisible_time_ms : int
        The range of invisible times a pop or ChangeInvisibleDuration may ask for.
    max_poll_time_ms : int
        The longest a pop may wait for messages (long polling).
    max_waiting_pops : int
        Pops waiting at once; a pop beyond this answers at once with ``polling_full``
        (each waiting pop holds an RPC thread of the broker).
    max_reconsume_times : int
        Retries of a message before it goes to ``%DLQ%{group}`` (RocketMQ: 16).
    revive_interval_ms : int
        How often the revive service looks for expired invisible messages.
    revive_batch : int
        Expired records revived per pass of the revive service, at most.
    sync_writes : bool
        Fsync RocksDB's write-ahead log on every write (survives an OS crash; a killed
        process loses nothing either way).
    """

    max_pop_messages: int = 1024
    max_pop_bytes: int = 8 << 20
    min_invisible_time_ms: int = 100
    max_invisible_time_ms: int = 12 * 3600 * 1000
    max_poll_time_ms: int = 60_000
    max_waiting_pops: int = 8
    max_reconsume_times: int = 16
    revive_interval_ms: int = 200
    revive_batch: int = 1024
    sync_writes: bool = False

    def __post_init__(self):
        for name in ("max_pop_messages", "max_pop_bytes", "min_invisible_time_ms", "max_invisible_time_ms",
                     "max_poll_time_ms", "revive_interval_ms", "revive_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive")
        if self.min_invisible_time_ms > self.max_invisible_time_ms:
            raise ValueError(f"min_invisible_time_ms={self.min_invisible_time_ms} is above "
                             f"max_invisible_time_ms={self.max_invisible_time_ms}")
        if self.max_waiting_pops < 0 or self.max_reconsume_times < 0:
            raise ValueError("max_waiting_pops and max_reconsume_times must be 0 or more")


def revive_backoff_ms(failures: int) -> int:
    """The wait before the next try of a revive that failed ``failures`` times (1 or more)."""
    return REVIVE_BACKOFF_S[min(failures, len(REVIVE_BACKOFF_S)) - 1] * 1000
