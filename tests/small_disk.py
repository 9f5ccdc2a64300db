"""Small real filesystems for the full-disk tests: a tmpfs, or ext4 on a loop device, mounted
on a directory and unmounted whatever happens; and a filler file that takes the free space."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

MIB = 1 << 20


@contextlib.contextmanager
def mounted(kind: str, size_mib: int, where: Path):
    """Mount a ``kind`` ("tmpfs" or "ext4") filesystem of ``size_mib`` on ``where``; skips the
    test (with the reason) where this process cannot mount one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    mount_point = where / "mnt"
    mount_point.mkdir()
    if kind == "tmpfs":
        command = ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount_point)]
    else:
        image = where / "disk.img"
        with open(image, "wb") as out:
            out.truncate(size_mib * MIB)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        command = ["mount", "-o", "loop", str(image), str(mount_point)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {kind} here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def fill(path: Path, leave_bytes: int = 0) -> None:
    """Allocate a file at ``path`` that leaves about ``leave_bytes`` free (0: none at all)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        size = max(0, free_bytes(path.parent) - leave_bytes)
        if size:
            os.posix_fallocate(fd, 0, size)
        if leave_bytes == 0:  # what is left in blocks statvfs does not count (root's reserve)
            for chunk in (MIB, 4096):
                for _ in range(100_000):
                    try:
                        os.posix_fallocate(fd, size, chunk)
                    except OSError as err:
                        if err.errno != errno.ENOSPC:
                            raise
                        break
                    size += chunk
    finally:
        os.close(fd)
