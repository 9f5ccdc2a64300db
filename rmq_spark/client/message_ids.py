"""RocketMQ's message ids (the UNIQ_KEY property, what RocketMQ's clients call a message's
msgId): 16 bytes written as 32 upper-case hex digits, as RocketMQ's MessageClientIDSetter
makes them: the client's IPv4 address (4), process id (2), a per-client number (4), the
milliseconds since the start of the month (4) and a counter (2).

``UniqueKeys`` makes them so. ``deterministic_keys`` makes the ids of rows that must carry
the same ids when written again (a Spark task retried, a micro-batch replayed): 10 bytes of a
hash of what names the rows (sink, batch, partition) and the row's number (6 bytes). Such an
id does not carry its time: tools that guess a message's time from its id
(``mqadmin queryMsgByUniqueKey``) need the time range given.
"""

from __future__ import annotations

import calendar
import hashlib
import os
import random
import socket
import threading
import time

import numpy as np
import pyarrow as pa

_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return bytes([127, 0, 0, 1])


def _month_of(now_ms: int) -> tuple[int, int]:
    """The month of ``now_ms`` (UTC): its first millisecond and the next month's."""
    now = time.gmtime(now_ms / 1000)
    following = (now.tm_year + now.tm_mon // 12, now.tm_mon % 12 + 1)
    return (calendar.timegm((now.tm_year, now.tm_mon, 1, 0, 0, 0)) * 1000,
            calendar.timegm((*following, 1, 0, 0, 0)) * 1000)


class UniqueKeys:
    """A client's message ids: unique per client (its address, process and a random number),
    then by time and a counter."""

    def __init__(self, now_ms=lambda: int(time.time() * 1000)):
        self._prefix = (_local_ipv4() + (os.getpid() & 0xFFFF).to_bytes(2, "big")
                        + random.getrandbits(32).to_bytes(4, "big"))
        self._now_ms = now_ms
        self._counter = 0
        self._month = (0, 0)  # the start of the month now, and of the next: the time field counts from the first
        self._lock = threading.Lock()

    def _take(self, count: int) -> tuple[int, int]:
        """(time field, first counter) for ``count`` ids."""
        now = self._now_ms()
        with self._lock:
            first = self._counter
            self._counter += count
            if not self._month[0] <= now < self._month[1]:
                self._month = _month_of(now)
        return (now - self._month[0]) & 0xFFFFFFFF, first

    def next(self) -> str:
        """One new id (as ``arrow(1)`` makes it, without the arrays: one is made per message sent alone)."""
        time_field, counter = self._take(1)
        return (self._prefix + time_field.to_bytes(4, "big") + (counter & 0xFFFF).to_bytes(2, "big")).hex().upper()

    def many(self, count: int) -> list[str]:
        return self.arrow(count).to_pylist() if count else []

    def arrow(self, count: int) -> pa.Array:
        """``count`` new ids as an Arrow string array."""
        time_field, first = self._take(count)
        counters = (np.arange(first, first + count, dtype=np.int64) & 0xFFFF).astype(">u2")
        # A counter that wraps within one millisecond would repeat an id: such ids move to the next milliseconds.
        times = (time_field + (np.arange(first, first + count, dtype=np.int64) >> 16) - (first >> 16)) & 0xFFFFFFFF
        return _hex_ids(np.frombuffer(self._prefix, dtype=np.uint8), times.astype(">u4"), counters)


def deterministic_keys(name: str, first_row: int, count: int) -> pa.Array:
    """The ids of rows ``first_row`` .. ``first_row + count - 1`` of what ``name`` names (the
    same every time they are written)."""
    prefix = np.frombuffer(hashlib.blake2b(name.encode(), digest_size=10).digest(), dtype=np.uint8)
    rows = np.arange(first_row, first_row + count, dtype=np.int64)
    tail = np.empty((count, 6), dtype=np.uint8)
    for i in range(6):
        tail[:, 5 - i] = (rows >> (8 * i)) & 0xFF
    return _hex(np.hstack([np.broadcast_to(prefix, (count, 10)), tail]))


def _hex_ids(prefix: np.ndarray, times: np.ndarray, counters: np.ndarray) -> pa.Array:
    count = len(counters)
    raw = np.empty((count, 16), dtype=np.uint8)
    raw[:, :10] = prefix
    raw[:, 10:14] = times.view(np.uint8).reshape(count, 4)
    raw[:, 14:16] = counters.view(np.uint8).reshape(count, 2)
    return _hex(raw)


def _hex(raw: np.ndarray) -> pa.Array:
    """Rows of 16 bytes as 32 upper-case hex digits each, an Arrow string array."""
    count = len(raw)
    digits = np.empty((count, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 0xF]
    offsets = pa.py_buffer(np.arange(0, 32 * count + 1, 32, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), count, [None, offsets, pa.py_buffer(digits.tobytes())])
