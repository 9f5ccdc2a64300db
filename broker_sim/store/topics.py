"""Topics: name, queue count and queue type, fixed at creation and persisted as JSON.

A topic also records the commitlog offset at its creation (``created_at_offset``): records of
an earlier topic of the same name (deleted since) all lie below it, and the dispatcher skips
them, so a topic deleted and created again never gets the old records back, not even when
recovery re-dispatches the log. topics.json files written before this field load it as 0.

The table is a snapshot, ``topics.json``, and a journal beside it, ``topics.journal``: a
creation or deletion appends one JSON line to the journal and syncs it, so its cost does not
grow with the number of topics. When the journal holds more lines than the snapshot has
topics (and at close), the table is written as a new snapshot (atomically, by rename) and the
journal emptied. Loading replays the journal over the snapshot; a torn last line (a crash
while it was written: never acknowledged) is dropped. A topics.json of an older broker loads
as it is, with no journal.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from broker_sim.common.files import fsync_dir, write_atomically
from broker_sim.store.errors import StoreError, echo
from broker_sim.store.status import CreateStatus
from rmq_wire import record as fmt
from rmq_wire.types import QueueType  # noqa: F401  (the store's topics are of these types)

log = logging.getLogger(__name__)

# RocketMQ's characters, and '+' of pop retry topics (%RETRY%{group}+{topic}).
TOPIC_NAME = re.compile(r"^[%|+a-zA-Z0-9_-]+$")
MAX_QUEUES = 65536
MIN_JOURNAL_LINES = 1024  # a journal this long is compacted, at the least


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queue_count: int
    queue_type: QueueType
    created_at_offset: int = 0  # the commitlog's end when the topic was created


def creation_problem(name: str, queue_count: int, queue_type) -> str | None:
    """What makes a topic's settings invalid, as a sentence; None when they are valid."""
    problem = topic_name_problem(name)
    if problem:
        return problem
    if not isinstance(queue_count, int) or not 1 <= queue_count <= MAX_QUEUES:
        return f"queue count {queue_count!r}: use 1 to {MAX_QUEUES}"
    try:
        QueueType.parse(queue_type)
    except ValueError as err:
        return str(err)
    return None


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a topic name, or None when it can."""
    if not name:
        return "the topic name is empty"
    if len(name.encode()) > fmt.MAX_TOPIC_BYTES:
        return f"topic name {echo(name)} is longer than {fmt.MAX_TOPIC_BYTES} bytes"
    if not TOPIC_NAME.match(name):
        return f"topic name {name!r} may only use letters, digits, '%', '|', '+', '_' and '-'"
    return None


def system_topic_problem(name: str, action: str) -> str | None:
    """Why a client may not ``action`` ("create", "delete") topic ``name``, or None: retry and
    DLQ topics belong to pop, which makes them on first use; one a client made or removed would
    take a group's retries or lose its dead letters."""
    if name == fmt.SCHEDULE_TOPIC:
        return (f"cannot {action} topic {echo(name)}: it holds delayed messages until their time, and the broker "
                "makes and keeps it; name your topic otherwise")
    if name == fmt.SINK_TOPIC:
        return (f"cannot {action} topic {echo(name)}: it records the committed sink batches of exactly-once "
                "writers, and the broker makes and keeps it; name your topic otherwise")
    if name == fmt.AUTO_CREATE_TOPIC:
        return (f"cannot {action} topic {echo(name)}: it stands for the topics a first send creates "
                "(autoCreateTopicEnable), and the broker makes and keeps it; name your topic otherwise")
    if name.startswith((fmt.RETRY_TOPIC_PREFIX, fmt.DLQ_TOPIC_PREFIX)):
        return (f"cannot {action} topic {echo(name)}: names starting with {fmt.RETRY_TOPIC_PREFIX} or "
                f"{fmt.DLQ_TOPIC_PREFIX} are pop's retry and dead letter topics, which the broker makes and keeps; "
                "name your topic otherwise")
    return None


