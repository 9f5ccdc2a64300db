"""The store's settings, with RocketMQ's defaults, in one place."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rmq_wire import record as fmt


class FlushMode(str, enum.Enum):
    ASYNC = "async"  # a flusher writes back on an interval; an OS crash can lose the last interval
    SYNC = "sync"  # an append is acknowledged only after its bytes are on disk


class DispatchMode(str, enum.Enum):
    SERIAL = "serial"  # one thread reads and indexes record by record (ReputMessageService)
    CONCURRENT = "concurrent"  # chunks parsed by a pool, written in order by one thread (RIP-52)


class DispatchPool(str, enum.Enum):
    PROCESS = "process"  # worker processes map the segments: parsing runs beside the broker's GIL
    THREAD = "thread"  # threads of the broker process: the numpy parts overlap, the rest takes turns


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
    dispatch_mode: DispatchMode = DispatchMode.SERIAL
    dispatch_pool: DispatchPool = DispatchPool.PROCESS  # concurrent mode: who parses chunks
    dispatch_workers: int = 2  # concurrent mode: chunks parsed at once
    dispatch_chunk_bytes: int = 4 << 20  # concurrent mode: the scanner's chunk size (whole records)
    dispatch_ring_slots: int = 16  # concurrent mode: how far parsing may run ahead of the index writer
    disk_reserve_bytes: int = 64 << 20  # appends are refused when less is free (RocketMQ's DISK_FULL)
    index_wait_ms: int = 10_000  # a read waits at most this long for the index to hold what was stored before it
    store_host: str = "127.0.0.1"
    store_port: int = 10911

    def __post_init__(self):
        for name, kind in (("flush_mode", FlushMode), ("dispatch_mode", DispatchMode), ("dispatch_pool", DispatchPool)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ValueError(f"{name}={getattr(self, name)!r}: use one of "
                                 f"{', '.join(m.value for m in kind)}") from None
        smallest_segment = 4096
        if self.segment_bytes < smallest_segment:
            raise ValueError(f"segment_bytes={self.segment_bytes}: use at least {smallest_segment}")
        if self.disk_reserve_bytes < 0:
            raise ValueError(f"disk_reserve_bytes={self.disk_reserve_bytes}: must be 0 or more")
        if self.max_message_bytes < 1:
            raise ValueError(f"max_message_bytes={self.max_message_bytes}: must be positive")
        for name in ("flush_interval_ms", "index_flush_interval_ms", "index_flush_thorough_interval_ms",
                     "simple_cq_units_per_file", "batch_cq_units_per_file", "dispatch_workers",
                     "dispatch_chunk_bytes", "dispatch_ring_slots", "index_wait_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive")
        if not 1 <= self.max_batch_messages <= 32767:
            raise ValueError(f"max_batch_messages={self.max_batch_messages}: use 1 to 32767")

    @property
    def store_host_bytes(self) -> bytes:
        return fmt.encode_host(self.store_host, self.store_port)
