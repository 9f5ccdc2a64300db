"""Which queue a message or an Arrow row goes to: topic routes (cached) and the queue choice.

One set of rules for both ways of sending (``Producer.send`` and ``Producer.send_arrow``):

- an explicit queue wins: a message's ``queue_id``, a row's ``queue_id`` column;
- with the ``hash`` selector, what has keys goes to ``key_hash(keys) % queues`` (the same keys,
  the same queue, in every process and on both paths);
- the rest takes the queues in turn, from one counter: a message is a turn, and so is a run of
  about ``batch_max_bytes`` of rows (rows go to a queue a batch at a time).
"""

from __future__ import annotations

import itertools
import threading
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..client.transport import Transport
from ..errors import ConfigError, QueueNotFoundError
from ..structs import Message, TopicInfo

QUEUE_SELECTORS = ("hash", "round_robin")


def key_hash(keys: str) -> int:
    """The hash that places keys: ``key_hash(keys) % queues`` (crc32 of their UTF-8, stable
    across processes, unlike ``hash()``)."""
    return zlib.crc32(keys.encode())


class Router:
    """Topic routes (queue count and type), fetched once per topic, and the queue selector.

    ``hash``: messages and rows with keys go to ``key_hash(keys) % queues``; those without
    keys, and everything with ``round_robin``, take the queues in turn. An explicit queue (a
    message's ``queue_id``, a ``queue_id`` column) wins over both.
    """

    def __init__(self, transport: Transport, selector: str = "hash"):
        if selector not in QUEUE_SELECTORS:
            raise ConfigError(f"queue_selector={selector!r}: use one of {', '.join(QUEUE_SELECTORS)}")
        self._transport = transport
        self.by_keys = selector == "hash"
        self._routes: dict[str, TopicInfo] = {}
        self._turns = itertools.count()
        self._lock = threading.Lock()

    def topic(self, name: str) -> TopicInfo:
        route = self._routes.get(name)
        if route is None:
            info, _queues = self._transport.describe_topic(name)
            with self._lock:
                route = self._routes[name] = info
        return route

    def queue_for(self, message: Message) -> tuple[TopicInfo, int]:
        """The route of a message's topic and the message's queue."""
        route = self.topic(message.topic)
        if message.queue_id is not None:
            if not 0 <= message.queue_id < route.queue_count:
                raise _no_such_queue(route, message.queue_id, "the message")
            return route, message.queue_id
        if self.by_keys and message.keys:
            return route, key_hash(message.keys) % route.queue_count
        return route, next(self._turns) % route.queue_count

    def row_queues(self, route: TopicInfo, rows: pa.RecordBatch, keys: pa.Array, lengths: np.ndarray,
                   batch_max_bytes: int) -> np.ndarray:
        """The queue of each row of ``rows`` (the columns as given: a ``queue_id`` column names
        the queues), by the rules of ``queue_for``; ``keys`` and ``lengths`` (of the bodies) are
        the rows', as strings and as numbers."""
        count = route.queue_count
        queue_ids = queue_id_column(rows)
        if queue_ids is not None:
            bad = np.flatnonzero((queue_ids < 0) | (queue_ids >= count))
            if len(bad):
                raise _no_such_queue(route, int(queue_ids[bad[0]]), f"row {int(bad[0])}")
            return queue_ids
        keyed = np.asarray(keys.is_valid(), dtype=bool) if self.by_keys and keys.null_count < len(keys) else None
        if keyed is None:
            return self._turn_queues(lengths, batch_max_bytes, count)
        queues = np.empty(len(lengths), dtype=np.int64)
        queues[keyed] = _key_hashes(keys.filter(pa.array(keyed))) % count
        if not keyed.all():
            queues[~keyed] = self._turn_queues(lengths[~keyed], batch_max_bytes, count)
        return queues

    def _turn_queues(self, lengths: np.ndarray, batch_max_bytes: int, count: int) -> np.ndarray:
        """Rows that take the queues in turn: a run of about ``batch_max_bytes`` per turn."""
        runs = (np.cumsum(lengths) - lengths) // batch_max_bytes
        first = self._take_turns(int(runs[-1]) + 1)
        return (first + runs) % count

    def _take_turns(self, turns: int) -> int:
        """Take ``turns`` turns of the counter that messages take one at a time; returns the first.
        (Another thread's message may take a turn in between: a queue then gets one more.)"""
        first = next(self._turns)
        if turns > 1:
            next(itertools.islice(self._turns, turns - 2, None))
        return first

    def forget(self, topic: str) -> None:
        """Drop a cached route (the topic was deleted or re-created)."""
        with self._lock:
            self._routes.pop(topic, None)


def queue_id_column(rows: pa.RecordBatch) -> np.ndarray | None:
    """The rows' ``queue_id`` column, checked, as int64; None without one."""
    if "queue_id" not in rows.schema.names:
        return None
    column = rows.column("queue_id")
    if not pa.types.is_integer(column.type):
        raise ConfigError(f"column 'queue_id' is {column.type}; use an integer type")
    if column.null_count:
        row = pc.index(pc.is_null(column), True).as_py()
        raise ConfigError(f"column 'queue_id' is null at row {row}: give every row a queue, or drop the column")
    return np.asarray(column, dtype=np.int64)


def _key_hashes(keys: pa.Array) -> np.ndarray:
    """``key_hash`` of each key (no nulls), hashing each distinct key once."""
    distinct = keys.dictionary_encode()
    hashes = np.fromiter((key_hash(key) for key in distinct.dictionary.to_pylist()), dtype=np.int64,
                         count=len(distinct.dictionary))
    return hashes[np.asarray(distinct.indices, dtype=np.int64)]


def _no_such_queue(route: TopicInfo, queue_id: int, who: str) -> QueueNotFoundError:
    return QueueNotFoundError(f"{who} names queue {queue_id}; topic {route.name!r} has queues 0 to "
                              f"{route.queue_count - 1}")
