"""Faults and refusals of the pop service (expected outcomes are status values, see service.py).
broker_sim/doors/grpc_common.py maps them to gRPC statuses."""


class PopError(Exception):
    """Base of the pop service's refusals; the message says what was wrong and how to fix it."""


class InvalidPopRequest(PopError, ValueError):
    """A request argument out of range: invisible time, poll time, message count, names."""


class GroupNotFound(PopError, LookupError):
    """An ack or change of invisible time for a group that never popped on this broker."""


class InvalidReceiptHandle(PopError, ValueError):
    """A handle this broker did not issue (forged, damaged) or issued to another group."""


class ReceiptHandleExpired(PopError):
    """The handle's message was acked, revived after its invisible time, or its invisible time
    was changed (which issues a new handle)."""
