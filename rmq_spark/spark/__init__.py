"""The PySpark data source ``rocketmq-batch``, streaming and batch reads and writes: the class in
``datasource.py``, its readers in ``source.py``, its writers in ``sink.py`` (exactly once
through name servers, on RocketMQ's transactional messages: ``sink_rocketmq.py``). The top of the SDK:
imports the producer, the consumers and below; nothing of the SDK imports it.

Installing the package registers the format by itself (the top-level module
``pyspark_rocketmq_batch``, which PySpark finds among ``pyspark_*`` modules); where that
lookup is off or the package is not installed in Spark's Python, call ``register(spark)``, and
in a thread of your own that writes (PySpark finds a data source for ``df.write`` through the
thread's active session, which it sets only in the thread that created the session).
"""

import shutil
import tempfile
import zipimport
from pathlib import Path

import rmq_spark
from rmq_spark.spark.compat import activate_in_this_thread, register_source
from rmq_spark.spark.datasource import NAME, RocketMQBatchDataSource
from rmq_spark.spark.offsets import offsets_behind_latest


def register(spark) -> None:
    """Register the format ``rocketmq-batch`` with a SparkSession, and make it the calling
    thread's active session.

    Installing the package registers the format by itself; call this where PySpark's lookup of
    ``pyspark_*`` modules is off or Spark's Python lacks the package, and in any thread other than
    the one that created the session before it writes (``df.write`` or ``writeStream``): PySpark
    finds a Python data source for a write through the calling thread's active session, which it
    sets only in the thread that created the session, so a write from another thread fails with
    DATA_SOURCE_NOT_FOUND. Reads need neither.
    """
    _ship_the_wheel(spark)
    register_source(spark, RocketMQBatchDataSource)
    activate_in_this_thread(spark)


# What Spark puts on its Python workers' path of the files given to --py-files (SparkContext.PACKAGE_EXTENSIONS).
_SHIPPED_AS_PACKAGES = (".zip", ".egg", ".jar")


def _ship_the_wheel(spark) -> None:
    """When this package was imported from a wheel given to ``spark-submit --py-files``, ship it
    as a .zip: Spark hands a .whl to its Python workers but puts only .zip, .egg and .jar on
    their path, so a data source registered from a wheel fails there with "No module named
    'rmq_spark'". A wheel is a zip of its packages: the same file named .zip is what Spark ships."""
    loader = getattr(rmq_spark.__spec__, "loader", None)
    if not isinstance(loader, zipimport.zipimporter) or Path(loader.archive).suffix.lower() in _SHIPPED_AS_PACKAGES:
        return
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext here (it ships artifacts its own way)
        return
    shipped = Path(tempfile.mkdtemp(prefix="rocketmq-batch-")) / (Path(loader.archive).stem + ".zip")
    shutil.copyfile(loader.archive, shipped)
    context.addPyFile(str(shipped))


__all__ = ["NAME", "RocketMQBatchDataSource", "offsets_behind_latest", "register"]
