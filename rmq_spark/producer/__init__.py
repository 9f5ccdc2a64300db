"""The producer, as kafka-python's: a facade (producer.py), a record accumulator, batches, a
sender with the batch timer, and routing; settings in config.py. Imported by the Spark connector
and the CLI; imports ``client`` and below."""

from rmq_spark.producer.config import ProducerConfig
from rmq_spark.producer.producer import Producer

__all__ = ["Producer", "ProducerConfig"]
