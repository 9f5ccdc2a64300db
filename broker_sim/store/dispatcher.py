"""The dispatcher (RocketMQ's ReputMessageService): builds the indexes from the commitlog.

This is the serial mode, one record at a time on one thread; ``concurrent_dispatcher`` holds
the concurrent mode (RIP-52), which writes the same index files.

It reads forward from its own position, parses each record's header and appends one index
unit per record to the record's queue: one per message on a SimpleCQ topic, one per inner
batch on a BatchCQ topic. A message is readable only once dispatched; waiters are woken after
each pass. Dispatching is idempotent per queue (a unit whose offset is already indexed is
skipped), so recovery can re-dispatch from any record boundary at or before the indexed end.

An index file that cannot grow (the disk is full) stops the pass before the record: it stays
in the log, acknowledged, and the thread retries until there is room (the record becomes
readable then); the broker's reserve of free space (``disk.py``) makes that rare.

Records of a topic that no longer exists, or that lie below the topic's ``created_at_offset``
(they belong to an earlier topic of the same name, deleted since), are not indexed. Each
record is indexed under ``lock``, which topic deletion holds while it removes the indexes.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from broker_sim.common.service_thread import ServiceThread
from broker_sim.store.commitlog import CommitLog
from broker_sim.store.consume_queue import ConsumeQueueTable
from broker_sim.store.errors import DiskFullError
from broker_sim.store.message_filter import tags_code
from broker_sim.store.topics import QueueType, TopicTable
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

_TAGS_KEY = fmt.PROPERTY_TAGS.encode()
_INNER_NUM_KEY = fmt.PROPERTY_INNER_NUM.encode()
_IDLE_WAIT_S = 0.05
_NO_ROOM_WAIT_S = 0.2
_FAILED_WAIT_S = 1.0


class Dispatcher:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueueTable, topics: TopicTable,
                 limit: Callable[[], int], on_progress: Callable[[], None]):
        self.commitlog = commitlog
        self.queues = queues
        self.topics = topics
        self.limit = limit  # how far records may be dispatched (written, or flushed in sync mode)
        self.on_progress = on_progress
        self.position = commitlog.min_offset  # the next record to dispatch
        self.lock = threading.Lock()  # held while a record is indexed
        self._warned: set = set()  # topics already warned about: one warning each, not one per record
        self._no_room = False  # an index file could not grow: said once until there is room again
        self._failing = False  # the last pass failed: it is retried
        self._thread = ServiceThread("rmq-dispatcher", _IDLE_WAIT_S, self._run_once)

    def dispatch(self, limit: int | None = None) -> int:
        """Index every record from ``position`` to ``limit``; returns how many records were
        read (indexed or skipped; BLANK markers are not records)."""
        limit = self.limit() if limit is None else limit
        count = 0
        start = position = self.position
        try:
            while position < limit:
                segment = self.commitlog.segment_at(position)
                if segment is None:
                    break
                with self.lock:
                    if fmt.BLANK.unpack_from(segment.map, position - segment.start)[1] == fmt.BLANK_MAGIC:
                        position = self.position = segment.end  # the segment's end: the next record opens the next one
                        continue
                    position = self.position = self._dispatch_record(segment, position)
                count += 1
        finally:  # also when a record could not be indexed: those before it are readable
            if position != start:
                self.on_progress()
        return count

    def _dispatch_record(self, segment, position: int) -> int:
        buf = segment.map
        pos = position - segment.start
        (total, magic, _crc, queue_id, _flag, queue_offset, _phys, sys_flag, _born, _born_host, store_ts,
         _store_host, _reconsume, _prepared, body_len) = fmt.HEADER.unpack_from(buf, pos)
        at = pos + fmt.HEADER.size + body_len
        topic_len = buf[at]
        topic_raw = buf[at + 1 : at + 1 + topic_len]
        properties = buf[at + 3 + topic_len : pos + total]
        topic = self.topics.get(topic_raw.decode())
        if topic is None or queue_id >= topic.stored_queues or position < topic.created_at_offset:
            self._warn_once(topic_raw, "record at %d names topic %r queue %d, which does not exist (or was "
                            "deleted since): not indexed", position, topic_raw, queue_id)
            return position + total
        if sys_flag & fmt.SysFlag.INNER_BATCH and topic.queue_type is not QueueType.BATCH_CQ:
            self._warn_once(topic_raw, "record at %d is an inner batch of SimpleCQ topic %r: not indexed",
                            position, topic_raw)
            return position + total
        count = 1
        if sys_flag & fmt.SysFlag.INNER_BATCH:
            count = int(fmt.find_property(properties, _INNER_NUM_KEY))
        queue = self.queues.get(topic.name, queue_id, topic.queue_type)
        queue.put(position, total, tags_code(fmt.find_property(properties, _TAGS_KEY)), store_ts, queue_offset, count)
        return position + total

    def _warn_once(self, topic: bytes, message: str, *args) -> None:
        key = (bytes(topic), message)
        if key not in self._warned:
            if len(self._warned) > 1024:
                self._warned.clear()
            self._warned.add(key)
            log.warning(message + " (said once per topic)", *args,
                        extra={"topic": bytes(topic).decode("utf-8", "replace")})

    # --- the background thread ---------------------------------------------------------------

    def wake(self) -> None:
        self._thread.wake()

    def start(self) -> None:
        self._thread.start()
        self._thread.wake()  # a first pass at once, as after each append

    @property
    def stalled(self) -> bool:
        """Whether indexing does not go on by itself now: the thread is stopped, an index file
        has no room to grow, or passes fail. Reads do not wait for the index then."""
        return self._no_room or self._failing or not self._thread.running

    def _run_once(self) -> float:
        """One pass; returns how long to wait for new records before the next."""
        try:
            dispatched = self.dispatch()
        except DiskFullError as err:
            if not self._no_room:
                log.warning("indexing waits at commitlog offset %d for disk space (%s): the records after it "
                            "are stored but not readable until there is room", self.position, err)
                self._no_room = True
            return _NO_ROOM_WAIT_S
        except Exception:  # a fault here must not stop indexing silently
            log.exception("dispatch failed at commitlog offset %d; retrying", self.position)
            self._failing = True
            return _FAILED_WAIT_S
        self._failing = False
        if self._no_room:
            log.warning("index files have room again: indexing goes on from commitlog offset %d", self.position)
            self._no_room = False
        return 0 if dispatched else _IDLE_WAIT_S

    def stop(self) -> None:
        """Stop the background thread; ``dispatch()`` still works (the store's last pass)."""
        self._thread.stop()

    def close(self) -> None:
        """Release what dispatching holds (nothing, in serial mode)."""
