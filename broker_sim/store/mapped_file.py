"""Fixed-size memory-mapped files and the queue of them that a log or an index is cut into.

As RocketMQ's MappedFile / MappedFileQueue: every file of a queue has the same size and is
named by the 20-digit, zero-padded offset of its first byte in the whole series. Files are
created at full size (sparse), mapped shared, written through the map and flushed with
fdatasync, which on Linux writes back pages dirtied through the map too.

A page of the map that the filesystem has not allocated must never be written through the
map (nor, on tmpfs, read): when the filesystem is full the kernel answers that fault with
SIGBUS, which kills the process. So a file's blocks are allocated (``allocate``) before the
bytes that use them are written; a failed allocation is a ``DiskFullError``, raised before
anything is written.
"""

from __future__ import annotations

import errno
import mmap
import os
import resource
import threading
from pathlib import Path

from broker_sim.common.files import fsync_dir
from broker_sim.store.errors import DiskFullError, StoreError

NAME_DIGITS = 20
PAGE_BYTES = mmap.PAGESIZE
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def file_name(offset: int) -> str:
    return f"{offset:0{NAME_DIGITS}d}"



def raise_open_file_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit (a file is mapped per
    queue and segment, as RocketMQ, which asks for a high `ulimit -n` too); returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class MappedFile:
    """One file of ``size`` bytes, mapped; ``start`` is its offset in the series.

    A log segment keeps a descriptor of its own for fdatasync, which releases the GIL. An
    index file (``for_index``) is small and there is one per queue, 10,000 queues included:
    it keeps no descriptor but the map's own and flushes with msync, and its map is advised
    random access, since otherwise the first write into a large sparse file makes the kernel
    fill a large folio around the page (about a millisecond per queue here).
    """

    def __init__(self, path: Path, start: int, size: int, for_index: bool = False):
        self.path = path
        self.start = start
        self.size = size
        self.for_index = for_index
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            if err.errno == errno.EMFILE:
                raise StoreError(f"cannot open {path}: too many open files (the store maps one file per queue "
                                 "and segment); raise the limit with `ulimit -n`") from err
            raise
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        # Bytes before the first hole are allocated (files are written front to back).
        self.allocated = os.lseek(fd, 0, os.SEEK_HOLE)
        self._map(fd)
        if for_index:
            os.close(fd)
            self.fd = None
        else:
            self.fd = fd

    @property
    def end(self) -> int:
        return self.start + self.size

    def flush(self) -> None:
        if self.fd is None:
            self.map.flush()
        else:
            os.fdatasync(self.fd)

    def allocate(self, end: int, step: int) -> None:
        """Allocate the file's blocks up to ``end`` (relative), rounded up to ``step`` (but
        at least to ``end`` when the disk has no room for more); raises ``DiskFullError``."""
        if end <= self.allocated:
            return
        target = min(self.size, -(-end // step) * step)
        fd = os.open(self.path, os.O_RDWR) if self.fd is None else self.fd
        try:
            try:
                os.posix_fallocate(fd, self.allocated, target - self.allocated)
            except OSError as err:
                if err.errno not in _NO_SPACE or target == end:
                    raise
                os.posix_fallocate(fd, self.allocated, end - self.allocated)
                target = end
        except OSError as err:
            if err.errno in _NO_SPACE:
                raise DiskFullError(f"{self.path} could not grow to {end} bytes: {err.strerror}") from err
            raise
        finally:
            if self.fd is None:
                os.close(fd)
        self.allocated = target

    def write(self, parts: list, at: int, total: int) -> None:
        """pwritev ``parts`` (``total`` bytes) at ``at`` through the descriptor; a short write
        (which Linux makes when the disk fills up midway) raises ``DiskFullError``."""
        written = os.pwritev(self.fd, parts, at)
        if written != total:
            raise DiskFullError(f"{self.path} took {written} of {total} bytes written at {at}")

    def release_pages(self) -> None:
        """Drop this map's page-table entries (MADV_DONTNEED on a shared file map: the data
        stays in the page cache and in the file, and faults back in when read)."""
        self.map.madvise(mmap.MADV_DONTNEED)

    def zero_from(self, position: int) -> None:
        """Zero bytes from ``position`` (relative) to the end, leaving the tail sparse."""
        self._unmap()
        fd = os.open(self.path, os.O_RDWR) if self.fd is None else self.fd
        try:
            os.ftruncate(fd, position)
            os.ftruncate(fd, self.size)
            self.allocated = min(self.allocated, position)
            os.fdatasync(fd)
            self._map(fd)
        finally:
            if self.fd is None:
                os.close(fd)

    def close(self) -> None:
        self._unmap()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def _map(self, fd: int) -> None:
        self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if self.for_index:
            self.map.madvise(mmap.MADV_RANDOM)
        self.view = memoryview(self.map)

    def _unmap(self) -> None:
        self.view.release()
        try:
            self.map.close()
        except BufferError:
            # A reader still holds a view of a record: the map goes when that view does.
            pass


class MappedFileQueue:
    """The files of one log or index series in ``directory``, each ``file_size`` bytes.

    A log's new files get a directory fsync at once, so that their names survive an OS crash;
    an index's (``for_index``) get it with the index's next full flush (``unsynced_names``).
    """

    def __init__(self, directory: Path, file_size: int, for_index: bool = False):
        self.directory = directory
        self.file_size = file_size
        self.for_index = for_index
        self.unsynced_names = False
        self.files: list[MappedFile] = []
        self._lock = threading.Lock()
        if directory.is_dir():
            names = sorted(p.name for p in directory.iterdir() if p.name.isdigit() and len(p.name) == NAME_DIGITS)
            for name in names:
                self.files.append(MappedFile(directory / name, int(name), file_size, for_index))
        self._check_contiguous()

    def _check_contiguous(self) -> None:
        for before, after in zip(self.files, self.files[1:]):
            if after.start != before.end:
                raise RuntimeError(
                    f"{self.directory}: files {before.path.name} and {after.path.name} are not contiguous "
                    f"(file size {self.file_size}); a file is missing or the configured size changed"
                )

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def create_file(self, start: int) -> MappedFile:
        with self._lock:
            if self.files and start != self.files[-1].end:
                raise RuntimeError(f"new file at {start} does not follow {self.files[-1].end}")
            path = self.directory / file_name(start)
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                mapped = MappedFile(path, start, self.file_size, self.for_index)
            except OSError as err:
                if err.errno in _NO_SPACE:
                    raise DiskFullError(f"{path} could not be created: {err.strerror}") from err
                raise
            if self.for_index:
                self.unsynced_names = True
            else:
                fsync_dir(self.directory)
            self.files.append(mapped)
            return mapped

    def find(self, offset: int) -> MappedFile | None:
        """The file holding byte ``offset`` of the series, or None."""
        files = self.files
        if not files or offset < files[0].start:
            return None
        index = (offset - files[0].start) // self.file_size
        return files[index] if index < len(files) else None

    def drop_files_from(self, offset: int) -> None:
        """Delete the files that start at or after ``offset``."""
        with self._lock:
            while self.files and self.files[-1].start >= offset:
                self.files.pop().destroy()

    def truncate(self, offset: int) -> None:
        """Drop every byte at and after ``offset``: zero the rest of its file, delete later files."""
        self.drop_files_from(offset)
        with self._lock:
            if self.files and offset < self.files[-1].end:
                last = self.files[-1]
                last.zero_from(offset - last.start)

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()
        self.files = []
