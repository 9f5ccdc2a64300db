"""Suspended pulls (RocketMQ's PullRequestHoldService): a pull that finds nothing new waits,
holding no thread, until messages arrive (the store's arrival listener wakes it) or its
suspend timeout passes, then answers with what a pull finds then (the remoting door's
``suspended``). The v2 door's PullMessage and our contract's GetOffsets wait the same way
(``arrival``).

At most ``max_parked`` pulls wait at once (``ClientLimits.max_parked_pulls``): one past it is
refused at once (TOO_MANY_REQUESTS: SYSTEM_BUSY on remoting, whose clients wait and pull
again). A pull waits under its queue and offset, as RocketMQ's hold keys
its pulls by topic@queueId: an arrival wakes only the pulls of queues that now end past their
offset (one look at each queue's end offset, ``end_offset``), not every pull of the broker;
those are woken ``WAKE_BATCH`` at a time, one batch a turn of the event loop, so that other
clients' requests are read between batches.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Callable

from broker_sim.core.errors import Reason, refused
from broker_sim.core.limits import ClientLimits

WAKE_BATCH = 256  # pulls woken in one turn of the event loop, at most


class PullHold:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_parked: int = ClientLimits.max_parked_pulls,
                 end_offset: Callable[[str, int], int] | None = None, pool: Executor | None = None):
        self._loop = loop
        self._pool = pool  # where a woken pull reads while it may wait for the index (None: the loop's default)
        self.max_parked = max_parked
        self.end_offset = end_offset  # (topic, queue id) -> the queue's end offset; raises LookupError
        self.parked = 0  # pulls waiting for messages now
        self._waiting: set[asyncio.Future] = set()  # waiting for any arrival
        self._by_queue: dict[tuple, dict[asyncio.Future, int]] = {}  # (topic, queue id) -> {waiter: its offset}
        self._wake_scheduled = False
        self._to_wake: list[asyncio.Future] = []  # woken by batches, last first

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    async def read(self, may_wait: bool, read: Callable, *args):
        """``read(*args)`` for a woken waiter: on the hold's pool when it may wait (for the
        index), else at once on the loop."""
        if may_wait:
            return await self._loop.run_in_executor(self._pool, read, *args)
        return read(*args)

    async def arrival(self, timeout_s: float, queue: tuple | None = None) -> None:
        """Return when messages next become readable (with ``queue``, (topic, queue id, offset):
        once that queue ends past the offset), or after ``timeout_s``; raises TOO_MANY_REQUESTS
        when ``max_parked`` pulls wait already."""
        self.check_room()
        woken = self._loop.create_future()
        if queue is None or self.end_offset is None:
            self._waiting.add(woken)
        else:
            self._by_queue.setdefault(queue[:2], {})[woken] = queue[2]
        self.parked += 1
        try:
            await asyncio.wait_for(woken, max(0.0, timeout_s))
        except TimeoutError:
            pass
        finally:
            self.parked -= 1
            if queue is None or self.end_offset is None:
                self._waiting.discard(woken)
            else:
                waiters = self._by_queue.get(queue[:2])
                if waiters is not None:
                    waiters.pop(woken, None)
                    if not waiters:
                        del self._by_queue[queue[:2]]

    def check_room(self) -> None:
        """TOO_MANY_REQUESTS when as many pulls wait as allowed."""
        if self.parked >= self.max_parked:
            raise refused(Reason.TOO_MANY_REQUESTS,
                          f"[TOO_MANY_REQUESTS] {self.parked} pulls wait for messages on this broker, its "
                          "limit (--max-parked-pulls): pull again later, hold fewer pulls waiting at once, or "
                          "raise --max-parked-pulls")

    def arrived(self) -> None:
        """Messages became readable (called on the dispatcher's thread): wake the held pulls
        they are for, once per loop turn however many dispatches came."""
        if not self._wake_scheduled and self.parked:
            self._wake_scheduled = True
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        running = bool(self._to_wake)
        self._to_wake = [*self._waiting, *self._readable()]  # a batch chain under way takes these instead
        if not running:
            self._wake_batch()

    def _readable(self) -> list[asyncio.Future]:
        """The waiters whose queue now ends past their offset (all of a queue that is gone)."""
        found = []
        for (topic, queue_id), waiters in self._by_queue.items():
            try:
                end = self.end_offset(topic, queue_id)
            except LookupError:
                end = None
            found += [woken for woken, offset in waiters.items() if end is None or end > offset]
        return found

    def _wake_batch(self) -> None:
        batch = self._to_wake[-WAKE_BATCH:]
        del self._to_wake[-WAKE_BATCH:]
        for woken in batch:
            if not woken.done():
                woken.set_result(None)
        if self._to_wake:
            self._loop.call_soon(self._wake_batch)  # the next batch after the loop's next look at its sockets
