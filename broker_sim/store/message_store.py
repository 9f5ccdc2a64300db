"""MessageStore: the store's one entry point, over the commitlog, the indexes and recovery.

Its roles live apart: writing in ``appends.py`` (Appends), reading in ``reads.py`` (Reads);
here, opening (recovery, the dispatcher and the flusher), topics, flushing and closing. The
data directory's layout is in ``paths.py``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from broker_sim.common.files import fsync_dir
from broker_sim.common.service_thread import ServiceThread
from broker_sim.store.appends import Appends
from broker_sim.store.checkpoint import Checkpoint, load_queue_table, save_queue_table
from broker_sim.store.commitlog import CommitLog, wall_clock_ms
from broker_sim.store.concurrent_dispatcher import ConcurrentDispatcher
from broker_sim.store.config import DispatchMode, FlushMode, StoreConfig
from broker_sim.store.consume_queue import ConsumeQueueTable
from broker_sim.store.disk import DiskGuard
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import DataDirInUseError, DiskFailedError, DiskFullError, UnknownTopicError
from broker_sim.store.integrity import CorruptionReport, VerifiedRecords
from broker_sim.store.mapped_file import raise_open_file_limit
from broker_sim.store.paths import StorePaths
from broker_sim.store.producer_state import ProducerState
from broker_sim.store.reads import Reads
from broker_sim.store.recovery import RecoveryReport, recover
from broker_sim.store.state_marks import StateMarks
from broker_sim.store.status import CreateStatus
from broker_sim.store.topics import QueueType, TopicConfig, TopicTable, topic_name_problem, unknown_topic

log = logging.getLogger(__name__)


class MessageStore(Appends, Reads):
    """RocketMQ's batch storage model on one data directory.

    Opening runs recovery and starts the dispatcher (and, in async flush mode, the flusher);
    ``close()`` (or leaving the ``with`` block) stops cleanly. ``now_ms`` is the clock that
    stamps store times, for tests. ``payload_check(payload, codec, compression, count)``
    raises ValueError for an inner batch payload that does not decode into ``count``
    messages; the broker passes the SDK codec's check (the store knows no codec), and without
    one payloads are stored unchecked.
    """

    def __init__(self, data_dir, config: StoreConfig | None = None, *,
                 now_ms: Callable[[], int] = wall_clock_ms, payload_check: Callable | None = None):
        self.data_dir = Path(data_dir)
        self.paths = StorePaths(self.data_dir)
        self.config = config or StoreConfig()
        self.now_ms = now_ms
        self.payload_check = payload_check
        self.data_dir.mkdir(parents=True, exist_ok=True)
        raise_open_file_limit()
        self._lock_fd = _lock_data_dir(self.paths)
        try:
            StateMarks.begin(self.paths)  # a new directory is marked before anything is stored in it
            self._open()
        except BaseException:
            for part in ("dispatcher", "queues", "commitlog"):
                if hasattr(self, part):
                    getattr(self, part).close()
            os.close(self._lock_fd)
            raise

    def _open(self) -> None:
        self._closed = False
        self._dispatched = threading.Condition()
        self.reads_waited_for_index = 0  # reads that found what they asked for stored but not indexed yet
        self._arrival_listeners = ()
        self._admin_lock = threading.Lock()  # topic creation and deletion, and index flushes
        self.topics = TopicTable(self.paths.topics, self.paths.topics_journal)
        self.disk = DiskGuard(self.data_dir, self.config.disk_reserve_bytes)
        self.commitlog = CommitLog(self.paths.commitlog, self.config, self.now_ms, self.disk)
        self.queues = ConsumeQueueTable(self.data_dir, self.config)
        self.queues.load(self.topics.all())
        limit = (lambda: self.commitlog.flushed_offset) if self._sync else (lambda: self.commitlog.max_offset)
        self.dispatcher = self._make_dispatcher(limit)
        self.producers = ProducerState()
        abort = self.paths.abort
        self.corruption = CorruptionReport(self.paths.corrupted)
        self.recovery: RecoveryReport = recover(
            self.commitlog, self.queues, self.dispatcher, Checkpoint.load(self.paths.checkpoint),
            load_queue_table(self.paths.queue_table), self.topics, clean=not abort.exists(),
            producers=self.producers, corruption=self.corruption,
        )
        self._verified = VerifiedRecords(self.recovery.scanned_from, self.commitlog.damaged)
        self._index_flushed = 0
        self._opened_at = time.monotonic()
        self._flush_indexes(thorough=True)
        abort.touch()
        fsync_dir(self.data_dir)
        self.dispatcher.start()
        self._out_of_space = False  # said once until a flush succeeds again
        self._next_index_flush, self._next_thorough_flush = 0.0, self.config.index_flush_thorough_interval_ms / 1000
        self._flusher = ServiceThread("rmq-flusher", self.config.flush_interval_ms / 1000, self._flush_once,
                                      task="flush")
        self._flusher.start()

    def _make_dispatcher(self, limit: Callable[[], int]) -> Dispatcher:
        config = self.config
        if config.dispatch_mode is DispatchMode.CONCURRENT:
            return ConcurrentDispatcher(self.commitlog, self.queues, self.topics, limit, self._notify_dispatched,
                                        workers=config.dispatch_workers, pool=config.dispatch_pool,
                                        chunk_bytes=config.dispatch_chunk_bytes, ring_slots=config.dispatch_ring_slots)
        return Dispatcher(self.commitlog, self.queues, self.topics, limit, self._notify_dispatched)

    @property
    def _sync(self) -> bool:
        return self.config.flush_mode is FlushMode.SYNC

    # --- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int, queue_type=QueueType.SIMPLE_CQ,
                     perm: int = 0) -> tuple[CreateStatus, str]:
        """Create a topic; returns (status, a sentence saying what was wrong, if anything).
        ``perm``: RocketMQ's PermName bits (0: read and write; see ``TopicTable.create``).

        The topic records the commitlog's end as its creation offset: records below it belong
        to an earlier topic of the same name and are never indexed into this one."""
        with self._admin_lock:
            if self.topics.get(name) is None and topic_name_problem(name) is None:
                self.queues.remove_files(name)  # left by a deletion that a crash cut short
            return self.topics.create(name, queue_count, queue_type, created_at_offset=self.commitlog.max_offset,
                                      perm=perm)

    def update_topic(self, name: str, queue_count: int = 0, perm: int = 0) -> tuple[TopicConfig | None, str]:
        """Change a topic's queue count and perm (0: as it is); (the topic now, "") or (None,
        what was wrong). Queues past a lower count keep their messages and indexes, unserved:
        sends and reads of them are refused, and served again, at the offsets they stopped at,
        when the count grows back. The change is made with appends paused: a send that checked
        a queue the update hides is refused, not stored out of sight."""
        with self._admin_lock:
            with self.commitlog.appends_paused():
                return self.topics.update(name, queue_count, perm)

    def delete_topic(self, name: str) -> bool:
        """Delete a topic and its index files; False when there is no such topic.

        Its records stay in the commitlog until their segments are deleted, but are never
        served again: a topic created later with the same name starts empty, at offset 0,
        also after recovery re-dispatches the log."""
        with self._admin_lock:
            if self.topics.get(name) is None:
                return False
            with self.dispatcher.lock:  # no unit of the topic is being written
                with self.commitlog.appends_paused():  # writers that checked the topic are refused
                    self.topics.delete(name)
                    self.commitlog.forget_queues(name)
                self.queues.remove(name)
            saved = load_queue_table(self.paths.queue_table)
            kept = [entry for entry in saved if entry[0] != name]
            if len(kept) != len(saved):
                save_queue_table(self.paths.queue_table, kept)
            return True

    def topic(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            raise UnknownTopicError(unknown_topic(name, self.topics))
        return config

    def find_topic(self, name: str) -> TopicConfig | None:
        """The topic's config, None when there is no such topic. A topic deleted (and maybe
        created again) is another config object: callers compare with ``is``."""
        return self.topics.get(name)

    def all_topics(self) -> list[TopicConfig]:
        """Every topic, by name."""
        return self.topics.all()

    # --- flushing and closing --------------------------------------------------------------

    def flush(self) -> None:
        """Put everything appended and indexed so far on disk, and checkpoint it."""
        self.commitlog.flush()
        self._flush_indexes(thorough=True)

    def flush_log(self) -> None:
        """Put everything appended so far on disk (the indexes can be rebuilt from it)."""
        self.commitlog.flush()

    def _flush_indexes(self, thorough: bool) -> None:
        """Flush index files and save the checkpoint. Only a thorough flush (every index file)
        moves the checkpoint's index position, from which recovery re-dispatches."""
        with self._admin_lock:  # a topic's indexes are not deleted under the flush
            self.disk.check_healthy()  # a checkpoint after a failed flush could claim lost data
            indexed = self.dispatcher.position  # read before flushing: units up to it are written
            try:
                self.queues.flush(least_bytes=0 if thorough else self.config.index_flush_least_bytes)
            except OSError as err:
                raise self.disk.fail("to flush an index file", err) from err
            if thorough:
                save_queue_table(self.paths.queue_table, [(topic, queue_id, queue.max_offset, queue.indexed_end)
                                                          for (topic, queue_id), queue in self.queues.all()])
                self._index_flushed = min(indexed, self.commitlog.flushed_offset)
            Checkpoint(self.commitlog.flushed_offset, self._index_flushed, self.now_ms()).save(self.paths.checkpoint)

    def _flush_once(self) -> None:
        config = self.config
        try:
            if not self._sync:
                self.commitlog.flush()
            self.commitlog.release_mapped_pages()
            now = time.monotonic() - self._opened_at
            if now >= self._next_index_flush:
                thorough = now >= self._next_thorough_flush
                self._flush_indexes(thorough)
                self._next_index_flush = now + config.index_flush_interval_ms / 1000
                if thorough:
                    self._next_thorough_flush = now + config.index_flush_thorough_interval_ms / 1000
        except DiskFailedError:
            self._flusher.stop()  # said once, by the guard: nothing is flushed again until a restart
            return
        except (DiskFullError, OSError) as err:
            if not self._out_of_space:
                log.warning("cannot write the checkpoint or the indexes (%s); retrying every %d ms", err,
                            config.flush_interval_ms)
            self._out_of_space = True
            return
        self._out_of_space = False

    def close(self) -> None:
        """Stop cleanly: flush, index everything, checkpoint, and remove the abort marker."""
        if self._closed:
            return
        self._closed = True
        self._flusher.stop()
        self.dispatcher.stop()
        try:
            self._last_flush()
        finally:
            self.dispatcher.close()
            self.queues.close()
            self.commitlog.close()
            self.topics.close()
            os.close(self._lock_fd)

    def _last_flush(self) -> None:
        """Flush, index and checkpoint everything, and mark the stop clean; after a disk
        failure or with no room for the indexes, the abort marker stays: the next start recovers."""
        try:
            self.commitlog.flush()
            self.dispatcher.dispatch()
            self._flush_indexes(thorough=True)
        except (DiskFailedError, DiskFullError, OSError) as err:  # OSError: no room for the queue table
            log.error("the store stops without a clean flush, and recovers at its next start: %s", err)
            return
        self.paths.abort.unlink(missing_ok=True)
        fsync_dir(self.data_dir)

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _lock_data_dir(paths: StorePaths) -> int:
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUseError(f"data directory {paths.root} is in use by another broker; stop it or use "
                                "another --data-dir") from None
    return fd

