"""ServiceTask: ServiceThread's twin on an asyncio event loop (run on an interval or when woken,
from any thread; stop waits for the task to end), with ServiceThread's tests mirrored."""

import asyncio
import threading
import time

import pytest

from broker_sim.common.service_thread import ServiceTask

LONG_S = 30.0  # an interval no test waits out: a run that came, came from a wake
BOUND_S = 10.0  # the longest any test waits for a task to react


class Counter:
    """A run_once that counts its runs and signals each."""

    def __init__(self, answers=()):
        self.runs = 0
        self.answers = list(answers)  # raised if an exception, else returned; then None
        self.ran = threading.Semaphore(0)

    def __call__(self):
        self.runs += 1
        self.ran.release()
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(BOUND_S)
    loop.close()


@pytest.fixture
def started(loop):
    tasks = []

    def start(run_once, interval_s=LONG_S, **kwargs):
        task = ServiceTask("test-service", interval_s, run_once, **kwargs)
        task.start(loop)
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.stop(BOUND_S)


def test_wake_runs_it_at_once_and_it_runs_on_its_interval(started):
    woken = Counter()
    task = started(woken)
    task.wake()
    assert woken.ran.acquire(timeout=BOUND_S), "a wake did not run the task"
    ticking = Counter()
    started(ticking, interval_s=0.01)
    for _ in range(3):
        assert ticking.ran.acquire(timeout=BOUND_S), "the task did not run on its interval"


def test_a_wake_during_a_run_is_not_lost(started, loop):
    inside, release = threading.Event(), threading.Event()
    runs = Counter()

    async def run_once():  # a coroutine run: the loop serves the wake while the run waits
        runs()
        if runs.runs == 1:
            inside.set()
            await loop.run_in_executor(None, release.wait, BOUND_S)

    task = started(run_once)
    task.wake()
    assert inside.wait(BOUND_S)
    task.wake()  # while the first run is busy
    release.set()
    assert runs.ran.acquire(timeout=BOUND_S) and runs.ran.acquire(timeout=BOUND_S), "the second wake was lost"


def test_a_wake_from_the_loop_itself_runs_it_again(started):
    holder = {}
    runs = Counter()

    def run_once():
        runs()
        if runs.runs == 1:
            holder["task"].wake()  # on the loop's thread, inside the run
        return LONG_S

    holder["task"] = task = started(run_once)
    task.wake()
    assert runs.ran.acquire(timeout=BOUND_S) and runs.ran.acquire(timeout=BOUND_S), "the wake from the loop was lost"


def test_zero_runs_again_at_once(started):
    runs = Counter(answers=[0, 0, None])
    task = started(runs)
    task.wake()
    for _ in range(3):
        assert runs.ran.acquire(timeout=BOUND_S)


def test_stop_waits_for_the_task_and_a_second_stop_is_a_no_op(started):
    task = started(Counter())
    assert task.running
    task.stop(BOUND_S)
    assert not task.running
    task.stop(BOUND_S)
    assert not task.running
    ServiceTask("never-started", LONG_S, Counter()).stop(BOUND_S)


def test_a_stopped_task_starts_again(started, loop):
    runs = Counter()
    task = started(runs)
    task.stop(BOUND_S)
    task.start(loop)
    task.wake()
    assert runs.ran.acquire(timeout=BOUND_S), "the restarted loop does not run"


def test_an_exception_is_logged_and_the_loop_goes_on(started, caplog):
    runs = Counter(answers=[RuntimeError("boom")])
    task = started(runs, task="the test task", retry_s=0.01)
    task.wake()
    assert runs.ran.acquire(timeout=BOUND_S) and runs.ran.acquire(timeout=BOUND_S), "the loop died with the error"
    assert task.running
    assert "the test task failed; retrying" in caplog.text and "boom" in caplog.text


def test_run_once_stops_its_own_loop(started):
    holder = {}

    def run_once():
        holder["task"].stop()  # from the loop's thread: no wait for itself
        return 0

    holder["task"] = task = started(run_once)
    task.wake()
    _wait_until(lambda: not task.running, "the loop went on after run_once stopped it")


def test_a_cancelled_task_is_not_running(started, loop):
    """A loop that closes cancels its tasks (the remoting server's stop does): the task ends."""
    task = started(Counter())
    asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(BOUND_S)
    _wait_until(lambda: not task.running, "the cancelled task still counts as running")


async def _cancel_all():
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.cancel()


def _wait_until(condition, failure):
    for _ in range(int(BOUND_S / 0.01)):
        if condition():
            return
        time.sleep(0.01)
    pytest.fail(failure)
