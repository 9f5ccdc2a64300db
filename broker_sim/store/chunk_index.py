"""Parsing a chunk of the commitlog into index entries, with numpy: the concurrent dispatcher's
work that runs in parallel (RIP-52's dispatch request building).

A chunk is a run of whole records of one segment, whose positions the scanner found. Every
header field the index needs is gathered for all records at once (``_field``); properties are
searched only in a compact copy of the records' property bytes, so bodies are never scanned
and only records that have the property cost a Python step. The result, ``ChunkIndex``, is a
few small arrays: cheap to send back from a worker process.

Worker processes map the segment files themselves (``parse_segment_chunk``): a task names the
file and its inode, never carries the bytes.
"""

from __future__ import annotations

import mmap
import os
import signal
from dataclasses import dataclass

import numpy as np

from broker_sim.store.message_filter import tags_code
from rmq_wire import record as fmt

# Header field positions (see format.HEADER).
_QUEUE_ID_AT = 12
_QUEUE_OFFSET_AT = 20
_SYS_FLAG_AT = 36
_STORE_TIMESTAMP_AT = 56
_BODY_LEN_AT = fmt.BODYLEN_AT
_TAGS_KEY = fmt.PROPERTY_TAGS.encode() + fmt.NAME_VALUE_SEPARATOR
_INNER_NUM_KEY = fmt.PROPERTY_INNER_NUM.encode() + fmt.NAME_VALUE_SEPARATOR
_SEPARATOR = fmt.PROPERTY_SEPARATOR[0]


@dataclass
class ChunkIndex:
    """The index entries of chunk ``chunk_id`` (commitlog bytes ``start`` .. ``end``), one
    element per record in log order; ``topic_indexes`` point into ``topics``."""

    chunk_id: int
    start: int
    end: int
    positions: np.ndarray  # int64, commitlog offsets
    sizes: np.ndarray  # int32
    queue_ids: np.ndarray  # int32
    queue_offsets: np.ndarray  # int64
    sys_flags: np.ndarray  # int32
    store_timestamps: np.ndarray  # int64
    tags_codes: np.ndarray  # int64, RocketMQ's tagsCode (0 without tags)
    counts: np.ndarray  # int64, INNER_NUM for inner batches, else 1
    topic_indexes: np.ndarray  # int32
    topics: tuple  # topic names (bytes), each once


def parse_records(buf, base: int, chunk_id: int, start: int, end: int, positions: np.ndarray) -> ChunkIndex:
    """The index entries of the records at ``positions`` (commitlog offsets) of a segment
    whose bytes are ``buf`` and whose first byte is at offset ``base``."""
    data = np.frombuffer(buf, dtype=np.uint8)
    rel = positions - base
    sizes = _field(data, rel, 0, ">i4")
    body_lens = _field(data, rel, _BODY_LEN_AT, ">i4")
    topic_at = rel + fmt.HEADER.size + body_lens
    topic_lens = data[topic_at].astype(np.int64)
    props_start = topic_at + 1 + topic_lens + 2
    props_end = rel + sizes
    topics, topic_indexes = _topic_names(data, topic_at + 1, topic_lens)
    sys_flags = _field(data, rel, _SYS_FLAG_AT, ">i4")
    props = _Properties(data, props_start, props_end)
    counts = np.ones(len(rel), dtype=np.int64)
    inner = (sys_flags & fmt.SysFlag.INNER_BATCH) != 0
    if inner.any():
        values = props.values(_INNER_NUM_KEY)
        for record in np.flatnonzero(inner):
            if record not in values:
                raise ValueError(f"inner batch record at commitlog offset {int(positions[record])} has no "
                                 f"{fmt.PROPERTY_INNER_NUM} property")
            counts[record] = int(values[record])
    tags_codes = np.zeros(len(rel), dtype=np.int64)
    for record, tags in props.values(_TAGS_KEY).items():
        tags_codes[record] = tags_code(tags)
    return ChunkIndex(
        chunk_id, start, end, positions, sizes.astype(np.int32),
        _field(data, rel, _QUEUE_ID_AT, ">i4").astype(np.int32),
        _field(data, rel, _QUEUE_OFFSET_AT, ">i8").astype(np.int64), sys_flags.astype(np.int32),
        _field(data, rel, _STORE_TIMESTAMP_AT, ">i8").astype(np.int64), tags_codes, counts,
        topic_indexes.astype(np.int32), topics)


