"""Consumers: the range reader (batched index lookups) and the pop consumer."""

from .pop_consumer import Delivery, PopConsumer
from .range_reader import RangeReader

__all__ = ["Delivery", "PopConsumer", "RangeReader"]
