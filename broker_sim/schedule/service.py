"""Delayed messages, as RocketMQ's ScheduleMessageService and timer messages.

A send whose properties ask for a delay is stored instead in ``SCHEDULE_TOPIC_XXXX`` with its
real topic and queue in REAL_TOPIC / REAL_QID and its due time in TIMER_OUT_MS:

- ``DELAY`` level n (1..18; above 18 is 18): queue n - 1; due at store time + the level's delay
  (RocketMQ's messageDelayLevel, 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h).
  A level's messages fall due in the order they were stored: each queue is delivered in order.
- ``TIMER_DELIVER_MS`` (epoch ms), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (from now): queue
  18, due then, at most ``max_timer_delay_ms`` ahead (RocketMQ's timerMaxDelaySec, 3 days).
  Due times in this queue come in any order: it is scanned once at start, then followed.

A ServiceThread delivers what is due (a new record in the real queue: new offsets, the delay
properties removed) and sleeps until the next due time or a new delayed send. How far each
queue was delivered is written to ``config/delayOffset.json`` after each pass: a crash between a
delivery and that write delivers the message again (at least once, never lost).
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
from typing import Callable

from broker_sim.common.files import write_atomically
from broker_sim.common.logs import ThrottledLog
from broker_sim.common.service_thread import ServiceThread
from broker_sim.store import (
    MessageStore,
    PutContext,
    QueueType,
    StorePaths,
    echo,
    wall_clock_ms,
)
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = fmt.SCHEDULE_TOPIC
DELAY_LEVELS_MS = tuple(s * 1000 for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                                           1800, 3600, 7200))
TIMER_QUEUE = len(DELAY_LEVELS_MS)  # queue 18: delivery times
MAX_TIMER_DELAY_MS = 3 * 24 * 3600 * 1000
REAL_TOPIC, REAL_QID, TIMER_OUT_MS = "REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS"
_TIMER_PROPERTIES = fmt.PROPERTY_TIMER_PROPERTIES
_DELAY_PROPERTIES = (fmt.PROPERTY_DELAY_TIME_LEVEL, *_TIMER_PROPERTIES)
_READ_BYTES = 1 << 20
_IDLE_S = 60.0


def delay_problem(properties: dict) -> str | None:
    """What is wrong with a send's delay properties, or None."""
    for name in _DELAY_PROPERTIES:
        value = properties.get(name)
        if value is not None and not value.lstrip("-").isdigit():
            return f"property {name} is {echo(value)}: give a whole number"
    return None


