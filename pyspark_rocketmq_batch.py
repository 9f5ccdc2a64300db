"""How PySpark finds the format ``rocketmq-batch``, with no register call.

- PySpark registers the ``DefaultSource`` of every top-level module named ``pyspark_*`` that its
  Python workers can import (``pkgutil.iter_modules``): this module, after ``pip install``.
- Those workers run ``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``, else ``python3`` from
  ``PATH`` (and so does every task of a data source found this way, on the executors too:
  docs/deployment.md); for a script started as
  ``.venv/bin/python script.py`` without activating the environment, a Python that lacks the
  package. ``start_up`` (run at every start of the environment's Python by the installed
  ``rocketmq_batch_spark.pth``) makes the workers default to the driver's own interpreter in a
  virtual environment, and, where a worker's Python truly lacks the package (a cluster whose
  workers were not given it), puts one sentence before Spark's DATA_SOURCE_NOT_FOUND saying which
  interpreter lacks it and what to set.
- PySpark's lookup swallows an ImportError, so a connector that cannot be imported there (a
  dependency missing, a PySpark it does not support) would be DATA_SOURCE_NOT_FOUND: the lookup
  finds a stand-in instead (``unavailable_source``) whose every read and write fails saying why.
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
# ... and the sentence of the stand-in for a connector that cannot be imported (unavailable_source).
_UNAVAILABLE = re.compile(r"ImportError: (rocketmq-batch cannot be loaded .+)")
# Spark lets a Python sink take append and complete mode (its write builder can truncate, and has
# no update-as-append): an update-mode query fails at its start in Spark's own words, before the
# sink is asked; an uncaught one is led by this.
UPDATE_MODE = "rocketmq-batch does not support Update mode"
UPDATE_MODE_HINT = (f"{_FORMAT}: Spark lets a Python sink take append and complete mode, not update: write an "
                    f"update-mode query with foreachBatch, each micro-batch exactly once by "
                    f"df.write.format('{_FORMAT}').option('sinkId', NAME).option('batchId', batch_id) "
                    "(docs/spark-writes.md#aggregations-update-and-complete-mode)")


def __getattr__(name: str):
    if name == "DefaultSource":  # PySpark's lookup asks hasattr(module, "DefaultSource")
        try:
            from rmq_spark.spark.datasource import RocketMQBatchDataSource
        except ImportError as error:  # PySpark's lookup would swallow it: DATA_SOURCE_NOT_FOUND
            return unavailable_source(error)
        return RocketMQBatchDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def unavailable_source(error: ImportError):
    """A stand-in ``rocketmq-batch`` for a Python where the connector cannot be imported (a
    PySpark it does not support, a dependency missing): found by PySpark's lookup as the real one
    is, it fails every read and write with the sentence saying why, where the lookup would have
    swallowed the ImportError and Spark said only DATA_SOURCE_NOT_FOUND."""
    from pyspark.sql.datasource import DataSource

    try:
        from pyspark import __version__ as pyspark_version
    except ImportError:  # pragma: no cover - pyspark.sql.datasource imported above
        pyspark_version = "?"
    sentence = _unavailable_sentence(str(error), getattr(error, "name", None), pyspark_version)

    class UnavailableSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return _FORMAT

        def _fail(self, *_args):
            raise ImportError(sentence)

        schema = reader = writer = streamReader = streamWriter = _fail

    return UnavailableSource


def _unavailable_sentence(error: str, missing: str | None, pyspark_version: str) -> str:
    where = f"{sys.executable} (PySpark {pyspark_version})"
    if missing and not missing.startswith(("rmq_spark", "rmq_wire", "pyspark")):
        return (f"{_FORMAT} cannot be loaded in {where}: {error}. Install the package with its dependencies in that "
                f"Python (pip install {_PACKAGE}), or ship an environment that has them (docs/deployment.md)")
    return f"{_FORMAT} cannot be loaded in {where}: {error}"


def start_up() -> None:
    """In a virtual environment, Spark's Python workers run this interpreter unless the user chose
    one (``PYSPARK_PYTHON``); and an uncaught DATA_SOURCE_NOT_FOUND for ``rocketmq-batch`` opens
    with the reason."""
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
    unavailable = _UNAVAILABLE.findall(text)
    if unavailable:
        return unavailable[-1].strip()
    if UPDATE_MODE in text:
        return UPDATE_MODE_HINT
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
    python, chosen_by = _lookup_python()
    try:
        found = subprocess.run([python, "-c", "import pyspark_rocketmq_batch"], capture_output=True,
                               cwd="/", timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if found:
        return None
    variable = "PYSPARK_DRIVER_PYTHON" if chosen_by == "PYSPARK_DRIVER_PYTHON" else "PYSPARK_PYTHON"
    return (f"{_FORMAT}: Spark's Python workers run {python} ({chosen_by}), which cannot import the package "
            f"{_PACKAGE}: install it into that Python, or set {variable}={sys.executable} (the Python "
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


def _lookup_python() -> tuple[str, str]:
    """The interpreter Spark finds Python data sources with, and runs an installed one with on the
    driver and the executors alike (Spark's PythonUtils.defaultPythonExec), and what chose it."""
    for variable in ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"):
        if os.environ.get(variable):
            return os.environ[variable], variable
    return "python3", "python3 from PATH, as neither PYSPARK_DRIVER_PYTHON nor PYSPARK_PYTHON is set"


def _excepthook(kind, value, traceback) -> None:
    hint = lead_sentence(value)
    if hint:
        print(hint, file=sys.stderr, flush=True)
    condensed = _condensed(kind, value, traceback) if hint else None
    if condensed is None:
        sys.__excepthook__(kind, value, traceback)
    else:
        sys.stderr.write(condensed)


def _thread_excepthook(args) -> None:
    hint = lead_sentence(args.exc_value) if args.exc_value is not None else None
    if hint:
        print(hint, file=sys.stderr, flush=True)
    condensed = _condensed(args.exc_type, args.exc_value, args.exc_traceback) if hint else None
    if condensed is None:
        threading.__excepthook__(args)
    else:
        name = args.thread.name if args.thread is not None else "?"
        sys.stderr.write(f"Exception in thread {name}:\n{condensed}")


def _condensed(kind, value, traceback) -> str | None:
    """An error of ours that Spark wrapped, as the user's own frames and Spark's first words: the
    sentence, printed first, is not repeated in the worker's traceback Spark puts in its message
    (None for anything else, printed whole)."""
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a hint must never hide the error itself
        return None
    if not _OUR_ERROR.search(text) and not _UNAVAILABLE.search(text):
        return None
    import traceback as tracebacks

    head = text.split(": Traceback (most recent call last)", 1)[0].splitlines()[0].strip()
    frames = "".join(tracebacks.format_tb(traceback))
    return (f"Traceback (most recent call last):\n{frames}{kind.__module__}.{kind.__qualname__}: {head}: "
            f"(the {_FORMAT} sentence above; Spark's whole message is the exception's str())\n")
