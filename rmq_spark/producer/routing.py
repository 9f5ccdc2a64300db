"""Which queue a message goes to: topic routes (cached) and queue selectors."""

from __future__ import annotations

import itertools
import threading
import zlib

from ..client.transport import Transport
from ..errors import ConfigError, QueueNotFoundError
from ..structs import Message, TopicInfo

QUEUE_SELECTORS = ("hash", "round_robin")


class Router:
    """Topic routes (queue count and type), fetched once per topic, and the queue selector.

    ``hash``: messages with keys go to ``crc32(keys) % queues`` (the same keys, the same queue,
    in every process); messages without keys, and every message with ``round_robin``, take
    the queues in turn. A message's own ``queue_id`` wins over both.
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
        route = self.topic(message.topic)
        if message.queue_id is not None:
            if not 0 <= message.queue_id < route.queue_count:
                raise QueueNotFoundError(f"topic {route.name!r} has queues 0 to {route.queue_count - 1}; "
                                         f"there is no queue {message.queue_id}")
            return route, message.queue_id
        if self.by_keys and message.keys:
            return route, zlib.crc32(message.keys.encode()) % route.queue_count
        return route, next(self._turns) % route.queue_count

    def next_turn(self) -> int:
        """The next turn of the round robin (a count; take it modulo the queue count)."""
        return next(self._turns)

    def forget(self, topic: str) -> None:
        """Drop a cached route (the topic was deleted or re-created)."""
        with self._lock:
            self._routes.pop(topic, None)
