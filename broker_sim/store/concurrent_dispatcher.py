"""The concurrent dispatcher (RocketMQ's RIP-52): the same index files as the serial one,
built by a pipeline.

1. A scanner reads only record lengths and cuts the commitlog into chunks of about
   ``dispatch_chunk_bytes`` of whole records, within one segment (a BLANK marker ends a
   chunk at the segment's end), with increasing ids.
2. A pool parses chunks in parallel (``chunk_index``): worker processes by default, which
   map the segment files themselves and return numpy arrays, so that parsing does not take
   turns with the broker's threads for the GIL; or threads of this process. A chunk of a
   few records (the dispatcher keeps up) skips the pool: the writer indexes it record by
   record, as the serial mode does, since the trip would cost more than the records.
3. An ``OrderlyRing`` takes the results as they complete, in any order, and releases them
   strictly in id order. A chunk is handed to the pool only when its slot is free, so no
   worker runs more than ``dispatch_ring_slots`` chunks ahead of the writer.
4. One writer (the dispatching thread) writes each chunk's units, queue by queue, in id order,
   moves ``position`` to the chunk's end and wakes the waiting consumers.

Records that the serial dispatcher skips (unknown or deleted topics, queues that do not
exist, inner batches of SimpleCQ topics) are skipped here too, with the same warnings.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from broker_sim.store.chunk_index import ChunkIndex, SegmentChunk, parse_records, parse_segment_chunk, worker_started
from broker_sim.store.commitlog import CommitLog
from broker_sim.store.config import DispatchPool
from broker_sim.store.consume_queue import ConsumeQueueTable
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import StoreError
from broker_sim.store.mapped_file import MappedFile
from broker_sim.store.topics import QueueType, TopicTable
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

# Runs of a queue at least this long are written with numpy; shorter ones unit by unit.
_SHORTEST_VECTOR_RUN = 16
# Chunks with fewer records are indexed record by record by the writer, as the serial mode
# does: a trip through the pool costs about what 100 records cost that way. So a dispatcher
# that keeps up (small chunks) costs what the serial one costs, and one that falls behind
# (a backlog: full chunks) catches up with the pool.
_SMALLEST_POOLED_CHUNK = 128


@dataclass(frozen=True)
class _InPlace:
    """A chunk left to the writer, record by record."""

    segment: MappedFile
    positions: list
    end: int


class OrderlyRing:
    """RocketMQ's DispatchRequestOrderlyQueue: results accepted in any order, released in id
    order.

    ``reserve()`` hands out the next id, or None while ``slots`` ids are out and unreleased
    (back-pressure: the chunk is not handed to a worker until the writer has caught up);
    ``put(id, item)`` fills a reserved slot, from any thread; ``take()`` waits for the oldest
    reserved id and releases it.

    Parameters
    ----------
    slots : int
        Results in flight at most.
    """

    def __init__(self, slots: int):
        self._items: list = [None] * slots
        self._filled = [False] * slots
        self._ready = threading.Condition()
        self.next_out = 0  # the id take() releases next
        self.next_in = 0  # the id reserve() hands out next

    @property
    def pending(self) -> int:
        return self.next_in - self.next_out

    def reserve(self) -> int | None:
        with self._ready:
            if self.pending >= len(self._items):
                return None
            self.next_in += 1
            return self.next_in - 1

    def put(self, item_id: int, item) -> None:
        with self._ready:
            if not self.next_out <= item_id < self.next_in:
                raise ValueError(f"id {item_id} is not reserved (reserved: {self.next_out} to {self.next_in - 1})")
            slot = item_id % len(self._items)
            self._items[slot], self._filled[slot] = item, True
            self._ready.notify_all()

    def take(self):
        with self._ready:
            if self.pending == 0:
                raise LookupError("nothing is reserved: nothing to take")
            slot = self.next_out % len(self._items)
            self._ready.wait_for(lambda: self._filled[slot])
            item, self._items[slot], self._filled[slot] = self._items[slot], None, False
            self.next_out += 1
            return item


class ConcurrentDispatcher(Dispatcher):
    """The concurrent dispatch mode (see the module's documentation); the store makes one
    from its ``StoreConfig`` when ``dispatch_mode`` is ``concurrent``.

    Parameters
    ----------
    commitlog, queues, topics, limit, on_progress
        As the serial ``Dispatcher``: the log, the index table, the topics, how far records
        may be dispatched, and what to call when units were written.
    workers : int
        Chunks parsed at once (``dispatch_workers``, default 2).
    pool : {"process", "thread"}
        Who parses (``dispatch_pool``): worker processes (default), or threads of this process.
    chunk_bytes : int
        The scanner's chunk size, whole records (``dispatch_chunk_bytes``, 4 MiB).
    ring_slots : int
        Chunks in flight at most: how far parsing may run ahead of the writer
        (``dispatch_ring_slots``, 16).
    """

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, topics: TopicTable,
                 limit: Callable[[], int], on_progress: Callable[[], None], *, workers: int = 2,
                 pool: DispatchPool = DispatchPool.PROCESS, chunk_bytes: int = 4 << 20, ring_slots: int = 16):
        super().__init__(commitlog, queues, topics, limit, on_progress)
        self.workers = workers
        self.pool_kind = DispatchPool(pool)
        self.chunk_bytes = chunk_bytes
        self._ring = OrderlyRing(ring_slots)
        self._executor: Executor | None = None

    def dispatch(self, limit: int | None = None) -> int:
        """Index every record from ``position`` to ``limit`` (default: the log's limit now);
        returns how many records were indexed or skipped."""
        ring = self._ring
        end = self.limit() if limit is None else limit
        scanned = self.position
        records = 0
        try:
            while True:
                while scanned < end:
                    chunk_id = ring.reserve()
                    if chunk_id is None:
                        break
                    scanned = self._scan_and_submit(chunk_id, scanned, end)
                if ring.pending == 0:
                    return records
                records += self._write(ring.take().result())
        except BaseException as error:
            self._drain()
            if isinstance(error, BrokenExecutor):  # a worker died: the next pass starts a new pool
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
            raise

    # --- the scanner -------------------------------------------------------------------------

    def _scan_and_submit(self, chunk_id: int, start: int, end: int) -> int:
        """Cut chunk ``chunk_id`` from ``start`` (before ``end``), hand it to the pool; returns
        where the chunk ends."""
        try:
            segment, chunk_end, positions = self._cut(start, end)
            if len(positions) < _SMALLEST_POOLED_CHUNK:  # also a BLANK marker alone
                future: Future = Future()
                future.set_result(_InPlace(segment, positions, chunk_end))
            elif self.pool_kind is DispatchPool.THREAD:
                future = self._submit(parse_records, segment.map, segment.start, chunk_id, start, chunk_end,
                                             np.array(positions, dtype=np.int64))
            else:
                task = SegmentChunk(str(segment.path), os.fstat(segment.fd).st_ino, segment.start, segment.size,
                                    chunk_id, start, chunk_end, np.array(positions, dtype=np.int64))
                future = self._submit(parse_segment_chunk, task)
        except BaseException as error:  # the id is reserved: its slot must be filled
            future = Future()
            future.set_exception(error)
            chunk_end = end
        future.add_done_callback(lambda done: self._ring.put(chunk_id, done))
        return chunk_end

    def _cut(self, start: int, end: int):
        """(segment, chunk end, record positions) of the chunk from ``start``: whole records
        of one segment, up to about chunk_bytes; a BLANK marker ends it at the segment's end."""
        segment = self.commitlog.segment_at(start)
        if segment is None:
            raise StoreError(f"commitlog offset {start} is not in any segment: cannot dispatch it")
        buf, base = segment.map, segment.start
        stop = min(end, segment.end, start + self.chunk_bytes)
        unpack = fmt.BLANK.unpack_from
        positions = []
        position = start
        while position < stop:
            total, magic = unpack(buf, position - base)
            if magic == fmt.BLANK_MAGIC:
                position = segment.end
                break
            if total < fmt.FIXED_BYTES:
                raise StoreError(f"record at commitlog offset {position} has length {total}: the log is damaged")
            positions.append(position)
            position += total
        return segment, position, positions

    def _pool(self) -> Executor:
        if self._executor is None:
            if self.pool_kind is DispatchPool.THREAD:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="rmq-dispatch")
            else:
                # spawn, not fork: the broker has gRPC threads, which a forked child must not inherit.
                self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=worker_started)
        return self._executor

    def _submit(self, function, *args) -> Future:
        """Submit to the pool with Ctrl-C blocked: a worker process starts at a submit and
        inherits the submitting thread's signal mask, so a Ctrl-C that comes while it starts
        waits for ``worker_started``, which ignores it. (The pool is made first: making it
        starts multiprocessing's resource tracker, which unblocks Ctrl-C when it is done.)"""
        pool = self._pool()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return pool.submit(function, *args)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _drain(self) -> None:
        """After a failure: wait for the chunks in flight and drop them."""
        while self._ring.pending:
            self._ring.take()

    # --- the writer --------------------------------------------------------------------------

    def _write(self, chunk: ChunkIndex | _InPlace) -> int:
        with self.lock:
            if isinstance(chunk, _InPlace):
                for position in chunk.positions:
                    self._dispatch_record(chunk.segment, position)
            elif len(chunk.positions):
                self._index(chunk)
            self.position = chunk.end
        self.on_progress()
        return len(chunk.positions)

    def _index(self, index: ChunkIndex) -> None:
        """Write the chunk's units, one run per queue (each queue's records in log order)."""
        keep = np.ones(len(index.positions), dtype=bool)
        configs = [self._topic_config(index, t, name, keep) for t, name in enumerate(index.topics)]
        rows = np.flatnonzero(keep)
        keys = ((index.topic_indexes[rows].astype(np.int64) << 32)
                | (index.queue_ids[rows].astype(np.int64) & 0xFFFFFFFF))
        order = np.argsort(keys, kind="stable")
        rows, keys = rows[order], keys[order]
        columns = (index.positions, index.sizes, index.tags_codes, index.store_timestamps, index.queue_offsets,
                   index.counts)
        bounds = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1, [len(rows)])).tolist()
        values = None
        for first, end in zip(bounds, bounds[1:]):
            if first == end:
                continue
            row = int(rows[first])
            topic = configs[index.topic_indexes[row]]
            queue = self.queues.get(topic.name, int(index.queue_ids[row]), topic.queue_type)
            if end - first >= _SHORTEST_VECTOR_RUN:
                run = rows[first:end]
                queue.put_many(*(column[run] for column in columns))
            else:  # a few records (many queues, or big batches): numpy's overhead per call would dominate
                if values is None:
                    values = [column[rows].tolist() for column in columns]
                for i in range(first, end):
                    queue.put(*(column[i] for column in values))

    def _topic_config(self, index: ChunkIndex, t: int, name: bytes, keep: np.ndarray):
        """The config of the chunk's topic ``t``; clears ``keep`` of its records that are not
        indexed, with the serial dispatcher's warnings."""
        members = index.topic_indexes == t
        topic = self.topics.get(name.decode())
        if topic is None:
            skipped = members
        else:
            skipped = members & ((index.queue_ids >= topic.stored_queues) | (index.positions < topic.created_at_offset))
        if skipped.any():
            first = int(np.argmax(skipped))
            self._warn_once(name, "record at %d names topic %r queue %d, which does not exist (or was deleted since): "
                            "not indexed", int(index.positions[first]), name, int(index.queue_ids[first]))
            keep &= ~skipped
        if topic is not None and topic.queue_type is not QueueType.BATCH_CQ:
            inner = members & keep & ((index.sys_flags & fmt.SysFlag.INNER_BATCH) != 0)
            if inner.any():
                self._warn_once(name, "record at %d is an inner batch of SimpleCQ topic %r: not indexed",
                                int(index.positions[np.argmax(inner)]), name)
                keep &= ~inner
        return topic

    # --- lifecycle ---------------------------------------------------------------------------

    def start_workers(self) -> None:
        """Start the worker processes now rather than on the first records, and wait for them."""
        if self.pool_kind is DispatchPool.PROCESS:
            for started in [self._submit(os.getpid) for _ in range(self.workers)]:
                started.result()

    def start(self) -> None:
        self.start_workers()
        super().start()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
