"""Opening and closing the broker's RocksDB databases (pop and transaction state) so that a start
never runs on lost state in silence, nor fails with a raw traceback.

RocksDB opens a database whose folder is gone as a new one, and one whose MANIFEST lost its last
edits as the older version it still describes (often empty; the files it no longer names are
deleted). Each database therefore keeps a generation counter (``GENERATION_KEY``), bumped by a
synced write at every open and at every clean close, and marked in the data directory's
``state.json`` after it (store/state_marks.py; the opener saves the marks once for all). At
open, a database marked before must exist, open, and hold at least its marked generation;
otherwise the start is refused with a sentence naming the folder and what to do, or, with
``--accept-state-loss``, the loss is logged and the broker goes on: a missing or unreadable
database is moved aside (``NAME.lost-MS``, kept for inspection) and started empty, one that is
behind is used as it is. The check opens the database read-only first, so that nothing (its
unnamed files included) is touched before it passes. RocksDB's own errors (a bad CURRENT, a
damaged table file) and a full disk are said in sentences too.

What it does not see: after a crash (no clean close), a MANIFEST cut that loses only flushes
made after the one that carried the open's bump. It costs a start and a stop a few tens of ms
(two synced writes, a read-only open, a flush at close, one write of state.json each).
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteOptions

from broker_sim.store.commitlog import wall_clock_ms
from broker_sim.store.disk import full_at_start_sentence
from broker_sim.store.state_marks import MISSING, StateLossError, StateMarks

log = logging.getLogger(__name__)

GENERATION_KEY = b"\x00generation"  # no pop or transaction key starts with a NUL
_GENERATION = struct.Struct(">Q")


class StateDatabaseError(StateLossError):
    """A RocksDB of the broker cannot be opened."""


def open_checked(directory: Path, what: str, consequence: str, marks: StateMarks | None,
                 options: Options) -> Rdict:
    """The RocksDB in ``directory`` (``what`` it holds, for sentences; ``consequence``: what
    starting without its content means), checked against ``marks`` (None: not checked)."""
    directory = Path(directory)
    expected = marks.generation(directory) if marks is not None else 0
    if expected:
        _check(directory, what, consequence, marks, expected, options)
    directory.mkdir(parents=True, exist_ok=True)
    options.create_if_missing(True)
    try:
        db = Rdict(str(directory), options)
    except Exception as err:  # rocksdict raises Exception with RocksDB's status text
        if marks is None or not marks.accept_loss or _out_of_space(err):
            raise _unopenable(directory, what, err) from None
        marks.lost(directory, f"cannot be opened ({_status(err)})", consequence,
                   "the folder is moved aside and an empty one started")
        _move_aside(directory)
        directory.mkdir(parents=True)
        db = Rdict(str(directory), options)
    if marks is not None:
        try:
            _bump(db, directory, marks)
        except BaseException as err:
            db.close()
            if _out_of_space(err):  # RocksDB's Exception; an OSError (state.json) is said by the CLI
                raise _unopenable(directory, what, err) from None
            raise
    return db


def close_checked(db: Rdict, directory: Path, marks: StateMarks | None) -> None:
    """Close ``db``; its generation is bumped first, so that the flush of the close carries it
    (a MANIFEST cut after this close is then seen at the next open)."""
    try:
        if marks is not None:
            _bump(db, Path(directory), marks)
    except Exception as err:  # a full or failed disk: the next open finds the generation of this one's open
        log.warning("the generation of %s was not advanced at close: %s", directory, _status(err))
    finally:
        db.close()


def _check(directory: Path, what: str, consequence: str, marks: StateMarks, expected: int,
           options: Options) -> None:
    if not (directory / "CURRENT").exists():
        marks.lost(directory, MISSING, consequence, "an empty one is started")
        _move_aside(directory)
        return
    try:
        db = Rdict(str(directory), options, access_type=AccessType.read_only())
        try:
            found = generation(db)
        finally:
            db.close()
    except Exception as err:
        if _out_of_space(err):
            raise _unopenable(directory, what, err) from None
        marks.lost(directory, f"cannot be opened ({_status(err)})", consequence,
                   "the folder is moved aside and an empty one started")
        _move_aside(directory)
        return
    if found < expected:
        marks.lost(directory, f"is older than the broker left it (generation {found}, where {expected} was "
                              "written): its MANIFEST or files were cut, replaced or lost", consequence,
                   "it is used as it is")


def generation(db: Rdict) -> int:
    value = db.get(GENERATION_KEY)
    return 0 if value is None else _GENERATION.unpack(value)[0]


def _bump(db: Rdict, directory: Path, marks: StateMarks) -> None:
    synced = WriteOptions()
    synced.sync = True
    bumped = generation(db) + 1
    db.put(GENERATION_KEY, _GENERATION.pack(bumped), synced)
    marks.mark(directory, bumped, save=False)  # the caller saves the marks once for all its databases


def _move_aside(directory: Path) -> None:
    if directory.exists():
        aside = directory.with_name(f"{directory.name}.lost-{wall_clock_ms()}")
        directory.rename(aside)
        log.error("the unusable %s was moved to %s", directory, aside)


def _unopenable(directory: Path, what: str, err: Exception) -> StateLossError:
    if _out_of_space(err):
        return StateDatabaseError(full_at_start_sentence(f"the {what} (RocksDB in {directory}) could not be opened "
                                                         f"({_status(err)})"))
    return StateDatabaseError(f"the {what} (RocksDB in {directory}) cannot be opened: {_status(err)}. Restore the "
                              f"folder as the broker left it (from a backup), or start with --accept-state-loss to "
                              "move it aside and start it empty (what was lost is logged)")


def _status(err: Exception) -> str:
    return str(err).strip() or type(err).__name__


def _out_of_space(err: Exception) -> bool:
    return "No space left on device" in str(err)
