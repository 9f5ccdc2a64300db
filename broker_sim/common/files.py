"""Small files of the data directory (the checkpoint, tables, secrets), written so that a crash
or a full disk leaves either the old file or the new one, never a mix."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the names in directory ``path`` (files created, renamed or removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: written whole to ``NAME.tmp`` beside it and synced, renamed
    over it, and the rename synced. On a failure (a full disk raises OSError ENOSPC) the tmp
    file is removed and ``path`` is as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and err.filename is None:
            err.filename = str(path)  # os.write names none: sentences say which file
        raise
    fsync_dir(path.parent)