def _field(data: np.ndarray, rel: np.ndarray, at: int, dtype: str) -> np.ndarray:
    """One big-endian header field of every record: gather its bytes, view them as numbers."""
    width = np.dtype(dtype).itemsize
    gathered = data[(rel + at)[:, None] + np.arange(width)]
    return gathered.view(dtype).reshape(-1)


def _topic_names(data: np.ndarray, at: np.ndarray, lengths: np.ndarray) -> tuple[tuple, np.ndarray]:
    """The distinct topic names and each record's index into them. Names are compared as
    fixed-width byte strings padded with zeros, which no topic name contains."""
    if len(at) == 0:
        return (), np.zeros(0, dtype=np.int32)
    width = max(int(lengths.max()), 1)
    columns = np.arange(width)
    index = np.minimum(at[:, None] + columns, len(data) - 1)
    names = np.where(columns < lengths[:, None], data[index], 0).astype(np.uint8)
    unique, inverse = np.unique(names.view(f"S{width}").reshape(-1), return_inverse=True)
    return tuple(bytes(name) for name in unique), inverse.reshape(-1)


class _Properties:
    """The records' property bytes, copied side by side, for finding one property of each."""

    def __init__(self, data: np.ndarray, start: np.ndarray, end: np.ndarray):
        lengths = np.maximum(end - start, 0)
        self.offsets = np.concatenate(([0], np.cumsum(lengths)))
        total = int(self.offsets[-1])
        index = np.repeat(start - self.offsets[:-1], lengths) + np.arange(total)
        self.raw = data[index].tobytes()

    def values(self, key: bytes) -> dict[int, bytes]:
        """{record: value} of the first property named ``key`` (name and separator) of each
        record that has one, as format.find_property reads it."""
        raw, offsets, found = self.raw, self.offsets, {}
        at = raw.find(key)
        while at >= 0:
            record = int(np.searchsorted(offsets, at, side="right")) - 1
            record_start, record_end = int(offsets[record]), int(offsets[record + 1])
            if record not in found and (at == record_start or raw[at - 1] == _SEPARATOR):
                value_at = at + len(key)
                value_end = raw.find(fmt.PROPERTY_SEPARATOR, value_at, record_end)
                found[record] = raw[value_at : value_end if value_end >= 0 else record_end]
                at = record_end  # the first match of a record is the one that counts
            else:
                at += 1
            at = raw.find(key, at)
        return found


# --- in a worker process ------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentChunk:
    """A chunk as a worker process gets it: which file (its inode tells a file deleted and
    created again under the same name apart), and the positions of its records."""

    path: str
    inode: int
    base: int
    size: int
    chunk_id: int
    start: int
    end: int
    positions: np.ndarray


def worker_started() -> None:
    """A worker process ignores Ctrl-C sent to the terminal's process group: the broker
    handles it, finishes dispatching and then stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while the process started


_MAPS_KEPT = 4
_maps: dict[tuple[str, int], mmap.mmap] = {}


def parse_segment_chunk(task: SegmentChunk) -> ChunkIndex:
    """Map the segment (kept for the next chunks) and parse the chunk's records."""
    segment = _segment_map(task)
    try:
        return parse_records(segment, task.base, task.chunk_id, task.start, task.end, task.positions)
    finally:
        # The pages stay in the page cache; this process need not keep them resident.
        first = (task.start - task.base) // mmap.PAGESIZE * mmap.PAGESIZE
        segment.madvise(mmap.MADV_DONTNEED, first, min(task.end - task.base, task.size) - first)


def _segment_map(task: SegmentChunk) -> mmap.mmap:
    key = (task.path, task.inode)
    segment = _maps.get(key)
    if segment is None:
        fd = os.open(task.path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_ino != task.inode:
                raise FileNotFoundError(f"commitlog segment {task.path} was replaced while being dispatched")
            segment = mmap.mmap(fd, task.size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        while len(_maps) >= _MAPS_KEPT:
            _maps.pop(next(iter(_maps))).close()
        _maps[key] = segment
    return segment
