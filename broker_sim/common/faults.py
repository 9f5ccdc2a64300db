"""The root of every fault of the broker: ``BrokerFault``, with a ``Reason`` (what kind, which each
door maps to its protocol's code in one table of its own) and a ``retriable`` flag, as
``rmq_spark.errors.RmqError`` is the client's.

Each part raises its own subclasses (the store's in ``store/errors.py``, pop's in
``pop/errors.py``, ...), each carrying its reason, so that a door answers any of them without
knowing where it came from. Expected outcomes are status values (``PutStatus``, ``RangeStatus``,
``AckStatus``), never faults. ``str(fault)`` says what happened; ``fault.message`` is the sentence
a client is told, the same unless the class says otherwise (a store closed answers that the
broker is stopping). Faults whose reason is ``INTERNAL`` are the broker's own (a bug, a damaged
file at start): a door answers them as a broker failure and logs them.
"""

from __future__ import annotations

import enum


class Reason(str, enum.Enum):
    """What kind of fault: a client sees its name (gRPC's ``rmq-reason`` trailer) and the code
    its door maps it to (doors/grpc_common.py, doors/remoting/errors.py, doors/rocketmq_v2/errors.py)."""

    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    WRONG_QUEUE_TYPE = "WRONG_QUEUE_TYPE"
    TOPIC_CONFLICT = "TOPIC_CONFLICT"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    BAD_OFFSET_RANGE = "BAD_OFFSET_RANGE"
    TRANSACTION_NOT_FOUND = "TRANSACTION_NOT_FOUND"
    TRANSACTION_ENDED = "TRANSACTION_ENDED"
    TRANSACTION_INCOMPLETE = "TRANSACTION_INCOMPLETE"
    GROUP_NOT_FOUND = "GROUP_NOT_FOUND"
    MESSAGE_NOT_FOUND = "MESSAGE_NOT_FOUND"
    RECEIPT_HANDLE_INVALID = "RECEIPT_HANDLE_INVALID"
    RECEIPT_HANDLE_EXPIRED = "RECEIPT_HANDLE_EXPIRED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    SEND_IN_PROGRESS = "SEND_IN_PROGRESS"
    STREAM_STALLED = "STREAM_STALLED"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"  # a client past its requests in flight: retry later
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"  # a client or the broker past its topics or queues
    DISK_FULL = "DISK_FULL"
    DISK_FAILED = "DISK_FAILED"
    UNAUTHENTICATED = "UNAUTHENTICATED"  # no valid signature of a known account
    PERMISSION_DENIED = "PERMISSION_DENIED"  # beyond the account's permissions, another's transaction, the topic's perm
    INTERNAL = "INTERNAL"


# The same call may succeed if made again, unchanged: what the SDK retries (its error classes
# for these reasons are ``retriable``; tests/broker_sim/core/test_errors.py holds the two together).
RETRIABLE = frozenset({Reason.SERVICE_NOT_AVAILABLE, Reason.SEND_IN_PROGRESS, Reason.STREAM_STALLED,
                       Reason.TOO_MANY_REQUESTS, Reason.DISK_FULL})


class BrokerFault(Exception):
    """Base of every fault of the broker: ``reason`` says what kind (a class's own, or the one
    given), ``message`` is the sentence for the user (what was wrong and what to do).

    The broker's view; ``rmq_spark.errors.BrokerError`` is the client's name for a broker
    failure it has no better class for.
    """

    reason: Reason = Reason.INTERNAL

    def __init__(self, message: str, *, reason: Reason | None = None):
        super().__init__(message)
        if reason is not None:
            self.reason = reason

    @property
    def message(self) -> str:
        """The sentence a client is told."""
        return str(self)

    @property
    def retriable(self) -> bool:
        """Whether the same call may succeed if made again."""
        return self.reason in RETRIABLE


def refused(reason: Reason, message: str) -> BrokerFault:
    """A refusal of the core or a door that no part's own fault class names."""
    return BrokerFault(message, reason=reason)


class BrokerConfigError(BrokerFault, ValueError):
    """A bad flag, setting or file of the broker's own configuration: the broker does not start
    (an ACL file reloaded while it runs is kept as it was). The message names the flag or file
    and what to write. The broker's own; ``rmq_wire.errors.ConfigError`` is a client's bad
    argument or option."""

    reason = Reason.INVALID_ARGUMENT
