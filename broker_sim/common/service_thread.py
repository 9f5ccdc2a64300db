"""ServiceThread (RocketMQ's ServiceThread): the broker's background loops, written once.

A named daemon thread runs a task every interval, or at once when woken; ``stop()`` wakes it
and joins it. The flusher, the dispatcher, the consumer offsets writer, pop revive, the
transaction sweeper, the transaction checks of the RocketMQ doors and the remoting door's
registration with name servers are ServiceThreads.

``ServiceTask`` is its twin for a loop that must run on an asyncio event loop (it touches the
loop's transports): the same start, wake, stop and interval, as a task of that loop. The
remoting server's connection sweep is one.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import sys
import threading
from typing import Awaitable, Callable

from broker_sim.common.logs import ThrottledLog

log = logging.getLogger(__name__)


class _ServiceLoop:
    """What ServiceThread and ServiceTask share: the settings, and the wait after a failed run."""

    def __init__(self, name: str, interval_s: float, run_once, task: str | None, retry_s: float | None):
        self.name = name
        self.interval_s = interval_s
        self.task = task or name
        self.retry_s = interval_s if retry_s is None else retry_s
        # A loop that fails at every run (a full disk) says so 5 times per 10 s, then with a count.
        self._failures = ThrottledLog(log)
        if run_once is not None:
            self.run_once = run_once

    def run_once(self):
        raise NotImplementedError(f"give {type(self).__name__} a run_once callable, or override run_once")

    def _failed(self) -> float:
        """Log the exception being handled (a full disk in a sentence, anything else with its
        traceback), at a bounded rate; the wait before the next run."""
        error = sys.exc_info()[1]
        if _out_of_space(error):
            self._failures.error("%s failed: the disk is full (%s); retrying in %.1f s: free space on it", self.task,
                                 error, self.retry_s, key=self.task)
        else:
            self._failures.error("%s failed; retrying in %.1f s", self.task, self.retry_s, key=self.task,
                                 exc_info=True)
        return self.retry_s


def _out_of_space(error: BaseException | None) -> bool:
    """A write refused for want of space: the OS's ENOSPC or EDQUOT, or RocksDB's status."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return error is not None and "No space left on device" in str(error)


class ServiceThread(_ServiceLoop):
    """Runs ``run_once()`` (or the ``run_once`` given) on a thread named ``name``: first after
    ``interval_s``, then again after the wait it returns (None: ``interval_s``; 0: at once).

    ``wake()`` ends the current wait, and a wake during a run makes the next wait end at once,
    so no wake is lost. An exception is logged (as ``task`` failed) and the loop goes on after
    ``retry_s`` (default: the interval); ``run_once`` ends the loop by calling ``stop()``.
    """

    def __init__(self, name: str, interval_s: float, run_once: Callable[[], float | None] | None = None, *,
                 task: str | None = None, retry_s: float | None = None):
        super().__init__(name, interval_s, run_once, task, retry_s)
        self._woken = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the loop (again, after a stop)."""
        if self.running:
            raise RuntimeError(f"service thread {self.name} is running already")
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        # Setting only an unset event keeps frequent callers (every append wakes the dispatcher)
        # off the event's lock while the thread is busy: one wake per run is enough.
        if not self._woken.is_set():
            self._woken.set()

    def stop(self, timeout: float | None = None) -> None:
        """Wake the thread and wait (up to ``timeout``) for its run to end; a no-op when it
        has stopped. From the thread itself (inside ``run_once``) it only ends the loop."""
        self._stopped = True
        self._woken.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        wait = self.interval_s
        while True:
            if wait > 0:  # (a wake that comes while the loop runs at once stays set: no event ops then)
                self._woken.wait(wait)
                self._woken.clear()  # before the run: a wake from here on is seen by the next wait
            if self._stopped:
                return
            try:
                wait = self.run_once()
            except Exception:  # a fault here must not stop the loop silently
                wait = self._failed()
            if wait is None:
                wait = self.interval_s


class ServiceTask(_ServiceLoop):
    """ServiceThread's twin on an asyncio event loop: runs ``run_once()`` (or the ``run_once``
    given; a plain function or a coroutine function) as a task of the loop given to ``start``,
    first after ``interval_s``, then again after the wait it returns (None: ``interval_s``; 0:
    at once).

    ``wake()`` and ``stop()`` may be called from any thread. ``wake()`` ends the current wait,
    and a wake during a run makes the next wait end at once. An exception is logged (as
    ``task`` failed) and the loop goes on after ``retry_s`` (default: the interval);
    ``run_once`` ends the loop by calling ``stop()``. The task also ends when it is cancelled
    (its loop closing).
    """

    def __init__(self, name: str, interval_s: float,
                 run_once: Callable[[], float | None | Awaitable[float | None]] | None = None, *,
                 task: str | None = None, retry_s: float | None = None):
        super().__init__(name, interval_s, run_once, task, retry_s)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None  # made by each start
        self._stopped = False
        self._ended = threading.Event()  # set when the task's run ends: what stop() joins
        self._ended.set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the loop (again, after a stop) as a task of ``loop``, from any thread."""
        if self.running:
            raise RuntimeError(f"service task {self.name} is running already")
        self._stopped = False
        self._loop = loop
        self._woken = asyncio.Event()  # (bound to the loop when first awaited, there)
        self._ended.clear()
        if self._on_loop():
            run = loop.create_task(self._run(), name=self.name)
        else:
            run = asyncio.run_coroutine_threadsafe(self._run(), loop)
        run.add_done_callback(lambda _run: self._ended.set())  # also when cancelled before it ran

    def wake(self) -> None:
        loop = self._loop
        if loop is None or self._ended.is_set():
            return
        if self._on_loop():
            self._set_woken()
        else:
            try:
                loop.call_soon_threadsafe(self._set_woken)
            except RuntimeError:  # the loop closed: the task is gone with it
                pass

    def stop(self, timeout: float | None = None) -> None:
        """Wake the task and wait (up to ``timeout``) for its run to end; a no-op when it has
        stopped. From the loop's own thread it only ends the loop (a loop cannot wait for
        itself)."""
        self._stopped = True
        self.wake()
        loop = self._loop
        if loop is not None and not self._on_loop() and loop.is_running():
            self._ended.wait(timeout)

    @property
    def running(self) -> bool:
        return not self._ended.is_set()

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _set_woken(self) -> None:
        if self._woken is not None:
            self._woken.set()

    async def _run(self) -> None:
        woken = self._woken
        wait = self.interval_s
        while True:
            if wait > 0:
                try:
                    await asyncio.wait_for(woken.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                woken.clear()  # before the run: a wake from here on is seen by the next wait
            if self._stopped:
                return
            try:
                wait = self.run_once()
                if inspect.isawaitable(wait):
                    wait = await wait
            except Exception:  # a fault here must not stop the loop silently
                wait = self._failed()
            if wait is None:
                wait = self.interval_s
