"""A PySpark worker module (``spark.python.worker.module``) for the exactly-once tests: the
first attempt of partition 0 of a task that writes half messages SIGKILLs its own Python worker
once it has prepared ``HALF`` of them, once per run (``KILL_MARKER``, a file it creates first,
says it did). Spark then fails the task ("Python worker exited unexpectedly") and, with task
retries on (``local[N,F]``), runs it again in a new worker.

Imported by the workers that PySpark's daemon forks, through ``PYTHONPATH``; the marker's path
comes in the ``KILL_MARKER`` environment variable, which the driver's environment hands on. The
name starts with "pyspark" because PySpark's daemon imports no other worker module
(pyspark/daemon.py: it falls back to ``pyspark.worker`` silently)."""

from __future__ import annotations

import os
import signal

from pyspark import TaskContext
from pyspark.worker import main as _worker_main

from rmq_spark.client.remoting import RemotingTransport

HALF = 100
_send_half = RemotingTransport.send_half
_prepared: dict[tuple, int] = {}  # (stage, partition, attempt) -> half messages sent


def _send_half_then_die(self, *args, **kwargs):
    context = TaskContext.get()
    if context is not None and context.partitionId() == 0 and context.attemptNumber() == 0:
        task = (context.stageId(), context.partitionId(), context.attemptNumber())
        _prepared[task] = _prepared.get(task, 0) + 1
        marker = os.environ["KILL_MARKER"]
        if _prepared[task] == HALF and not os.path.exists(marker):
            with open(marker, "w") as note:
                note.write(f"stage {task[0]}, partition 0, attempt 0: killed with {HALF} rows prepared\n")
            os.kill(os.getpid(), signal.SIGKILL)
    return _send_half(self, *args, **kwargs)


def main(infile, outfile) -> None:
    RemotingTransport.send_half = _send_half_then_die
    _worker_main(infile, outfile)
