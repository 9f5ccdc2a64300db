"""What the store's disk can still take: the free-space reserve, and the failed state.

The reserve (RocketMQ's DISK_FULL running flag): the commitlog refuses to grow while the
filesystem has less than ``disk_reserve_bytes`` free, so that what is built from the log (the
indexes, the checkpoint, offsets, topics, pop and transaction state) still finds room for the
messages already acknowledged. It is checked each time a commitlog segment is allocated
further (every few MiB), not on every append.

The failed state: a flush (fdatasync, msync) that fails may leave pages unwritten while the
kernel marks them clean and forgets the error ("fsyncgate"), so a second flush would report
success for data that is lost. After one failure the store accepts no write and moves no
checkpoint until it is restarted; recovery then checks what is really on disk.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from broker_sim.store.errors import DiskFailedError, DiskFullError

log = logging.getLogger(__name__)

MIB = 1 << 20


class DiskGuard:
    """The reserve and the failed state of the disk holding ``directory``."""

    def __init__(self, directory: Path, reserve_bytes: int):
        self.directory = directory
        self.reserve_bytes = reserve_bytes
        self.failure = ""  # set once: why no write is accepted until a restart
        self._lock = threading.Lock()

    def check_reserve(self, more_bytes: int) -> None:
        """Raise ``DiskFullError`` unless ``more_bytes`` can be taken and leave the reserve free."""
        stat = os.statvfs(self.directory)
        free = stat.f_bavail * stat.f_frsize
        if free - more_bytes < self.reserve_bytes:
            raise DiskFullError(
                f"the disk holding {self.directory} has {free / MIB:.1f} MiB free; growing the commitlog by "
                f"{more_bytes / MIB:.1f} MiB would leave less than the {self.reserve_bytes / MIB:.1f} MiB the broker "
                "keeps free for its indexes and metadata (--disk-reserve)")

    def grow(self, mapped, end: int, step: int) -> None:
        """Allocate ``mapped`` (a log segment) up to ``end`` (relative), ``step`` bytes at a
        time, if the reserve stays free; raises ``DiskFullError``."""
        if end > mapped.allocated:
            self.check_reserve(-(-end // step) * step - mapped.allocated)
            mapped.allocate(end, step)

    def fail(self, what: str, error: OSError) -> DiskFailedError:
        """Enter the failed state (the first failure's sentence is kept); returns the error to raise."""
        with self._lock:
            if not self.failure:
                self.failure = (
                    f"the disk holding {self.directory} failed {what} ({error.strerror or error}): data written "
                    "since the last good flush may not be on disk, so the broker accepts no write until it is "
                    "restarted (recovery then checks what is on disk). Reads go on; fix the disk and restart the "
                    "broker")
                log.error("%s", self.failure)
        return DiskFailedError(self.failure)

    def check_healthy(self) -> None:
        if self.failure:
            raise DiskFailedError(self.failure)


def full_at_start_sentence(detail) -> str:
    """A start stopped for lack of space (``detail``: what could not be written): what to do."""
    return f"out of disk space: {detail}; the broker cannot start. Free space on that disk and start it again"