class TopicTable:
    """The topics of one data directory: a snapshot at ``path`` and a journal at ``journal_path``,
    to which every change is appended (and synced) before it is made."""

    def __init__(self, path: Path, journal_path: Path):
        self.path = path
        self.journal_path = journal_path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = _read_snapshot(path)
        self._journal_lines = _replay_journal(self.journal_path, self._topics)
        self._journal_fd: int | None = None  # opened at the first change

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def create(self, name: str, queue_count: int, queue_type, created_at_offset: int = 0) -> tuple[CreateStatus, str]:
        problem = creation_problem(name, queue_count, queue_type)
        if problem:
            return CreateStatus.INVALID, problem
        queue_type = QueueType.parse(queue_type)
        with self._lock:
            existing = self._topics.get(name)
            if existing:
                if (existing.queue_count, existing.queue_type) == (queue_count, queue_type):
                    return CreateStatus.ALREADY_EXISTS, f"topic {name!r} already exists with the same settings"
                return CreateStatus.CONFLICT, (
                    f"topic {name!r} exists with {existing.queue_count} queues of type {existing.queue_type.value}; "
                    "queue count and type are fixed at creation: delete the topic first or use another name"
                )
            config = TopicConfig(name, queue_count, queue_type, created_at_offset)
            self._append({"create": _to_json(config)})
            self._topics[name] = config
            self._compact_if_long()
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
                self._compact()
            return changed

    def delete(self, name: str) -> bool:
        with self._lock:
            if name not in self._topics:
                return False
            self._append({"delete": name})
            del self._topics[name]
            self._compact_if_long()
            return True

    def close(self) -> None:
        """Fold the journal into the snapshot (a clean data directory has topics.json alone)."""
        with self._lock:
            if self._journal_lines:
                self._compact_or_keep_journal()
            if self._journal_fd is not None:
                os.close(self._journal_fd)
                self._journal_fd = None

    def _append(self, entry: dict) -> None:
        """Append ``entry`` to the journal, durably; on a failure the journal is as before."""
        if self._journal_fd is None:
            self.journal_path.parent.mkdir(parents=True, exist_ok=True)
            self._journal_fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            fsync_dir(self.journal_path.parent)
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        size = os.fstat(self._journal_fd).st_size
        try:
            if os.write(self._journal_fd, line) != len(line):
                raise OSError(errno.ENOSPC, f"no space left to append to {self.journal_path}")
            os.fdatasync(self._journal_fd)
        except OSError:
            os.ftruncate(self._journal_fd, size)  # no partial line is left for a later one to follow
            raise
        self._journal_lines += 1

    def _compact_if_long(self) -> None:
        """Compact once the journal costs more to replay than the snapshot to write (amortized:
        a change costs O(1) writes, whatever the number of topics)."""
        if self._journal_lines > max(MIN_JOURNAL_LINES, len(self._topics)):
            self._compact_or_keep_journal()

    def _compact_or_keep_journal(self) -> None:
        """Compact; when the disk refuses, the synced journal still holds every change."""
        try:
            self._compact()
        except OSError as err:
            log.warning("cannot compact %s into %s (%s); the journal keeps the changes", self.journal_path,
                        self.path, err)

    def _compact(self) -> None:
        """Write the table as a new snapshot, then empty the journal (replaying it over the new
        snapshot, as after a crash in between, gives the same table)."""
        data = {"topics": [_to_json(t) for t in self.all()]}
        write_atomically(self.path, json.dumps(data, indent=1).encode())
        if self._journal_fd is not None:
            os.ftruncate(self._journal_fd, 0)
            os.fdatasync(self._journal_fd)
        elif self.journal_path.exists():
            os.truncate(self.journal_path, 0)
        self._journal_lines = 0


def unknown_topic(name: str, topics: TopicTable) -> str:
    """The sentence for a topic that does not exist: the topics that do, and what to do."""
    names = [t.name for t in topics.all()]
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"topic {echo(name)} does not exist; existing topics: {shown or 'none'}. Create it first"


def _read_snapshot(path: Path) -> dict[str, TopicConfig]:
    if not path.exists():
        return {}
    try:
        return {c.name: c for c in map(_from_json, json.loads(path.read_text())["topics"])}
    except (ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{path} is not a topic table ({type(err).__name__}: {err}); restore it from a "
                              "backup, or move it away to start with no topics") from err


def _replay_journal(path: Path, topics: dict[str, TopicConfig]) -> int:
    """Apply the journal's changes to ``topics``; the number of lines. A torn last line is cut off."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    good_bytes = 0
    for number, line in enumerate(lines[:-1], 1):
        try:
            entry = json.loads(line)
            if "create" in entry:
                config = _from_json(entry["create"])
                topics[config.name] = config
            else:
                topics.pop(entry["delete"], None)
        except (ValueError, KeyError, TypeError) as err:
            if number < len(lines) - 1:
                raise StoreError(f"line {number} of {path} is damaged ({type(err).__name__}: {err}) and later "
                                      "changes follow it; restore the file from a backup, or fix or remove the "
                                      "line") from err
            break  # the last line, torn by a crash in its write (a full line with garbage: on a power loss)
        good_bytes += len(line) + 1
    if good_bytes < len(data):
        os.truncate(path, good_bytes)  # later lines must not follow the torn one
    return data.count(b"\n", 0, good_bytes)


def _from_json(item: dict) -> TopicConfig:
    return TopicConfig(item["name"], item["queue_count"], QueueType(item["queue_type"]),
                       int(item.get("created_at_offset", 0)))


def _to_json(topic: TopicConfig) -> dict:
    item = {"name": topic.name, "queue_count": topic.queue_count, "queue_type": topic.queue_type.value}
    if topic.created_at_offset:  # 0, the default, is left out: such files read the same everywhere
        item["created_at_offset"] = topic.created_at_offset
    return item
