"""Topics: name, queue count and queue type, fixed at creation and persisted as JSON.

A topic also records the commitlog offset at its creation (``created_at_offset``): records of
an earlier topic of the same name (deleted since) all lie below it, and the dispatcher skips
them, so a topic deleted and created again never gets the old records back, not even when
recovery re-dispatches the log. topics.json files written before this field load it as 0.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from . import format as fmt
from .mapped_file import fsync_dir
from .status import CreateStatus

# RocketMQ's characters, and '+' of pop retry topics (%RETRY%{group}+{topic}).
TOPIC_NAME = re.compile(r"^[%|+a-zA-Z0-9_-]+$")
MAX_QUEUES = 65536


class QueueType(str, enum.Enum):
    BATCH_CQ = "BatchCQ"
    SIMPLE_CQ = "SimpleCQ"

    @classmethod
    def parse(cls, value: "QueueType | str") -> "QueueType":
        for member in cls:
            if value == member or str(value).lower() == member.value.lower():
                return member
        raise ValueError(f"unknown queue type {value!r}; use BatchCQ or SimpleCQ")


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queue_count: int
    queue_type: QueueType
    created_at_offset: int = 0  # the commitlog's end when the topic was created


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a topic name, or None when it can."""
    if not name:
        return "the topic name is empty"
    if len(name.encode()) > fmt.MAX_TOPIC_BYTES:
        return f"topic name {name[:40]!r}... is longer than {fmt.MAX_TOPIC_BYTES} bytes"
    if not TOPIC_NAME.match(name):
        return f"topic name {name!r} may only use letters, digits, '%', '|', '+', '_' and '-'"
    return None


class TopicTable:
    """The topics of one data directory, saved to ``path`` on every change (atomically)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        if path.exists():
            for item in json.loads(path.read_text())["topics"]:
                config = TopicConfig(item["name"], item["queue_count"], QueueType(item["queue_type"]),
                                     int(item.get("created_at_offset", 0)))
                self._topics[config.name] = config

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def create(self, name: str, queue_count: int, queue_type, created_at_offset: int = 0) -> tuple[CreateStatus, str]:
        problem = topic_name_problem(name)
        if problem:
            return CreateStatus.INVALID, problem
        if not isinstance(queue_count, int) or not 1 <= queue_count <= MAX_QUEUES:
            return CreateStatus.INVALID, f"queue count {queue_count!r}: use 1 to {MAX_QUEUES}"
        try:
            queue_type = QueueType.parse(queue_type)
        except ValueError as err:
            return CreateStatus.INVALID, str(err)
        with self._lock:
            existing = self._topics.get(name)
            if existing:
                if (existing.queue_count, existing.queue_type) == (queue_count, queue_type):
                    return CreateStatus.ALREADY_EXISTS, f"topic {name!r} already exists with the same settings"
                return CreateStatus.CONFLICT, (
                    f"topic {name!r} exists with {existing.queue_count} queues of type {existing.queue_type.value}; "
                    "queue count and type are fixed at creation: delete the topic first or use another name"
                )
            self._topics[name] = TopicConfig(name, queue_count, queue_type, created_at_offset)
            try:
                self._save()
            except BaseException:  # a full disk: no topic that a restart would forget, with its messages
                del self._topics[name]
                raise
            return CreateStatus.CREATED, ""

    def clamp_created_at(self, tail: int) -> list[str]:
        """Lower ``created_at_offset`` to ``tail`` where it is above it (recovery cut the log
        below a topic's creation point: records appended from the new tail on are the topic's
        own). Returns the names changed."""
        with self._lock:
            changed = [t.name for t in self._topics.values() if t.created_at_offset > tail]
            for name in changed:
                self._topics[name] = dataclasses.replace(self._topics[name], created_at_offset=tail)
            if changed:
                self._save()
            return changed

    def delete(self, name: str) -> bool:
        with self._lock:
            if self._topics.pop(name, None) is None:
                return False
            self._save()
            return True

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"topics": [_to_json(t) for t in self.all()]}
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump(data, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)


def _to_json(topic: TopicConfig) -> dict:
    item = {"name": topic.name, "queue_count": topic.queue_count, "queue_type": topic.queue_type.value}
    if topic.created_at_offset:  # 0, the default, is left out: such files read the same everywhere
        item["created_at_offset"] = topic.created_at_offset
    return item
