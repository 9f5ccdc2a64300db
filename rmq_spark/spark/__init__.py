"""The PySpark data source ``rocketmq-batch`` (streaming and batch reads).

Installing the package registers the format by itself (the top-level module
``pyspark_rocketmq_batch``, which PySpark finds among ``pyspark_*`` modules); where that
lookup is off or the package is not installed in Spark's Python, call ``register(spark)``.
"""

from .source import NAME, RocketMQBatchDataSource


def register(spark) -> None:
    """Register the format ``rocketmq-batch`` with a SparkSession."""
    spark.dataSource.register(RocketMQBatchDataSource)


__all__ = ["NAME", "RocketMQBatchDataSource", "register"]
