"""The broker core's refusals: a ``Reason`` (what kind) and a sentence a user can act on.

Every fault the store, pop and transactions raise while serving a call becomes one here
(``from_exception``); each door maps the reason to its protocol's status (doors/grpc_common.py
for our gRPC contract). A sentence shows what the client sent (names, expressions, ids) through
``broker_sim.store.echo``, cut short: it never grows with the input.
"""

from __future__ import annotations

import enum
import errno
import logging

from broker_sim.pop import GroupNotFound, InvalidPopRequest, InvalidReceiptHandle, ReceiptHandleExpired
from broker_sim.store import (
    CreateStatus,
    DiskFailedError,
    DiskFullError,
    PutResult,
    PutStatus,
    StoreClosedError,
    UnknownTopicError,
    full_sentence,
)
from broker_sim.txn import Refusal, TransactionRefused

log = logging.getLogger(__name__)


class Reason(str, enum.Enum):
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
    PERMISSION_DENIED = "PERMISSION_DENIED"  # beyond the account's permissions, or another's transaction
    INTERNAL = "INTERNAL"


_PUT_REASONS = {
    PutStatus.TOPIC_NOT_FOUND: Reason.TOPIC_NOT_FOUND,
    PutStatus.QUEUE_NOT_FOUND: Reason.QUEUE_NOT_FOUND,
    PutStatus.MESSAGE_ILLEGAL: Reason.MESSAGE_ILLEGAL,
    PutStatus.MESSAGE_TOO_LARGE: Reason.MESSAGE_TOO_LARGE,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Reason.PROPERTIES_SIZE_EXCEEDED,
    PutStatus.WRONG_QUEUE_TYPE: Reason.WRONG_QUEUE_TYPE,
    PutStatus.SERVICE_NOT_AVAILABLE: Reason.SERVICE_NOT_AVAILABLE,
    PutStatus.SEND_IN_PROGRESS: Reason.SEND_IN_PROGRESS,
    PutStatus.DISK_FULL: Reason.DISK_FULL,
    PutStatus.DISK_FAILED: Reason.DISK_FAILED,
}

_REFUSAL_REASONS = {
    Refusal.INVALID: Reason.INVALID_ARGUMENT,
    Refusal.NOT_FOUND: Reason.TRANSACTION_NOT_FOUND,
    Refusal.ENDED: Reason.TRANSACTION_ENDED,
    Refusal.INCOMPLETE: Reason.TRANSACTION_INCOMPLETE,
    Refusal.FORBIDDEN: Reason.PERMISSION_DENIED,
}

_POP_REASONS = (
    (GroupNotFound, Reason.GROUP_NOT_FOUND),
    (InvalidReceiptHandle, Reason.RECEIPT_HANDLE_INVALID),
    (ReceiptHandleExpired, Reason.RECEIPT_HANDLE_EXPIRED),
    (InvalidPopRequest, Reason.INVALID_ARGUMENT),
)

STOPPING = "the broker is stopping; retry against a running broker"


class BrokerError(Exception):
    """A refusal: its reason says what kind (each door maps it to its protocol's code); its
    message is the sentence for the user."""

    def __init__(self, reason: Reason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def invalid(message: str) -> BrokerError:
    return BrokerError(Reason.INVALID_ARGUMENT, message)


def bad_range(message: str) -> BrokerError:
    return BrokerError(Reason.BAD_OFFSET_RANGE, message)


def from_put(result: PutResult) -> BrokerError:
    """The refusal for a failed put."""
    reason = _PUT_REASONS.get(result.status, Reason.INTERNAL)
    return BrokerError(reason, result.detail or f"the store answered {result.status.value}")


def from_create(status: CreateStatus, detail: str) -> BrokerError:
    """The refusal for a topic creation that neither created nor found the same topic."""
    if status is CreateStatus.CONFLICT:
        return BrokerError(Reason.TOPIC_CONFLICT, detail)
    return invalid(detail)


def from_exception(err: BaseException) -> BrokerError:
    """The refusal for an exception raised while serving a call."""
    if isinstance(err, BrokerError):
        return err
    if isinstance(err, TransactionRefused):
        return BrokerError(_REFUSAL_REASONS[err.refusal], err.message)
    for pop_error, reason in _POP_REASONS:
        if isinstance(err, pop_error):
            return BrokerError(reason, str(err))
    if isinstance(err, StoreClosedError):
        return BrokerError(Reason.SERVICE_NOT_AVAILABLE, STOPPING)
    if isinstance(err, DiskFullError):
        return BrokerError(Reason.DISK_FULL, full_sentence(err))
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):  # the topic journal, offsets
        full = DiskFullError(f"{err.filename or 'a file'}: {err.strerror}")
        return BrokerError(Reason.DISK_FULL, full_sentence(full))
    if _rocksdb_out_of_space(err):
        return BrokerError(Reason.DISK_FULL, f"out of disk space: the pop or transaction state (RocksDB) could not "
                                             f"be written ({err}); nothing was changed. Free space on that disk and "
                                             "restart the broker: RocksDB refuses writes after such a failure until "
                                             "it is opened again")
    if isinstance(err, DiskFailedError):
        return BrokerError(Reason.DISK_FAILED, str(err))
    if isinstance(err, UnknownTopicError):
        reason = Reason.QUEUE_NOT_FOUND if "no queue" in str(err) else Reason.TOPIC_NOT_FOUND
        return BrokerError(reason, str(err))
    log.error("internal error while serving a call", exc_info=err)
    return BrokerError(Reason.INTERNAL, f"the broker failed with {type(err).__name__}: {err}. This is a broker bug; "
                                        "its log has the details")


def _rocksdb_out_of_space(err: Exception) -> bool:
    """RocksDB (pop and transaction state, through rocksdict) raises a plain Exception holding
    its Status text, "IO error: No space left on device: ..."."""
    return type(err) is Exception and "No space left on device" in str(err)
