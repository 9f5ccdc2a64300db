"""Consumer groups' settings that change how they consume (RocketMQ's SubscriptionGroupConfig):
whether a group consumes orderly, its messages of one queue (one FIFO message group) one after
another. Groups need no creation; one created with ``consumeMessageOrderly`` (mqadmin
``updateSubGroup -o true``) is remembered in ``config/subscriptionGroup.json``."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from broker_sim.store import StoreError, write_atomically


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

    def update(self, group: str, orderly: bool) -> None:
        """Set the group's settings, written (atomically) before this returns."""
        with self._lock:
            wanted = self._orderly | {group} if orderly else self._orderly - {group}
            if wanted != self._orderly:
                table = {name: {"consumeMessageOrderly": True} for name in sorted(wanted)}
                write_atomically(self._path, json.dumps(table, indent=1).encode())
                self._orderly = wanted
