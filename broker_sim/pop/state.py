"""The pop state: invisible-message records and pull offsets, behind a small interface, kept in
RocksDB (through rocksdict) as RIP-73 does.

Keys (bytes, ordered as RocksDB orders them)::

    c | deadline 8 | group "@" topic "@" | queue 4 | offset 8    a popped unit, invisible until deadline
    o | deadline 8 | group "@" topic "@" | queue 4 | offset 8    the same, popped orderly (never revived)
    p | group "@" topic "@" | queue 4                            the pull offset (value: 8 bytes)
    r | c-key                                                    a revive under way (value: the record,
                                                                 where its copy goes and that queue's end before)

A "c" key starts with its visibility deadline, so an ack is one delete and finding the expired
records is one range scan from ``c`` up to ``c | now``. Group and topic names cannot hold '@'.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator, NamedTuple, Protocol

from rocksdict import Options, ReadOptions, WriteBatch, WriteOptions

from broker_sim.store import StateMarks, close_checked, open_checked

REVIVABLE = b"c"
ORDERLY = b"o"
PULL = b"p"
REVIVING = b"r"

# What a start without the pop state means (rocks.py's sentences).
LOSS = ("that every message popped and not yet acknowledged becomes visible again at once (delivered twice), and "
        "that orderly pops lose their place")
_DEADLINE = struct.Struct(">q")
_QUEUE_OFFSET = struct.Struct(">iq")
_QUEUE = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
# pop time, reconsume times, count, nonce, failed revives
_VALUE = struct.Struct(">qiiqi")


def queue_prefix(group: str, topic: str) -> bytes:
    """``group@topic@``, the middle of every key of the group's queues of ``topic``."""
    return f"{group}@{topic}@".encode()


class PopCheckpoint(NamedTuple):
    """One popped unit (a message, or a BatchCQ unit with its whole batch) while invisible.
    (A tuple: pops make one per message, and a tuple is quick to make.)"""

    orderly: bool
    deadline_ms: int
    group: str
    topic: str
    queue_id: int
    offset: int
    count: int
    reconsume_times: int
    nonce: int  # new for every pop and every change of invisible time: old receipt handles stop working
    pop_time_ms: int
    revive_failures: int = 0

    def key(self) -> bytes:
        return checkpoint_key(self.orderly, self.deadline_ms, queue_prefix(self.group, self.topic), self.queue_id,
                              self.offset)

    def value(self) -> bytes:
        return _VALUE.pack(self.pop_time_ms, self.reconsume_times, self.count, self.nonce, self.revive_failures)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "PopCheckpoint":
        pop_time, reconsume, count, nonce, failures = _VALUE.unpack(value)
        return cls(*decode_key(key), count, reconsume, nonce, pop_time, failures)

    def moved(self, deadline_ms: int, nonce: int, **changes) -> "PopCheckpoint":
        return self._replace(deadline_ms=deadline_ms, nonce=nonce, **changes)


def checkpoint_key(orderly: bool, deadline_ms: int, prefix: bytes, queue_id: int, offset: int) -> bytes:
    return b"".join((ORDERLY if orderly else REVIVABLE, _DEADLINE.pack(deadline_ms), prefix,
                     _QUEUE_OFFSET.pack(queue_id, offset)))


def decode_key(key: bytes) -> tuple[bool, int, str, str, int, int]:
    """(orderly, deadline, group, topic, queue id, offset) of a checkpoint key."""
    (deadline,) = _DEADLINE.unpack_from(key, 1)
    group, _, topic = key[9:-13].decode().partition("@")
    queue_id, offset = _QUEUE_OFFSET.unpack_from(key, len(key) - 12)
    return key[:1] == ORDERLY, deadline, group, topic, queue_id, offset


def key_parts(orderly: bool, deadline_ms: int) -> bytes:
    """The start of the keys of one kind and deadline (a pop makes many keys of one deadline)."""
    return (ORDERLY if orderly else REVIVABLE) + _DEADLINE.pack(deadline_ms)


def unit_suffix(queue_id: int, offset: int) -> bytes:
    return _QUEUE_OFFSET.pack(queue_id, offset)


def expired_bound(now_ms: int) -> bytes:
    """The first revivable key not yet expired at ``now_ms``."""
    return REVIVABLE + _DEADLINE.pack(now_ms + 1)


_MARK = struct.Struct(">q")


def marker_value(ck: PopCheckpoint, target: str, start: int) -> bytes:
    """A revive marker: the record's value, then the end of ``target``'s queue 0 before the copy."""
    return ck.value() + _MARK.pack(start) + target.encode()


def decode_marker(key: bytes, value: bytes) -> tuple[PopCheckpoint, str, int]:
    """(record, target topic, its queue end before the copy) of a revive marker."""
    ck = PopCheckpoint.decode(key[1:], value[:_VALUE.size])
    (start,) = _MARK.unpack_from(value, _VALUE.size)
    return ck, value[_VALUE.size + _MARK.size:].decode(), start


def pull_key(prefix: bytes, queue_id: int) -> bytes:
    return PULL + prefix + _QUEUE.pack(queue_id)


def pull_value(offset: int) -> bytes:
    return _OFFSET.pack(offset)


def decode_pull(key: bytes, value: bytes) -> tuple[str, str, int, int]:
    """(group, topic, queue id, pull offset) of a pull-offset entry."""
    group, _, topic = key[1:-5].decode().partition("@")
    return group, topic, _QUEUE.unpack_from(key, len(key) - 4)[0], _OFFSET.unpack(value)[0]


class PopStateStore(Protocol):
    """What the pop service needs of its state store: atomic multi-key writes and ordered scans."""

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        """Apply all deletes, then all puts, atomically."""

    def scan(self, start: bytes, end: bytes, limit: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < end``, in key order, at most ``limit``."""

    def close(self) -> None: ...


class RocksDBState:
    """PopStateStore on a RocksDB directory. Writes go through the write-ahead log, so a killed
    process loses none; ``sync`` also fsyncs it on every write (for machine crashes). With
    ``marks``, a database lost or cut since the broker left it is refused at open (rocks.py)."""

    def __init__(self, path, sync: bool = False, marks: StateMarks | None = None):
        self.path = Path(path)
        self._marks = marks
        self._db = open_checked(self.path, "pop state", LOSS, marks, Options(raw_mode=True))
        self._write_options = WriteOptions()
        self._write_options.sync = sync

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        if not puts and not deletes:
            return
        batch = WriteBatch(raw_mode=True)
        for key in deletes:
            batch.delete(key)
        for key, value in puts:
            batch.put(key, value)
        self._db.write(batch, self._write_options)

    def scan(self, start: bytes, end: bytes, limit: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(end)
        for n, item in enumerate(self._db.items(from_key=start, read_opt=read_options)):
            if limit is not None and n >= limit:
                return
            yield item

    def close(self) -> None:
        close_checked(self._db, self.path, self._marks)
