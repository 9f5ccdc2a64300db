"""Suspended pulls (RocketMQ's PullRequestHoldService): a pull that finds nothing new waits,
holding no thread, until messages arrive (the store's arrival listener wakes it) or its
suspend timeout passes, then answers with what a pull finds then. The v2 door's PullMessage
waits the same way (``arrival``)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from rmq_spark.protocol.remoting import RemotingCommand, ResponseCode


class PullHold:
    def __init__(self, loop: asyncio.AbstractEventLoop, pool: Executor | None = None):
        self._loop = loop
        self._pool = pool  # where a woken pull reads while it may wait for the index (None: the loop's default)
        self._waiting: set[asyncio.Future] = set()
        self._wake_scheduled = False

    def suspend(self, request: RemotingCommand, pull, requests):
        """A coroutine answering ``pull`` once it finds messages or its suspend time is over."""
        pull.commit_offset = -1  # committed by the first try

        async def wait() -> RemotingCommand:
            deadline = self._loop.time() + pull.suspend_ms / 1000
            while True:
                await self.arrival(deadline - self._loop.time())
                if requests.core.reads_may_wait():
                    answer = await self._loop.run_in_executor(self._pool, requests.pull_once, request, pull)
                else:
                    answer = requests.pull_once(request, pull)
                if answer.code != ResponseCode.PULL_NOT_FOUND or self._loop.time() >= deadline:
                    return answer

        return wait()

    async def arrival(self, timeout_s: float) -> None:
        """Return when messages next become readable, or after ``timeout_s``."""
        woken = self._loop.create_future()
        self._waiting.add(woken)
        try:
            await asyncio.wait_for(woken, max(0.0, timeout_s))
        except TimeoutError:
            pass
        finally:
            self._waiting.discard(woken)

    def arrived(self) -> None:
        """Messages became readable (called on the dispatcher's thread): wake the held pulls,
        once per loop turn however many dispatches came."""
        if not self._wake_scheduled and self._waiting:
            self._wake_scheduled = True
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        for woken in list(self._waiting):
            if not woken.done():
                woken.set_result(None)
