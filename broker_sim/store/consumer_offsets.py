"""Consumer group offsets (RocketMQ's ConsumerOffsetManager and its consumerOffset.json).

Per group, topic and queue: the committed next offset to consume, the group's durable progress
(its lag, and where it restarts). Commits change memory only; the table is written to disk on
an interval (RocketMQ's flushConsumerOffsetInterval, 5 s), on close, and when a deleted topic's
offsets are removed, atomically (a temporary file, fsync, rename, directory fsync), so the file
on disk is always one whole version. A crash loses at most the commits of the last interval, as
RocketMQ's. Once written, the file's absence at a start is a loss, not a new broker
(state_marks.py).

The file has RocketMQ's shape::

    {"offsetTable": {"topic@group": {"0": 12, "1": 40}}}

(group and topic names cannot hold '@').
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Iterable

from broker_sim.common.files import write_atomically
from broker_sim.common.service_thread import ServiceThread
from broker_sim.store.errors import StoreError
from broker_sim.store.state_marks import MISSING, StateMarks

DEFAULT_FLUSH_INTERVAL_MS = 5000
SEPARATOR = "@"


class ConsumerOffsetTable:
    """The committed offsets of every consumer group, loaded from ``path`` at open.

    ``flush_interval_ms`` None: no background writer (call ``flush()``); ``close()`` writes
    what changed since the last write either way. With ``marks`` (state_marks.py), a missing
    file that was written before is refused (StateLossError) unless the loss is accepted.
    """

    def __init__(self, path, flush_interval_ms: int | None = DEFAULT_FLUSH_INTERVAL_MS,
                 marks: StateMarks | None = None):
        self.path = Path(path)
        self._marks = marks
        self._lock = threading.Lock()  # the table
        self._write_lock = threading.Lock()  # one writer of the file at a time
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}  # group -> (topic, queue) -> offset
        self._version = 0  # bumped by each change
        self._written = 0  # the version on disk
        self._closed = False
        self._load()
        self._flusher = None
        if flush_interval_ms is not None:
            if flush_interval_ms < 1:
                raise ValueError(f"flush_interval_ms={flush_interval_ms}: must be positive")
            self._flusher = ServiceThread("rmq-offsets-flusher", flush_interval_ms / 1000, self._flush_on_interval,
                                          task=f"writing consumer offsets to {self.path}")
            self._flusher.start()

    # --- the table ---------------------------------------------------------------------------

    def commit(self, group: str, offsets: Iterable[tuple[str, int, int]]) -> None:
        """Set the next offset of each (topic, queue id, offset) for ``group``; all or none."""
        entries = [(topic, queue_id, offset) for topic, queue_id, offset in offsets]
        problem = _group_problem(group) or next(filter(None, (_entry_problem(*e) for e in entries)), None)
        if problem:
            raise ValueError(problem)
        with self._lock:
            if self._closed:
                raise StoreError("the consumer offset table is closed")
            table = self._offsets.setdefault(group, {})
            for topic, queue_id, offset in entries:
                table[(topic, queue_id)] = offset
            self._version += 1

    def query(self, group: str, topics: Iterable[str] | None = None) -> list[tuple[str, int, int]]:
        """(topic, queue id, offset) committed by ``group``, sorted; only of ``topics`` if given.
        A group that committed nothing has none."""
        wanted = None if topics is None else set(topics)
        with self._lock:
            table = self._offsets.get(group, {})
            return sorted((topic, queue_id, offset) for (topic, queue_id), offset in table.items()
                          if wanted is None or topic in wanted)

    def groups(self) -> list[str]:
        """The groups that committed offsets, sorted."""
        with self._lock:
            return sorted(group for group, table in self._offsets.items() if table)

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic`` (it was deleted); returns how many.

        Written at once, not at the next interval: offsets of a deleted topic that came back
        after a crash would make its groups skip the messages of a topic created again."""
        return self._remove(lambda name: name == topic)

    def remove_group(self, group: str) -> int:
        """Forget every offset ``group`` committed (the group was deleted); returns how many.
        Written at once: offsets that came back after a crash would make a group made again
        under the name skip messages."""
        with self._lock:
            removed = len(self._offsets.pop(group, {}))
            if removed:
                self._version += 1
        if removed:
            self.flush()
        return removed

    def keep_topics(self, topics: set[str]) -> int:
        """Forget every group's offsets of topics not in ``topics`` (deleted by a delete that a
        crash cut short before its offsets were removed); returns how many."""
        return self._remove(lambda name: name not in topics)

    def _remove(self, gone) -> int:
        removed = 0
        with self._lock:
            for table in self._offsets.values():
                for key in [key for key in table if gone(key[0])]:
                    del table[key]
                    removed += 1
            for group in [group for group, table in self._offsets.items() if not table]:
                del self._offsets[group]
            if removed:
                self._version += 1
        if removed:
            self.flush()
        return removed

    # --- persistence -------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write the table if it changed since the last write; True when it was written."""
        with self._write_lock:
            with self._lock:
                version = self._version
                if version == self._written:
                    return False
                table: dict[str, dict[str, int]] = {}
                for group, offsets in self._offsets.items():
                    for (topic, queue_id), offset in offsets.items():
                        table.setdefault(f"{topic}{SEPARATOR}{group}", {})[str(queue_id)] = offset
                data = {"offsetTable": table}
                groups = sum(1 for offsets in self._offsets.values() if offsets)
            write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
            self._written = version
            if self._marks is not None:
                self._marks.mark(self.path, 1, groups)  # from now on, its absence is a loss
            return True

    def close(self) -> None:
        """Stop the background writer and write what changed; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._flusher is not None:
            self._flusher.stop()
        self.flush()

    def _flush_on_interval(self) -> None:
        self.flush()  # without its answer: ServiceThread would take it for the next wait

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            if self._marks is not None and self._marks.generation(self.path):
                groups = self._marks.count(self.path)
                held = "how many groups it held is not known" if groups is None else \
                    f"{groups} group{'' if groups == 1 else 's'} had offsets at its last write"
                self._marks.lost(self.path, MISSING, f"that every consumer group's committed offsets are gone "
                                 f"({held}), so each group would restart from its initial position, consuming "
                                 "again or skipping what it had not consumed",
                                 "every group starts with no committed offset")
            return
        if self._marks is not None:
            self._marks.mark(self.path, 1)
        try:
            table = json.loads(raw)["offsetTable"]
            for key, queues in table.items():
                topic, _, group = key.rpartition(SEPARATOR)
                if not topic or not group:
                    raise ValueError(f"key {key!r} is not topic@group")
                for queue_id, offset in queues.items():
                    self._offsets.setdefault(group, {})[(topic, int(queue_id))] = int(offset)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise StoreError(f"consumer offsets file {self.path} is damaged ({err}); restore it from a backup, "
                             "or move it away and start with --accept-state-loss to start every group afresh") from err

    def __enter__(self) -> "ConsumerOffsetTable":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _group_problem(group) -> str | None:
    if not isinstance(group, str) or not group:
        return "the consumer group name is empty"
    if SEPARATOR in group:
        return f"consumer group {group!r} contains '@'"
    return None


def _entry_problem(topic, queue_id, offset) -> str | None:
    if not isinstance(topic, str) or not topic or SEPARATOR in topic:
        return f"topic {topic!r}: not a topic name"
    if not isinstance(queue_id, int) or queue_id < 0:
        return f"queue id {queue_id!r} of topic {topic!r}: must be 0 or more"
    if not isinstance(offset, int) or offset < 0:
        return f"offset {offset!r} of topic {topic!r} queue {queue_id}: must be 0 or more"
    return None

