"""write_atomically: the one way the store replaces a small file."""

from __future__ import annotations

import errno
import os

import pytest

from broker_sim.common.files import write_atomically


def test_replaces_the_file_whole(tmp_path):
    path = tmp_path / "config" / "table.json"
    write_atomically(path, b"old")
    write_atomically(path, b"new" * 100_000)
    assert path.read_bytes() == b"new" * 100_000
    assert sorted(p.name for p in path.parent.iterdir()) == ["table.json"]


def test_a_failed_write_leaves_the_old_file_and_no_tmp(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint"
    write_atomically(path, b"old")
    real_write = os.write

    def short_then_full(fd, data):  # half of it fits, then the disk is full
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(OSError) as failure:
        write_atomically(path, b"a new checkpoint")
    monkeypatch.undo()
    assert failure.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_mode(tmp_path):
    path = tmp_path / "secret"
    write_atomically(path, b"s", mode=0o600)
    assert path.stat().st_mode & 0o777 == 0o600
