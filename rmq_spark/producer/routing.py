"""Which queue a message or an Arrow row goes to: topic routes (cached) and the queue choice.

One set of rules for both ways of sending (``Producer.send`` and ``Producer.send_arrow``):

- an explicit queue wins: a message's ``queue_id``, a row's ``queue_id`` column (with its
  ``broker`` / ``broker`` column where the topic is served by several brokers);
- with the ``hash`` selector, what has keys goes to ``key_hash(keys) % queues`` (the same keys,
  the same queue, in every process and on both paths);
- the rest takes the queues in turn, from one counter: a batch is a turn (AutoBatch fills a
  batch of such messages on one queue, then takes the next: RocketMQ's AutoBatch chooses the
  queue per batch, Kafka's sticky partitioner per batch too), a message sent alone is a turn,
  and so is a run of about ``batch_max_bytes`` of rows (rows go to a queue a batch at a time).
  Each producer's counter starts at a random place, as RocketMQ's producers' do: many producers
  that each send a batch or two (Spark's write tasks) spread over every queue of every broker
  instead of all starting at the first.

A topic's queues are listed as (broker, queue id), broker by broker (the broker "" through our
door, where there is one): the hash and the turns pick a place in that list, as RocketMQ's
producers pick from a topic's message queues.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
import zlib
from typing import Callable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.client.transport import Transport
from rmq_spark.errors import ConfigError, PermissionDeniedError, QueueNotFoundError, RmqError, TopicNotFoundError
from rmq_spark.structs import PERM_WRITE, Message, TopicInfo, perm_text

log = logging.getLogger(__name__)

QUEUE_SELECTORS = ("hash", "round_robin")


def key_hash(keys: str) -> int:
    """The hash that places keys: ``key_hash(keys) % queues`` (crc32 of their UTF-8, stable
    across processes, unlike ``hash()``)."""
    return zlib.crc32(keys.encode())


class Route(NamedTuple):
    """A topic as the producer sends to it: its info, its queues ((broker, queue id) each), and
    where each broker's queues are in that list (``brokers``: {broker: (place of its queue 0,
    queue count)}, in order)."""

    info: TopicInfo
    queues: list
    brokers: dict

    @classmethod
    def of(cls, info: TopicInfo) -> "Route":
        queues = info.queues
        brokers: dict = {}
        for place, (broker, _queue_id) in enumerate(queues):
            first, count = brokers.get(broker, (place, 0))
            brokers[broker] = (first, count + 1)
        return cls(info, queues, brokers)

    @property
    def name(self) -> str:
        return self.info.name


class Router:
    """Topic routes (queues and type), fetched once per topic, and the queue selector.

    ``hash``: messages and rows with keys go to ``key_hash(keys) % queues``; those without
    keys, and everything with ``round_robin``, take the queues in turn (a batch at a time). An explicit queue (a
    message's ``queue_id``, a ``queue_id`` column) wins over both. Queues are places in the
    route's list of (broker, queue id).
    """

    def __init__(self, transport: Transport, selector: str = "hash", wait_ms: float = 0,
                 sleep: Callable[[float], None] = time.sleep):
        if selector not in QUEUE_SELECTORS:
            raise ConfigError(f"queue_selector={selector!r}: use one of {', '.join(QUEUE_SELECTORS)}")
        self._transport = transport
        self.wait_ms = wait_ms  # how long a route is waited for while its brokers cannot be reached
        self._sleep = sleep
        self.by_keys = selector == "hash"
        self._routes: dict[str, Route] = {}
        self._turns = itertools.count(random.randrange(1 << 16))  # RocketMQ's producers start at random too
        self._lock = threading.Lock()

    def topic(self, name: str) -> TopicInfo:
        return self.route(name).info

    def route(self, name: str) -> Route:
        """The topic's route; for a topic that does not exist, the queues a first send creates it
        with where the broker makes topics so (``Transport.new_topic``), else TopicNotFoundError.
        While its brokers cannot be reached (a retriable failure: restarting, say) it is asked
        again, with the transport's backoff, for ``wait_ms`` (Kafka's producer waits for a
        topic's metadata the same way, for max.block.ms)."""
        route = self._routes.get(name)
        if route is not None:
            return route
        deadline = time.monotonic() + self.wait_ms / 1000
        attempt = 0
        while True:
            try:
                info = self._described(name)
                break
            except RmqError as error:
                backoff_s = self._transport.backoff_s(min(attempt, 5))
                if not error.retriable or time.monotonic() + backoff_s > deadline:
                    raise
                if not attempt:
                    log.warning("topic %s: its brokers cannot be reached (%s); asked again for up to %.0f s", name,
                                error, self.wait_ms / 1000)
                self._sleep(backoff_s)
                attempt += 1
        with self._lock:
            route = self._routes[name] = Route.of(info)
        return route

    def _described(self, name: str) -> TopicInfo:
        try:
            info, _queues = self._transport.describe_topic(name)
        except TopicNotFoundError:
            info = self._transport.new_topic(name)
            if info is None:
                raise
        if not info.perm & PERM_WRITE:  # as RocketMQ's producers find no writable queue in such a route
            raise PermissionDeniedError(f"topic {name!r} takes no sends: its permission is {perm_text(info.perm)!r} "
                                        f"(read only); an admin opens it with rmq-admin topic update {name} --perm rw")
        return info

    def queue_for(self, message: Message) -> tuple[str, int]:
        """The (broker, queue id) a message goes to."""
        return self.placed_queue(message) or self.next_queue(message.topic)

    def placed_queue(self, message: Message) -> tuple[str, int] | None:
        """The queue a message names or its keys choose; None for a message that takes a turn
        (its topic's route is known then, so that taking the turn needs no call)."""
        route = self.route(message.topic)
        if message.queue_id is not None:
            return route.queues[_slot_of(route, message.broker, message.queue_id, "the message")]
        if self.by_keys and message.keys:
            return route.queues[key_hash(message.keys) % len(route.queues)]
        return None

    def next_queue(self, topic: str) -> tuple[str, int]:
        """The next turn's queue of ``topic``."""
        queues = self.route(topic).queues
        return queues[next(self._turns) % len(queues)]

    def row_queues(self, route: Route, rows: pa.RecordBatch, keys: pa.Array, lengths: np.ndarray,
                   batch_max_bytes: int) -> np.ndarray:
        """The queue of each row of ``rows`` as a place in ``route.queues`` (the columns as
        given: ``queue_id`` and ``broker`` columns name the queues), by the rules of
        ``queue_for``; ``keys`` and ``lengths`` (of the bodies) are the rows', as strings and as
        numbers."""
        count = len(route.queues)
        queue_ids = queue_id_column(rows)
        if queue_ids is not None:
            return _named_slots(route, queue_ids, broker_column(rows))
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


def _slot_of(route: Route, broker: str | None, queue_id: int, who: str) -> int:
    """The place of (``broker``, ``queue_id``) in the route's queues; a queue id alone names a
    queue of the topic's only broker."""
    brokers = route.brokers
    if broker is None or broker == "":
        if len(brokers) > 1:
            raise QueueNotFoundError(f"{who} names queue {queue_id} without its broker, and topic {route.name!r} is "
                                     f"served by brokers {', '.join(brokers)}, each with a queue {queue_id}: name the "
                                     "broker too (Message.broker, a 'broker' column)")
        broker = next(iter(brokers))
    first, count = brokers.get(broker, (0, 0))
    if broker not in brokers or not 0 <= queue_id < count:
        raise _no_such_queue(route, queue_id, who, broker)
    return first + queue_id


def _named_slots(route: Route, queue_ids: np.ndarray, brokers: pa.Array | None) -> np.ndarray:
    """The places of rows' named queues (a ``queue_id`` column, and a ``broker`` one)."""
    known = route.brokers
    names = list(known)
    if brokers is None or (len(known) == 1 and brokers.null_count == len(brokers)):
        if len(known) > 1:
            raise QueueNotFoundError(f"the rows name queues without their broker, and topic {route.name!r} is "
                                     f"served by brokers {', '.join(names)}: add a 'broker' column")
        index = np.zeros(len(queue_ids), dtype=np.int64)
    else:
        encoded = brokers.dictionary_encode()
        mapping = np.array([names.index(b) if b in known else -1 for b in encoded.dictionary.to_pylist()]
                           + [-1], dtype=np.int64)
        index = mapping[np.asarray(encoded.indices.fill_null(len(encoded.dictionary)), dtype=np.int64)]
        unknown = np.flatnonzero(index < 0)
        if len(unknown):
            row = int(unknown[0])
            raise QueueNotFoundError(f"row {row} names broker {brokers[row].as_py()!r}; topic {route.name!r} is "
                                     f"served by {', '.join(names)}")
    firsts = np.array([known[n][0] for n in names], dtype=np.int64)[index]
    counts = np.array([known[n][1] for n in names], dtype=np.int64)[index]
    bad = np.flatnonzero((queue_ids < 0) | (queue_ids >= counts))
    if len(bad):
        row = int(bad[0])
        raise _no_such_queue(route, int(queue_ids[row]), f"row {row}", names[index[row]])
    return firsts + queue_ids


def broker_column(rows: pa.RecordBatch) -> pa.Array | None:
    """The rows' ``broker`` column (strings), or None."""
    if "broker" not in rows.schema.names:
        return None
    column = rows.column("broker")
    if not pa.types.is_string(column.type):
        raise ConfigError(f"column 'broker' is {column.type}; use string")
    return column


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


def _no_such_queue(route: Route, queue_id: int, who: str, broker: str = "") -> QueueNotFoundError:
    brokers = route.brokers
    if not broker:
        return QueueNotFoundError(f"{who} names queue {queue_id}; topic {route.name!r} has queues 0 to "
                                  f"{len(route.queues) - 1}")
    if broker not in brokers:
        return QueueNotFoundError(f"{who} names broker {broker!r}; topic {route.name!r} is served by "
                                  f"{', '.join(brokers)}")
    return QueueNotFoundError(f"{who} names queue {queue_id} of broker {broker!r}; topic {route.name!r} has queues "
                              f"0 to {brokers[broker][1] - 1} there")
