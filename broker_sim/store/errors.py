"""Faults of the store (expected outcomes are status values, see status.py)."""


class StoreError(Exception):
    """Base of the store's faults."""


class DataDirInUseError(StoreError):
    """Another store has the data directory open."""


class UnknownTopicError(StoreError, LookupError):
    """A call named a topic or queue that does not exist."""


class StoreClosedError(StoreError):
    """The store was closed."""


class DiskFullError(StoreError):
    """A file of the store could not be allocated or written for lack of space; nothing of
    the write that needed it was kept."""


class IndexGapError(StoreError):
    """An index unit would leave a gap: the queue's index lost units (recovery rebuilds it)."""

    def __init__(self, message: str, topic: str, queue_id: int):
        super().__init__(message)
        self.topic = topic
        self.queue_id = queue_id
