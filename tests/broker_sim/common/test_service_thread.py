"""ServiceThread: the background-loop pattern (run on an interval or when woken, stop joins)."""

import threading
import time

import pytest

from broker_sim.common.service_thread import ServiceThread

LONG_S = 30.0  # an interval no test waits out: a run that came, came from a wake
BOUND_S = 10.0  # the longest any test waits for a thread to react


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
def started():
    threads = []

    def start(run_once, interval_s=LONG_S, **kwargs):
        thread = ServiceThread("test-service", interval_s, run_once, **kwargs)
        thread.start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.stop(BOUND_S)


def test_wake_runs_it_at_once_and_it_runs_on_its_interval(started):
    woken = Counter()
    thread = started(woken)
    thread.wake()
    assert woken.ran.acquire(timeout=BOUND_S), "a wake did not run the task"
    ticking = Counter()
    started(ticking, interval_s=0.01)
    for _ in range(3):
        assert ticking.ran.acquire(timeout=BOUND_S), "the task did not run on its interval"


def test_a_wake_during_a_run_is_not_lost(started):
    inside, release = threading.Event(), threading.Event()
    runs = Counter()

    def run_once():
        runs()
        if runs.runs == 1:
            inside.set()
            release.wait(BOUND_S)

    thread = started(run_once)
    thread.wake()
    assert inside.wait(BOUND_S)
    thread.wake()  # while the first run is busy
    release.set()
    assert runs.ran.acquire(timeout=BOUND_S) and runs.ran.acquire(timeout=BOUND_S), "the second wake was lost"


def test_zero_runs_again_at_once(started):
    runs = Counter(answers=[0, 0, None])
    thread = started(runs)
    thread.wake()
    for _ in range(3):
        assert runs.ran.acquire(timeout=BOUND_S)


def test_stop_joins_the_thread_and_a_second_stop_is_a_no_op(started):
    thread = started(Counter())
    assert thread.running
    thread.stop(BOUND_S)
    assert not thread.running
    thread.stop(BOUND_S)
    assert not thread.running
    ServiceThread("never-started", LONG_S, Counter()).stop(BOUND_S)


def test_a_stopped_thread_starts_again(started):
    runs = Counter()
    thread = started(runs)
    thread.stop(BOUND_S)
    thread.start()
    thread.wake()
    assert runs.ran.acquire(timeout=BOUND_S), "the restarted loop does not run"


def test_an_exception_is_logged_and_the_loop_goes_on(started, caplog):
    runs = Counter(answers=[RuntimeError("boom")])
    thread = started(runs, task="the test task", retry_s=0.01)
    thread.wake()
    assert runs.ran.acquire(timeout=BOUND_S) and runs.ran.acquire(timeout=BOUND_S), "the loop died with the error"
    assert thread.running
    assert "the test task failed; retrying" in caplog.text and "boom" in caplog.text


def test_run_once_stops_its_own_loop(started):
    holder = {}

    def run_once():
        holder["thread"].stop()  # from the thread itself: no join of itself
        return 0

    holder["thread"] = thread = started(run_once)
    thread.wake()
    for _ in range(int(BOUND_S / 0.01)):
        if not thread.running:
            break
        time.sleep(0.01)
    assert not thread.running, "the loop went on after run_once stopped it"


def test_importing_the_store_loads_no_rocksdb():
    """The concurrent dispatcher's worker processes import the store: RocksDB (pop's and
    transactions' state) is loaded only by whoever opens it."""
    import subprocess
    import sys

    code = "import sys, broker_sim.store; print('rocksdict' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_a_loop_failing_at_every_run_logs_a_few_lines_and_a_full_disk_in_a_sentence(started, caplog):
    """Issue 44: revive on a full disk logged an ERROR with a traceback at each retry, 5 a
    second. Now 5 lines per 10 s for a loop, a full disk without a traceback."""
    import errno
    import logging

    failures = Counter([OSError(errno.ENOSPC, "No space left on device")] * 60)
    with caplog.at_level(logging.ERROR, logger="broker_sim.common.service_thread"):
        thread = started(failures, interval_s=0.001, retry_s=0.001)
        deadline = time.monotonic() + BOUND_S
        while failures.runs < 60:
            assert time.monotonic() < deadline, f"{failures.runs} runs in {BOUND_S} s"
            failures.ran.acquire(timeout=BOUND_S)
        thread.stop(BOUND_S)
    lines = [r for r in caplog.records if r.name == "broker_sim.common.service_thread"]
    told = [r for r in lines if "the disk is full" in r.getMessage()]
    assert len(told) == 5 and not any(r.exc_info for r in told), [r.getMessage() for r in lines]
    assert "free space on it" in told[0].getMessage()
