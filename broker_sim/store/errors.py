"""Faults of the store (expected outcomes are status values, see status.py)."""


class StoreError(Exception):
    """Base of the store's faults."""


class DataDirInUseError(StoreError):
    """Another store has the data directory open."""


class UnknownTopicError(StoreError, LookupError):
    """A call named a topic or queue that does not exist."""


class StoreClosedError(StoreError):
    """The store was closed."""
