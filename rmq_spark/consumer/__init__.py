"""Consumers: the range reader (batched index lookups); the pop consumer comes later."""

from .range_reader import RangeReader

__all__ = ["RangeReader"]
