"""Refusals of the pop service, each a ``BrokerFault`` with its reason (expected outcomes are
status values, see service.py)."""

from broker_sim.common.faults import BrokerFault, Reason


class InvalidPopRequest(BrokerFault, ValueError):
    """A request argument out of range: invisible time, poll time, message count, names."""

    reason = Reason.INVALID_ARGUMENT


class GroupNotFound(BrokerFault, LookupError):
    """An ack or change of invisible time for a group that never popped on this broker."""

    reason = Reason.GROUP_NOT_FOUND


class InvalidReceiptHandle(BrokerFault, ValueError):
    """A handle this broker did not issue (forged, damaged) or issued to another group."""

    reason = Reason.RECEIPT_HANDLE_INVALID


class ReceiptHandleExpired(BrokerFault):
    """The handle's message was acked, revived after its invisible time, or its invisible time
    was changed (which issues a new handle)."""

    reason = Reason.RECEIPT_HANDLE_EXPIRED
