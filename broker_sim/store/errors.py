"""Faults of the store (expected outcomes are status values, see status.py), and how error
sentences show what a client sent."""

ECHO_CHARS = 64


def echo(value) -> str:
    """A value a client sent (a name, an expression, an id), as error sentences show it: its
    repr, cut to ECHO_CHARS characters, so that a sentence never grows with the input."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS - 3] + "..."


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


class DiskFailedError(StoreError):
    """A flush failed: the store accepts no write until the broker is restarted."""


class IndexGapError(StoreError):
    """An index unit would leave a gap: the queue's index lost units (recovery rebuilds it), or
    a damaged record held the offsets before ``offset`` (recovery indexes them to it)."""

    def __init__(self, message: str, topic: str, queue_id: int, offset: int = -1, position: int = -1):
        super().__init__(message)
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset  # the queue offset of the record that would leave the gap
        self.position = position  # its commitlog offset
