"""Consumers: the range reader (batched index lookups) and the pop consumer."""

from .pop_consumer import PopConsumer
from .range_reader import RangeReader

__all__ = ["PopConsumer", "RangeReader"]
