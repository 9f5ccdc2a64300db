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


@contextlib.contextmanager
def thin_ext4(size_mib: int, backing_mib: int, where: Path):
    """ext4 of ``size_mib`` whose image lives on a tmpfs of only ``backing_mib``: a thinly
    provisioned disk. Once the tmpfs is full, writeback fails and fdatasync reports the error
    (ENOSPC, then EIO) for pages the kernel has already marked clean. Yields (mount point,
    grow): ``grow()`` gives the image room and mounts ext4 again, checked (a restart).

    The disk must not lie: the loop driver completes a write that the backing file took only in
    part as a success (seen: a sync-flushed record half zeros after the restart, no I/O error
    logged for it). So ext4's blocks are tmpfs pages (4 KiB) and each loop request is one block:
    a write lands whole or fails."""
    with mounted("tmpfs", backing_mib, where) as backing:
        image, mount_point = backing / "disk.img", where / "thin"
        mount_point.mkdir()
        with open(image, "wb") as out:
            out.truncate(size_mib * MIB)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", str(image)], check=True, capture_output=True)
        device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                                text=True).stdout.strip()
        try:
            Path(f"/sys/block/{Path(device).name}/queue/max_sectors_kb").write_text("4")
            subprocess.run(["mount", device, str(mount_point)], check=True, capture_output=True)
        except BaseException:
            subprocess.run(["losetup", "-d", device], capture_output=True)
            raise

        def grow():
            subprocess.run(["mount", "-o", f"remount,size={2 * size_mib}m", str(backing)], check=True)
            subprocess.run(["umount", str(mount_point)], check=True)
            subprocess.run(["e2fsck", "-fy", device], capture_output=True)  # exit 1: errors fixed
            subprocess.run(["mount", device, str(mount_point)], check=True, capture_output=True)

        try:
            yield mount_point, grow
        finally:
            if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
            subprocess.run(["losetup", "-d", device], capture_output=True)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def fill(path: Path, leave_bytes: int = 0) -> None:
    """Allocate a file at ``path`` that leaves about ``leave_bytes`` free (0: none at all, also
    none of root's reserve, which statvfs does not count)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        size = 0
        chunks = [max(0, free_bytes(path.parent) - leave_bytes)] + ([MIB, 4096] if leave_bytes == 0 else [])
        for chunk in filter(None, chunks):
            for _ in range(100_000):  # others write beside us: a chunk that no longer fits ends its round
                try:
                    os.posix_fallocate(fd, size, chunk)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
                size += chunk
                if chunk == chunks[0]:
                    break
    finally:
        os.close(fd)
