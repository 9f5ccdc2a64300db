"""Consumers: the range reader (batched index lookups) and the pop consumer. Imported by the Spark
connector and the CLI; imports ``client`` and below."""

from rmq_spark.consumer.pop_consumer import Delivery, PopConsumer
from rmq_spark.consumer.range_reader import RangeReader

__all__ = ["Delivery", "PopConsumer", "RangeReader"]