class ScheduleService:
    """Holds delayed messages of ``store`` and delivers them when due; ``now_ms`` is injected
    by tests, which step it and call ``deliver_due``."""

    def __init__(self, store: MessageStore, paths: StorePaths, now_ms: Callable[[], int] = wall_clock_ms,
                 max_timer_delay_ms: int = MAX_TIMER_DELAY_MS):
        self.store = store
        self.now_ms = now_ms
        self.max_timer_delay_ms = max_timer_delay_ms
        self._path = paths.delay_offsets
        self._lock = threading.Lock()
        self._levels, self._timer_below, self._timer_done = self._load()
        self._timer_heap: list[tuple[int, int]] = []  # (due ms, offset) of queue 18 not yet delivered
        self._timer_seen = self._timer_below  # queue 18 is read up to here
        self._wanted = 0  # the commitlog position of the latest delayed send, until it is indexed
        self._dropped_log = ThrottledLog(log)  # a deleted topic's delayed messages: 5 lines per 10 s per topic
        self._thread = ServiceThread("rmq-schedule", _IDLE_S, self._run_once, task="delivering delayed messages",
                                     retry_s=1.0)

    def start(self) -> None:
        self.store.add_arrival_listener(self._indexed)
        self._thread.start()

    def close(self) -> None:
        self._thread.stop(10)

    # --- sends -----------------------------------------------------------------------------

    def divert(self, topic: str, queue_id: int, properties: dict) -> tuple[str, int, dict] | None:
        """Where a delayed single send is stored instead, (topic, queue, properties); None when
        it is not delayed after all (level 0 or below, a delivery time already past)."""
        problem = delay_problem(properties)
        if problem:
            raise ValueError(problem)
        now = self.now_ms()
        level = int(properties.get(fmt.PROPERTY_DELAY_TIME_LEVEL, "0"))
        due, queue = None, None
        if level > 0:
            level = min(level, len(DELAY_LEVELS_MS))
            due, queue = now + DELAY_LEVELS_MS[level - 1], level - 1
        else:
            due = _timer_due(properties, now)
            if due is not None:
                if due - now > self.max_timer_delay_ms:
                    raise ValueError(f"the delivery time is {(due - now) // 1000} s ahead; at most "
                                     f"{self.max_timer_delay_ms // 1000} s (3 days) are allowed")
                queue = TIMER_QUEUE
        if due is None or due <= now:
            return None
        if self.store.find_topic(SCHEDULE_TOPIC) is None:  # made on first use, as pop's retry topics
            self.store.create_topic(SCHEDULE_TOPIC, TIMER_QUEUE + 1, QueueType.SIMPLE_CQ)
        held = {k: v for k, v in properties.items() if k not in _TIMER_PROPERTIES}
        held.update({REAL_TOPIC: topic, REAL_QID: str(queue_id), TIMER_OUT_MS: str(due)})
        return SCHEDULE_TOPIC, queue, held

    def wake(self) -> None:
        """A delayed message was stored: its due time may come before the current sleep ends.
        The thread looks once the message is indexed (readable)."""
        self._wanted = max(self._wanted, self.store.log_positions().max_offset)

    def _indexed(self) -> None:
        """The store's arrival listener (the dispatcher's thread): wake when what was wanted is readable."""
        if self._wanted and self.store.indexed_position >= self._wanted:
            self._wanted = 0
            self._thread.wake()

    # --- delivery --------------------------------------------------------------------------

    def _run_once(self) -> float:
        next_due = self.deliver_due()
        return _IDLE_S if next_due is None else max(0.0, min(_IDLE_S, (next_due - self.now_ms()) / 1000))

    def deliver_due(self) -> int | None:
        """Deliver every message due now; the next due time (None: none waits)."""
        with self._lock:
            now = self.now_ms()
            next_due = [self._deliver_level(q, now) for q in range(TIMER_QUEUE)]
            next_due.append(self._deliver_timers(now))
            self._save()
            waiting = [d for d in next_due if d is not None]
            return min(waiting) if waiting else None

    def _deliver_level(self, queue_id: int, now: int) -> int | None:
        while records := self._records(queue_id, self._levels.get(queue_id, 0)):
            for record_offset, record in records:
                due = int(record.properties.get(TIMER_OUT_MS, "0"))
                if due > now:
                    return due
                self._deliver(record)
                self._levels[queue_id] = record_offset + 1
        return None

    def _deliver_timers(self, now: int) -> int | None:
        while records := self._records(TIMER_QUEUE, self._timer_seen):
            for record_offset, record in records:
                if record_offset not in self._timer_done:
                    heapq.heappush(self._timer_heap, (int(record.properties.get(TIMER_OUT_MS, "0")), record_offset))
                self._timer_seen = record_offset + 1
        while self._timer_heap and self._timer_heap[0][0] <= now:
            _due, offset = heapq.heappop(self._timer_heap)
            found = self._records(TIMER_QUEUE, offset, 1)
            if found:
                self._deliver(found[0][1])
            self._timer_done.add(offset)
        pending = {offset for _due, offset in self._timer_heap}
        while self._timer_below < self._timer_seen and self._timer_below not in pending:
            self._timer_done.discard(self._timer_below)
            self._timer_below += 1
        return self._timer_heap[0][0] if self._timer_heap else None

    def _records(self, queue_id: int, offset: int, most: int | None = None) -> list:
        """(offset, decoded record) from ``offset`` of a schedule queue, what is stored now."""
        if self.store.find_topic(SCHEDULE_TOPIC) is None or self.store.max_offset(SCHEDULE_TOPIC, queue_id) <= offset:
            return []
        offset = max(offset, self.store.min_offset(SCHEDULE_TOPIC, queue_id))  # past deleted segments
        end = None if most is None else offset + most
        result = self.store.get_messages(SCHEDULE_TOPIC, queue_id, offset, end, max_bytes=_READ_BYTES)
        return [(batch.base_offset, fmt.decode_record(batch.data)) for batch in result.batches]

    def _deliver(self, record) -> None:
        properties = dict(record.properties)
        topic, queue_id = properties.pop(REAL_TOPIC, ""), int(properties.pop(REAL_QID, "0"))
        for name in (TIMER_OUT_MS, fmt.PROPERTY_DELAY_TIME_LEVEL):
            properties.pop(name, None)
        if self.store.find_topic(topic) is None:
            self._dropped_log.warning("a delayed message for topic %s is dropped: the topic was deleted", echo(topic),
                                      key=topic, extra={"topic": topic, "queue": queue_id})
            return
        context = PutContext(record.born_timestamp, record.born_host, reconsume_times=record.reconsume_times,
                             stored_before=True)
        result = self.store.put_message(topic, queue_id, bytes(record.body), properties=properties, flag=record.flag,
                                        sys_flag=record.sys_flag, context=context)
        if not result.ok:  # raised: the pass stops here and is retried, nothing is skipped
            raise RuntimeError(f"delivering a delayed message to {topic} queue {queue_id} failed: {result.detail}")

    # --- progress --------------------------------------------------------------------------

    def _load(self) -> tuple[dict, int, set]:
        try:
            saved = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}, 0, set()
        except (OSError, ValueError) as bad:
            log.warning("%s cannot be read (%s): delayed messages are delivered again from the start", self._path, bad)
            return {}, 0, set()
        levels = {int(q): int(o) for q, o in saved.get("levels", {}).items()}
        timer = saved.get("timer", {})
        return levels, int(timer.get("below", 0)), {int(o) for o in timer.get("delivered", [])}

    def _save(self) -> None:
        state = {"levels": {str(q): o for q, o in sorted(self._levels.items())},
                 "timer": {"below": self._timer_below, "delivered": sorted(self._timer_done)}}
        data = json.dumps(state).encode()
        if data != getattr(self, "_saved", None):
            write_atomically(self._path, data)
            self._saved = data


def _timer_due(properties: dict, now: int) -> int | None:
    if "TIMER_DELIVER_MS" in properties:
        return int(properties["TIMER_DELIVER_MS"])
    if "__STARTDELIVERTIME" in properties:
        return int(properties["__STARTDELIVERTIME"])
    if "TIMER_DELAY_SEC" in properties:
        return now + int(properties["TIMER_DELAY_SEC"]) * 1000
    if "TIMER_DELAY_MS" in properties:
        return now + int(properties["TIMER_DELAY_MS"])
    return None
