"""The producer, as kafka-python's: a facade (producer.py), a record accumulator, batches, a
sender with the batch timer, and routing; settings in config.py."""

from .config import ProducerConfig
from .producer import Producer

__all__ = ["Producer", "ProducerConfig"]
