"""A process whose SDK channels are busy can still start children the way PySpark starts its JVM
(Popen with preexec_fn, a real fork): each child gets its own pipes intact.

gRPC's fork handlers, on by default, closed its pollers' descriptors around such a fork; the
child then read EOF from its stdin (PySpark's JVM exits on that: JAVA_GATEWAY_EXITED) and the
parent logged "epoll_wait error: Bad file descriptor". About one fork in thirty broke here.
"""

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import signal, subprocess, threading
    import broker_sim
    from rmq_spark import Admin, Message, Producer

    FORKS = 300
    broken = 0
    with broker_sim.embedded() as endpoint, Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("forks", 4)
        done = threading.Event()

        def send():
            while not done.is_set():
                producer.send(Message(topic="forks", body=b"x"))

        senders = [threading.Thread(target=send) for _ in range(2)]
        for thread in senders:
            thread.start()
        try:
            for _ in range(FORKS):
                child = subprocess.Popen(["/bin/sh", "-c", "read line; echo got $line"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                out, _ = child.communicate(b"hello\\n", timeout=30)
                broken += out != b"got hello\\n"
        finally:
            done.set()
            for thread in senders:
                thread.join()
    print(f"broken {broken} of {FORKS}")
""")


def test_children_forked_beside_busy_channels_keep_their_pipes(tmp_path):
    result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "broken 0 of 300" in result.stdout, result.stdout + result.stderr[-3000:]
    assert "Bad file descriptor" not in result.stderr
