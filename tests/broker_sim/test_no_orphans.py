"""A test run cut off (a timeout's SIGTERM, a SIGKILL) runs no fixture's teardown: the brokers and
JVMs it started must die with it, not go on using the machine's two cores."""

import os
import signal
import subprocess
import sys
import textwrap
import time

_STARTER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from broker_sim.testing import broker_process

    with broker_process(Path(sys.argv[1])) as (endpoint, process):
        print(process.pid, flush=True)
        sys.stdin.read()  # until killed
""")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone too
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_broker_process_dies_with_the_process_that_started_it(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, str(tmp_path / "data")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        broker_pid = int(starter.stdout.readline())
        assert not _gone(broker_pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(30)
        deadline = time.monotonic() + 30
        while not _gone(broker_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(broker_pid), "the broker outlived the test process that started it"
    finally:
        starter.kill()
        starter.wait(30)
