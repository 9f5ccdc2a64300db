"""The producer: a facade over routing, encoding and sending (AutoBatch comes next)."""

from .producer import Producer

__all__ = ["Producer"]
