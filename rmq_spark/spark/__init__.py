"""The PySpark data source ``rocketmq-batch``, streaming and batch reads and writes: the class in
``datasource.py``, its readers in ``source.py``, its writers in ``sink.py``. The top of the SDK:
imports the producer, the consumers and below; nothing of the SDK imports it.

Installing the package registers the format by itself (the top-level module
``pyspark_rocketmq_batch``, which PySpark finds among ``pyspark_*`` modules); where that
lookup is off or the package is not installed in Spark's Python, call ``register(spark)``.
"""

from rmq_spark.spark.datasource import NAME, RocketMQBatchDataSource


def register(spark) -> None:
    """Register the format ``rocketmq-batch`` with a SparkSession."""
    spark.dataSource.register(RocketMQBatchDataSource)


__all__ = ["NAME", "RocketMQBatchDataSource", "register"]
