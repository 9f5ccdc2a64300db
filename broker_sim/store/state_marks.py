"""What state a data directory has had, so that a start can tell lost state from a fresh broker.

The consumer offsets file and the pop and transaction RocksDBs are created on demand: a start
that finds one missing cannot tell by itself whether the broker is new or the file was lost,
and RocksDB whose MANIFEST lost its last edits opens as an older (often empty) database without
a word. ``state.json`` in the data directory (written atomically) records, per state file, its
*generation*: the consumer offsets file gets 1 once it was first written (and the number of
groups it held at its last write, for the log of its loss); a RocksDB's counter
is bumped in the database itself (a synced write) and then here, at every open and at every
clean close (before the close flushes it). A start then refuses, with a sentence naming the
file and what to do, state that is missing while marked here, or a database whose counter is
below its mark (it lost writes). A database ahead of its mark is fine (a crash between the two
writes).

A new data directory has no ``state.json``: the marks start from what this start opens. One
without it beside stored data (a commitlog, offsets, pop or transaction state) lost it, and with
it every check above, so that deleting it with the offsets would bring acknowledged messages
back unnoticed: refused like the other lost state. A ``state.json`` that is not what this broker
writes (not JSON, other types, a directory) is refused with a sentence. With ``accept_loss``
(``--accept-state-loss``) nothing is refused: what was lost is logged, and the marks start again
from what is there.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from broker_sim.common.files import write_atomically
from broker_sim.store.errors import StoreError
from broker_sim.store.paths import StorePaths

log = logging.getLogger(__name__)

ACCEPT_FLAG = "--accept-state-loss"
MISSING = "is missing, though this data directory had it (state.json records it)"


class StateLossError(StoreError):
    """State the broker cannot trust was found at start: nothing was opened."""


class StateMarks:
    """``state.json`` of the data directory of ``paths``; ``accept_loss`` logs losses instead
    of refusing them."""

    def __init__(self, paths: StorePaths, accept_loss: bool = False):
        self.root = paths.root
        self.path = paths.state_marks
        self.accept_loss = accept_loss
        self._lock = threading.Lock()
        self._unsaved = False
        self._marks: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        try:
            saved = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            stored = _stored_state(paths)
            self._unsaved = True  # written at the first save, from what this start opens
            if stored:
                self.lost(self.path, f"is missing beside stored data ({', '.join(stored)})",
                          "no check of the consumer offsets and the pop and transaction state: a lost one would "
                          "go unnoticed (acknowledged messages delivered again)",
                          "the marks start again from what is there")
            return
        except (OSError, ValueError) as err:  # a directory in its place, unreadable, not JSON
            self._damaged(getattr(err, "strerror", None) or str(err))
            return
        problem = _marks_problem(saved)
        if problem:
            self._damaged(problem)
            return
        self._marks, self._counts = dict(saved["generations"]), dict(saved.get("counts", {}))

    @staticmethod
    def begin(paths: StorePaths) -> None:
        """Mark a new data directory (no ``state.json``, nothing stored) before anything is
        written in it, so that a first start that fails halfway leaves a directory the next one
        trusts (the message store calls it as it opens)."""
        if not paths.state_marks.exists() and not _stored_state(paths):
            write_atomically(paths.state_marks, json.dumps({"generations": {}, "counts": {}}).encode())

    def _damaged(self, why: str) -> None:
        if self.path.is_dir():  # nothing to accept: the file cannot be written there either
            raise StateLossError(f"{self.path} is a directory: the broker keeps a file of that name there, recording "
                                 "which state files this data directory has; move the directory away")
        if not self.accept_loss:
            raise StateLossError(f"{self.path} is damaged ({why}): it records which state files this data directory "
                                 "has, to tell lost state from a new broker. Restore it from a backup, or start with "
                                 f"{ACCEPT_FLAG} to check nothing at this start (the marks are written again)")
        log.error("%s is damaged (%s): accepted by %s: nothing is checked at this start; the marks are written "
                  "again", self.path, why, ACCEPT_FLAG)
        self._unsaved = True

    def generation(self, path: Path) -> int:
        """The generation marked for the state file ``path`` (0: never marked)."""
        with self._lock:
            return self._marks.get(self._name(path), 0)

    def count(self, path: Path) -> int | None:
        """What ``path`` held when last marked (consumer groups of the offsets file), if known."""
        with self._lock:
            return self._counts.get(self._name(path))

    def mark(self, path: Path, generation: int, count: int | None = None, *, save: bool = True) -> None:
        """Record ``generation`` for ``path``, and ``count`` (what it holds, for the log of a
        loss) if given; written at once when either changed, or with ``save`` False at the next
        ``save`` (a mark written late is only lower than its database: nothing is refused)."""
        name = self._name(path)
        with self._lock:
            if self._marks.get(name) == generation and (count is None or self._counts.get(name) == count):
                return
            self._marks[name] = generation
            if count is not None:
                self._counts[name] = count
            self._unsaved = True
            if save:
                self._save()

    def save(self) -> None:
        """Write the marks recorded with ``save`` False (one write for the databases of a start
        or a stop)."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        if self._unsaved:
            write_atomically(self.path, json.dumps({"generations": self._marks, "counts": self._counts}, indent=1,
                                                   sort_keys=True).encode())
            self._unsaved = False

    def lost(self, path: Path, problem: str, consequence: str, accepted: str) -> None:
        """State at ``path`` that cannot be trusted (``problem``: "is missing", "is damaged
        (...)"): refused with ``StateLossError``, or with ``accept_loss`` logged as lost
        (``consequence``) and taken as ``accepted`` says."""
        if not self.accept_loss:
            raise StateLossError(f"{path} {problem}: starting so would mean {consequence}. Restore it as the broker "
                                 f"left it (from a backup), or start with {ACCEPT_FLAG} to accept the loss "
                                 f"({accepted}; the loss is logged)")
        log.error("%s %s: accepted by %s: %s; %s", path, problem, ACCEPT_FLAG, consequence, accepted)

    def _name(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()


def _marks_problem(saved) -> str | None:
    """What is wrong with a state.json's content, or None: {"generations": {file: int}, "counts":
    {file: int}}."""
    if not isinstance(saved, dict) or not isinstance(saved.get("generations"), dict):
        return 'not {"generations": {...}}'
    for key in ("generations", "counts"):
        table = saved.get(key, {})
        if not isinstance(table, dict) or not all(isinstance(k, str) and type(v) is int for k, v in table.items()):
            return f"its {key} are not file names with whole numbers"
    return None


def _stored_state(paths: StorePaths) -> list[str]:
    """What of ``paths`` holds stored data: a commitlog segment, the consumer offsets, pop's or
    the transactions' state."""
    found = []
    if any(paths.commitlog.glob("[0-9]*")) if paths.commitlog.is_dir() else False:
        found.append("commitlog")
    for path in (paths.consumer_offsets, paths.pop, paths.txn):
        if path.exists():
            found.append(Path(path).relative_to(paths.root).as_posix())
    return found
