"""PySpark finds Python data sources by themselves in top-level modules named ``pyspark_*``
that have a ``DefaultSource``: this one makes ``spark.read(Stream).format("rocketmq-batch")``
work after ``pip install`` alone."""

from rmq_spark.spark.datasource import RocketMQBatchDataSource as DefaultSource

__all__ = ["DefaultSource"]
