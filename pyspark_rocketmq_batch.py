"""How PySpark finds the format ``rocketmq-batch``, with no register call.

- PySpark registers the ``DefaultSource`` of every top-level module named ``pyspark_*`` that its
  Python workers can import (``pkgutil.iter_modules``): this module, after ``pip install``.
- Those workers run ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``: for a script started as
  ``.venv/bin/python script.py`` without activating the environment, a Python that lacks the
  package. ``start_up`` (run at every start of the environment's Python by the installed
  ``rocketmq_batch_spark.pth``) makes the workers default to the driver's own interpreter in a
  virtual environment, and, where a worker's Python truly lacks the package (a cluster whose
  workers were not given it), puts one sentence before Spark's DATA_SOURCE_NOT_FOUND saying which
  interpreter lacks it and what to set.
- ``df.write`` and ``writeStream`` find a Python data source through the calling thread's active
  session in Spark's JVM, which PySpark sets only in the thread that created the session: a write
  from another thread fails with DATA_SOURCE_NOT_FOUND though the package is there. The sentence
  then names the thread and ``rmq_spark.spark.register(spark)``, which fixes it.
- Spark wraps a data source's error in its own (``[PYTHON_DATA_SOURCE_ERROR] ...``, then the
  worker's traceback), so the sentence comes last; an uncaught one is printed first as well
  (``lead_sentence``). With ``spark.sql.execution.pyspark.udf.hideTraceback.enabled=true`` Spark
  itself puts it on the first line.

This module stays light (no pyspark import until ``DefaultSource`` is asked for): it is imported
at every interpreter start.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

__all__ = ["DefaultSource", "start_up", "lead_sentence", "missing_format_hint"]  # noqa: F822 (DefaultSource: __getattr__)

_FORMAT = "rocketmq-batch"
_PACKAGE = "rocketmq-batch-spark"
# The last line of a worker's traceback: the type of one of our errors (rmq_spark.errors, whose root and wire
# errors are defined in rmq_wire.errors) and its sentence.
_OUR_ERROR = re.compile(r"(?:rmq_spark|rmq_wire)\.errors\.\w+: (.+)")


def __getattr__(name: str):
    if name == "DefaultSource":  # PySpark's lookup asks hasattr(module, "DefaultSource")
        from rmq_spark.spark.datasource import RocketMQBatchDataSource

        return RocketMQBatchDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def start_up() -> None:
    """In a virtual environment, Spark's Python workers run this interpreter unless the user chose
    one (``PYSPARK_PYTHON``; Spark's ``spark.pyspark.python`` takes precedence over both); and an
    uncaught DATA_SOURCE_NOT_FOUND for ``rocketmq-batch`` opens with the reason."""
    if "PYSPARK_PYTHON" not in os.environ and sys.prefix != sys.base_prefix and sys.executable:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if sys.excepthook is sys.__excepthook__:  # never over another tool's hook (IPython has its own)
        sys.excepthook = _excepthook
    if threading.excepthook is threading.__excepthook__:  # a thread's uncaught error
        threading.excepthook = _thread_excepthook


def lead_sentence(error: BaseException) -> str | None:
    """What to print before ``error``'s traceback: the sentence of the error of ours that Spark
    wrapped in it, or why Spark's workers cannot find the format; None for anyone else's."""
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a hint must never hide the error itself
        return None
    ours = _OUR_ERROR.findall(text)
    if ours:
        return f"{_FORMAT}: {ours[-1].strip()}"
    return missing_format_hint(text)


def missing_format_hint(text: str) -> str | None:
    """The sentence for an error whose ``text`` is Spark's DATA_SOURCE_NOT_FOUND for
    ``rocketmq-batch``: the calling thread has no active session, or the workers' Python cannot
    import this package; None otherwise. Called in the thread that met the error."""
    if "DATA_SOURCE_NOT_FOUND" not in text or _FORMAT not in text:
        return None
    if _thread_lacks_a_session():
        return (f"{_FORMAT}: PySpark finds a Python data source for df.write and writeStream through the calling "
                f"thread's active SparkSession, and thread {threading.current_thread().name!r} has none (PySpark "
                "sets it only in the thread that created the session): call rmq_spark.spark.register(spark) in "
                "this thread before it writes.")
    python, chosen_by = _workers_python()
    try:
        found = subprocess.run([python, "-c", "import pyspark_rocketmq_batch"], capture_output=True,
                               cwd="/", timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if found:
        return None
    return (f"{_FORMAT}: Spark's Python workers run {python} ({chosen_by}), which cannot import the package "
            f"{_PACKAGE}: install it into that Python, or set PYSPARK_PYTHON={sys.executable} (the Python "
            f"that has it) before the SparkSession starts.")


def _thread_lacks_a_session() -> bool:
    """Whether Spark's JVM has no active session for the calling thread (classic PySpark only)."""
    context_module = sys.modules.get("pyspark.core.context")
    context = getattr(getattr(context_module, "SparkContext", None), "_active_spark_context", None)
    if context is None:
        return False
    try:
        return context._jvm.org.apache.spark.sql.SparkSession.getActiveSession().isEmpty()
    except Exception:  # noqa: BLE001 - a stopped JVM: no hint rather than a second error
        return False


def _workers_python() -> tuple[str, str]:
    """The interpreter Spark starts its Python workers with, and what chose it."""
    session_module = sys.modules.get("pyspark.sql.session")
    if session_module is not None:
        try:
            session = session_module.SparkSession.getActiveSession()
            chosen = session.conf.get("spark.pyspark.python", None) if session is not None else None
        except Exception:  # noqa: BLE001 - a stopped or broken session: fall back to the environment
            chosen = None
        if chosen:
            return chosen, "spark.pyspark.python"
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"], "PYSPARK_PYTHON"
    return "python3", "python3 from PATH, as PYSPARK_PYTHON is not set"


def _excepthook(kind, value, traceback) -> None:
    hint = lead_sentence(value)
    if hint:
        print(hint, file=sys.stderr, flush=True)
    sys.__excepthook__(kind, value, traceback)


def _thread_excepthook(args) -> None:
    hint = lead_sentence(args.exc_value) if args.exc_value is not None else None
    if hint:
        print(hint, file=sys.stderr, flush=True)
    threading.__excepthook__(args)
