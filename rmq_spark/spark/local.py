"""A quiet local Spark for examples, notebooks and development: ``local_session()``.

What a first run of PySpark prints before any job does is mostly noise: log4j's profile notes,
WARN lines about the host's address and Hadoop's native library, the JVM's note on incubator
modules, and a console progress bar that overwrites output. This session starts with Spark's
log at ERROR from the JVM's first line (a log4j configuration given at its start, where
``setLogLevel`` comes too late), binds to 127.0.0.1, has no UI and no progress bar, and runs its
Python workers with this interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# The class an interactive Spark names its default level after: set, so Spark keeps quiet about it.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""
# What the JVM itself prints as it starts (not through log4j), dropped from its stderr.
_JVM_NOTES = ("WARNING: Using incubator modules:",)


def local_session(app_name: str = "rocketmq-batch", master: str = "local[2]", **conf):
    """A local SparkSession (the active one, if there is one).

    Parameters
    ----------
    app_name : str
        The application's name.
    master : str
        ``local[N]``: N threads (default 2).
    **conf
        Further Spark settings, ``{"spark.sql.shuffle.partitions": 4}``; keys with dots are
        given as ``**{"spark.x": ...}``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers run this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate()
    settings = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                       "spark.pyspark.python": sys.executable,
                       "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_log4j_file()}",
                       **conf}.items():
        settings.set(key, str(value))
    gateway = launch_gateway(settings, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_pass_stderr, args=(gateway.proc.stderr,), name="spark-jvm-stderr", daemon=True).start()
    return SparkSession(SparkContext(conf=settings, gateway=gateway))


def _log4j_file() -> str:
    handle, path = tempfile.mkstemp(prefix="rocketmq-batch-log4j2-", suffix=".properties")
    with os.fdopen(handle, "w") as out:
        out.write(_LOG4J)
    return path


def _pass_stderr(stream) -> None:
    """The JVM's stderr to ours as it comes, less its start-up notes."""
    for line in iter(stream.readline, b""):
        if not line.decode(errors="replace").startswith(_JVM_NOTES):
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
