"""Topics: name, queue count, queue type and permission, persisted as JSON.

The queue type is fixed at creation; the queue count and the permission (RocketMQ's PermName
bits: 4 read, 2 write) change by ``update``, as RocketMQ's updateTopic changes them. Fewer
queues leave the queues past the count unserved (``queues_kept`` remembers how many hold data):
their indexes stay, so their offsets go on where they stopped when the count grows back.

A topic also records the commitlog offset at its creation (``created_at_offset``): records of
an earlier topic of the same name (deleted since) all lie below it, and the dispatcher skips
them, so a topic deleted and created again never gets the old records back, not even when
recovery re-dispatches the log. topics.json files written before this field load it as 0.

The table is a snapshot, ``topics.json``, and a journal beside it, ``topics.journal``: a
creation, update or deletion appends one JSON line to the journal and syncs it, so its cost does not
grow with the number of topics. When the journal holds more lines than the snapshot has
topics (and at close), the table is written as a new snapshot (atomically, by rename) and the
journal emptied. Loading replays the journal over the snapshot; a torn last line (a crash
while it was written: never acknowledged) is dropped. A topics.json of an older broker loads
as it is, with no journal; a topic written without ``perm`` reads as 6 (read and write).
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import logging
import os
import re
import threading
from dataclasses import dataclass, field
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
# RocketMQ's PermName bits of a topic.
PERM_WRITE = 2
PERM_READ = 4
PERM_READ_WRITE = PERM_READ | PERM_WRITE
PERMS = (PERM_WRITE, PERM_READ, PERM_READ_WRITE)  # what a topic may have here (mqadmin's "2|4|6")
_INCARNATIONS = itertools.count(1)


@dataclass(frozen=True)
class TopicConfig:
    """A topic's settings. ``queue_count`` queues are served (sent to, read, routed);
    ``queues_kept`` (0: as many) is how many hold data, more after an update lowered the count:
    the store keeps indexing and holding those. ``incarnation`` tells the topic from another of
    the same name made after a deletion (an update keeps it): compare with ``same_topic``."""

    name: str
    queue_count: int
    queue_type: QueueType
    created_at_offset: int = 0  # the commitlog's end when the topic was created
    perm: int = PERM_READ_WRITE
    queues_kept: int = 0
    incarnation: int = field(default_factory=lambda: next(_INCARNATIONS), compare=False, repr=False)

    @property
    def stored_queues(self) -> int:
        """The queues whose messages the store keeps and indexes: served or not."""
        return max(self.queue_count, self.queues_kept)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def same_topic(config: TopicConfig | None, other: TopicConfig | None) -> bool:
    """Whether two configs are of one topic: the same creation, maybe updated since (not one
    deleted and made again under the name)."""
    return config is not None and other is not None and config.incarnation == other.incarnation


def perm_problem(perm) -> str | None:
    """Why ``perm`` cannot be a topic's permission, or None."""
    if perm not in PERMS:
        return f"perm {perm!r}: use 2 (write only), 4 (read only) or 6 (read and write), RocketMQ's PermName bits"
    return None


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

    def create(self, name: str, queue_count: int, queue_type, created_at_offset: int = 0,
               perm: int = 0) -> tuple[CreateStatus, str]:
        """Create a topic; ``perm`` 0: read and write (and a topic that exists has the same
        settings whatever its perm), another: the new topic's, which one that exists must have."""
        problem = creation_problem(name, queue_count, queue_type) or (perm_problem(perm) if perm else None)
        if problem:
            return CreateStatus.INVALID, problem
        queue_type = QueueType.parse(queue_type)
        with self._lock:
            existing = self._topics.get(name)
            if existing:
                if (existing.queue_count, existing.queue_type) == (queue_count, queue_type) \
                        and perm in (0, existing.perm):
                    return CreateStatus.ALREADY_EXISTS, f"topic {name!r} already exists with the same settings"
                return CreateStatus.CONFLICT, (
                    f"topic {name!r} exists with {existing.queue_count} queues of type {existing.queue_type.value} "
                    f"and perm {existing.perm}; the queue type is fixed at creation (delete the topic first or use "
                    "another name), the queue count and perm change by an update of the topic"
                )
            config = TopicConfig(name, queue_count, queue_type, created_at_offset, perm or PERM_READ_WRITE)
            self._append({"create": _to_json(config)})
            self._topics[name] = config
            self._compact_if_long()
            return CreateStatus.CREATED, ""

    def update(self, name: str, queue_count: int = 0, perm: int = 0) -> tuple[TopicConfig | None, str]:
        """Change a topic's queue count and perm (0: as it is), journaled before it is made;
        (the topic as it is now, "") or (None, what was wrong). Fewer queues keep the queues
        past the count (``queues_kept``); more serve the kept ones again first."""
        if queue_count and (not isinstance(queue_count, int) or not 1 <= queue_count <= MAX_QUEUES):
            return None, f"queue count {queue_count!r}: use 1 to {MAX_QUEUES}"
        if perm and perm_problem(perm):
            return None, perm_problem(perm)
        with self._lock:
            existing = self._topics.get(name)
            if existing is None:
                return None, unknown_topic(name, self)
            count = queue_count or existing.queue_count
            kept = max(existing.stored_queues, count)
            config = dataclasses.replace(existing, queue_count=count, perm=perm or existing.perm,
                                         queues_kept=kept if kept > count else 0)
            if config != existing:
                self._append({"update": _to_json(config)})
                self._topics[name] = config
                self._compact_if_long()
            return self._topics[name], ""

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
            if "create" in entry or "update" in entry:
                config = _from_json(entry.get("create") or entry["update"])
                existing = topics.get(config.name)
                if "update" in entry and existing is not None:  # the same topic: its incarnation stays
                    config = dataclasses.replace(config, incarnation=existing.incarnation)
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
    perm = int(item.get("perm", PERM_READ_WRITE))
    if perm_problem(perm):
        raise ValueError(perm_problem(perm))
    return TopicConfig(item["name"], item["queue_count"], QueueType(item["queue_type"]),
                       int(item.get("created_at_offset", 0)), perm, int(item.get("queues_kept", 0)))


def _to_json(topic: TopicConfig) -> dict:
    item = {"name": topic.name, "queue_count": topic.queue_count, "queue_type": topic.queue_type.value}
    # Defaults are left out: such files read the same everywhere (a broker before perm reads them too).
    if topic.created_at_offset:
        item["created_at_offset"] = topic.created_at_offset
    if topic.perm != PERM_READ_WRITE:
        item["perm"] = topic.perm
    if topic.queues_kept > topic.queue_count:
        item["queues_kept"] = topic.queues_kept
    return item
