"""Consumer groups' settings that change how they consume (RocketMQ's SubscriptionGroupConfig):
whether a group consumes orderly, its messages of one queue (one FIFO message group) one after
another. Groups need no creation; one created with ``consumeMessageOrderly`` (mqadmin
``updateSubGroup -o true``) is remembered in ``config/subscriptionGroup.json``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from broker_sim.common.files import write_atomically
from broker_sim.store import StoreError


class GroupTable:
    def __init__(self, path: Path):
        self._path = path
        self._lock = threading.Lock()
        self._orderly: set[str] = set()
        if path.exists():
            try:
                self._orderly = {name for name, config in json.loads(path.read_text()).items()
                                 if config.get("consumeMessageOrderly")}
            except (ValueError, AttributeError) as bad:
                raise StoreError(f"{path} is not the group table this broker writes ({bad}): restore it from a "
                                 "backup, or delete it (every group then consumes unordered)") from None

    def orderly(self, group: str) -> bool:
        return group in self._orderly

    def names(self) -> set[str]:
        """The groups with settings of their own."""
        return set(self._orderly)

    def update(self, group: str, orderly: bool) -> None:
        """Set the group's settings, written (atomically) before this returns."""
        with self._lock:
            wanted = self._orderly | {group} if orderly else self._orderly - {group}
            if wanted != self._orderly:
                table = {name: {"consumeMessageOrderly": True} for name in sorted(wanted)}
                write_atomically(self._path, json.dumps(table, indent=1).encode())
                self._orderly = wanted

    def forget(self, group: str) -> bool:
        """Drop the group's settings (it was deleted); whether it had any."""
        had = self.orderly(group)
        if had:
            self.update(group, False)
        return had


CONSUMER_EXPIRY_MS = 120_000  # RocketMQ's channelExpiredTimeout: a client unheard of this long is gone


class LiveConsumers:
    """The consumers of each group alive now, whichever door they came through: a client is
    seen at its heartbeat (remoting) or its pop, and is gone when it says so, its connection
    closes, or it has not been seen for ``expiry_ms``."""

    def __init__(self, expiry_ms: int = CONSUMER_EXPIRY_MS, clock_ms=lambda: time.monotonic() * 1000):
        self.expiry_ms = expiry_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, float]] = {}  # group -> client -> when last seen

    def seen(self, group: str, client: str) -> None:
        now = self._clock_ms()
        with self._lock:
            clients = self._seen.setdefault(group, {})
            if client not in clients:  # a new one: the expired ones go (clients that come and go do not pile up)
                for gone in [c for c, at in clients.items() if at < now - self.expiry_ms]:
                    del clients[gone]
            clients[client] = now

    def gone(self, group: str, client: str) -> None:
        with self._lock:
            clients = self._seen.get(group, {})
            clients.pop(client, None)
            if not clients:
                self._seen.pop(group, None)

    def forget(self, group: str) -> None:
        """The group was deleted: its consumers are seen again at their next heartbeat or pop."""
        with self._lock:
            self._seen.pop(group, None)

    def of(self, group: str) -> list[str]:
        """The group's clients seen within the expiry, sorted."""
        horizon = self._clock_ms() - self.expiry_ms
        with self._lock:
            clients = self._seen.get(group, {})
            for client in [c for c, at in clients.items() if at < horizon]:
                del clients[client]
            return sorted(clients)

    def groups(self) -> list[str]:
        with self._lock:
            names = list(self._seen)
        return [group for group in names if self.of(group)]
