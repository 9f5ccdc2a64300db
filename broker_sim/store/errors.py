"""Faults of the store, each a ``BrokerFault`` with its reason (expected outcomes are status
values, see store/status.py), and how error sentences show what a client sent."""

from broker_sim.common.faults import BrokerFault, Reason

ECHO_CHARS = 64
STOPPING = "the broker is stopping; retry against a running broker"


def echo(value) -> str:
    """A value a client sent (a name, an expression, an id), as error sentences show it: its
    repr, cut to ECHO_CHARS characters, so that a sentence never grows with the input."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS - 3] + "..."


class StoreError(BrokerFault):
    """Base of the store's faults; one of its own (a damaged file, a closed table) is the
    broker's (INTERNAL) unless a subclass says otherwise."""


class DataDirInUseError(StoreError):
    """Another store has the data directory open."""


class UnknownTopicError(StoreError, LookupError):
    """A call named a topic that does not exist."""

    reason = Reason.TOPIC_NOT_FOUND


class UnknownQueueError(UnknownTopicError):
    """A call named a queue its topic does not have."""

    reason = Reason.QUEUE_NOT_FOUND


class StoreClosedError(StoreError):
    """The store was closed: a client is told the broker is stopping."""

    reason = Reason.SERVICE_NOT_AVAILABLE

    @property
    def message(self) -> str:
        return STOPPING


class DiskFullError(StoreError):
    """A file of the store could not be allocated or written for lack of space; nothing of
    the write that needed it was kept. ``str()`` says which file; ``message`` what to do.

    The broker's view; ``rmq_spark.errors.DiskFullError`` is what its clients raise for it.
    """

    reason = Reason.DISK_FULL

    @property
    def message(self) -> str:
        return (f"out of disk space: {self}; nothing was stored. Free space on that disk and send again: sends "
                "resume once there is room")


class DiskFailedError(StoreError):
    """A flush failed: the store accepts no write until the broker is restarted.

    The broker's view; ``rmq_spark.errors.DiskFailedError`` is what its clients raise for it.
    """

    reason = Reason.DISK_FAILED


class IndexGapError(StoreError):
    """An index unit would leave a gap: the queue's index lost units (recovery rebuilds it), or
    a damaged record held the offsets before ``offset`` (recovery indexes them to it)."""

    def __init__(self, message: str, topic: str, queue_id: int, offset: int = -1, position: int = -1):
        super().__init__(message)
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset  # the queue offset of the record that would leave the gap
        self.position = position  # its commitlog offset
