"""One error tree for the SDK and the Spark connector.

Every error says what was wrong and how to fix it. ``retriable`` tells whether the same call
may succeed if made again (the transport retries those, with backoff, where a repeat is safe).
Errors raised for a broker answer carry its gRPC ``code`` and the broker's ``reason`` (the
``rmq-reason`` trailing metadata).
"""

from __future__ import annotations

from rmq_wire.errors import CodecError, ConfigError, InvalidRequestError, RmqError  # noqa: F401  (the root and the wire's errors, re-exported)


class BrokerUnavailableError(RmqError):
    """The broker cannot be reached or is stopping."""

    retriable = True


class RequestTimeoutError(RmqError):
    """The broker did not answer within the deadline."""

    retriable = True


class ResultTimeoutError(RequestTimeoutError, TimeoutError):
    """A send's future had no answer within the timeout given to ``result()`` or
    ``exception()``; the send goes on, and waiting again may still get its answer."""


class TopicNotFoundError(RmqError, LookupError):
    """The topic does not exist."""


class QueueNotFoundError(RmqError, LookupError):
    """The topic has no such queue."""


class TopicConflictError(RmqError):
    """A topic of that name exists with another queue count or type."""


class MessageTooLargeError(InvalidRequestError):
    """A message or batch is larger than the broker accepts."""


class PropertiesTooLargeError(InvalidRequestError):
    """A message's properties are larger than 32767 bytes."""


class WrongQueueTypeError(RmqError):
    """The call needs another queue type (an inner batch on a SimpleCQ topic)."""


class OffsetOutOfRangeError(RmqError):
    """An offset range is invalid, or its data is no longer stored (deleted below it)."""


class DataLossError(OffsetOutOfRangeError):
    """Messages a query had yet to read are gone: deleted, their queue reset, or their topic
    removed. The Spark source raises it when failOnDataLoss is true (the default)."""


class CorruptedRecordError(DataLossError):
    """The broker holds a damaged record in a range being read and refuses to serve it: the
    message names its topic, queue and offsets (``topic``, ``queue_id``, ``first_offset`` ..
    ``end_offset - 1``). Readers may skip exactly those offsets (on_data_loss='skip', or
    failOnDataLoss=false in Spark)."""

    def __init__(self, message: str, *, topic: str = "", queue_id: int = -1, first_offset: int = -1,
                 end_offset: int = -1, code=None, reason: str | None = None):
        super().__init__(message, code=code, reason=reason)
        self.topic = topic
        self.queue_id = queue_id
        self.first_offset = first_offset
        self.end_offset = end_offset


class UndecodableBatchError(DataLossError):
    """A stored batch that passes its CRCs but does not decode (its payload, codec,
    compression or message count is wrong); the message names its topic, queue and offsets.
    Readers fail only its range: the other ranges are read, and with on_data_loss='skip'
    (Spark: failOnDataLoss false) the batch's offsets are skipped with a warning."""


class ClosedError(RmqError):
    """The producer or reader was closed."""


class BufferFullError(RmqError):
    """The producer holds total_batch_max_bytes of unsent messages and no room came in time."""

    retriable = True


class GroupNotFoundError(RmqError, LookupError):
    """The consumer group has popped nothing on this broker (acks need a group that popped)."""


class MessageNotFoundError(RmqError, LookupError):
    """No stored message has the id asked for (a message id naming no record, or a key no message
    of the topic holds)."""


class GroupBusyError(RmqError):
    """The consumer group has live consumers, so its offsets are not moved under them."""


class ReceiptHandleError(RmqError):
    """Receipt handles that could not be acked or changed. ``failed`` maps each such handle to
    the broker's sentence; in an ack, the other handles were acked."""

    def __init__(self, message: str, *, failed: dict | None = None, code=None, reason: str | None = None):
        super().__init__(message, code=code, reason=reason)
        self.failed = dict(failed or {})


class ReceiptHandleExpiredError(ReceiptHandleError):
    """The message was acked already, came back after its invisible time (it is delivered again
    with a new handle), or its invisible time was changed (use the new handle)."""


class InvalidReceiptHandleError(ReceiptHandleError, InvalidRequestError):
    """A handle the broker did not issue, a damaged one, or one issued to another group."""


class SendInProgressError(RmqError):
    """An earlier attempt of this idempotent send is still being stored; retrying gets its answer."""

    retriable = True


class LimitExceededError(RmqError):
    """The broker refused a creation past the topics or queues one client may create, or the
    broker may hold (its --max-topics-created-per-client, --max-topics, ...); nothing was
    created: delete topics no longer used, or ask for a higher limit."""


class DiskFullError(RmqError):
    """The broker's disk has no room (less free than its reserve); nothing was stored. The
    same send succeeds once space is freed on the broker's disk: the producer retries it with
    its backoff, then raises this. The client's view of the broker's own
    ``broker_sim.store.DiskFullError`` (reason DISK_FULL)."""

    retriable = True


class DiskFailedError(RmqError):
    """The broker's disk failed a flush or a write: the broker accepts no write until it is
    restarted (reads go on). A send answered so may or may not be stored; an idempotent send
    retried after the restart is stored once. The client's view of the broker's own
    ``broker_sim.store.DiskFailedError`` (reason DISK_FAILED)."""


class TransactionNotFoundError(RmqError, LookupError):
    """The broker knows no transaction of that id (nothing was prepared under it, or it ended
    longer ago than the broker remembers)."""


class TransactionStateError(RmqError):
    """The transaction's state forbids the call: sending under an ended transaction,
    committing a rolled back one, rolling back a committed one."""


class TransactionIncompleteError(TransactionStateError):
    """A commit found another number of prepared messages than the writer sent, or a
    prepared batch damaged on disk; nothing was committed: roll back and write again."""


class AuthenticationError(RmqError):
    """The broker checks ACLs and could not tell the client's account: no credentials, an
    unknown access key, a wrong secret key, or a signature dated too far from its clock."""


class PermissionDeniedError(RmqError):
    """The client's account may not do this (publish to a topic, subscribe with a group, manage
    topics, end another account's transaction); the broker's ACL file grants permissions."""


class BrokerError(RmqError):
    """Any other broker failure (the broker's own ``broker_sim.core.BrokerError`` is the root of
    all its faults; a client sees each through the class its reason maps to, this one for the
    rest, INTERNAL included)."""


# The broker's reasons (broker_sim/common/faults.py) -> error classes.
_BY_REASON = {
    "TOPIC_NOT_FOUND": TopicNotFoundError,
    "QUEUE_NOT_FOUND": QueueNotFoundError,
    "TOPIC_CONFLICT": TopicConflictError,
    "MESSAGE_TOO_LARGE": MessageTooLargeError,
    "PROPERTIES_SIZE_EXCEEDED": PropertiesTooLargeError,
    "MESSAGE_ILLEGAL": InvalidRequestError,
    "INVALID_ARGUMENT": InvalidRequestError,
    "WRONG_QUEUE_TYPE": WrongQueueTypeError,
    "BAD_OFFSET_RANGE": OffsetOutOfRangeError,
    "TRANSACTION_NOT_FOUND": TransactionNotFoundError,
    "TRANSACTION_ENDED": TransactionStateError,
    "TRANSACTION_INCOMPLETE": TransactionIncompleteError,
    "SERVICE_NOT_AVAILABLE": BrokerUnavailableError,
    "GROUP_NOT_FOUND": GroupNotFoundError,
    "MESSAGE_NOT_FOUND": MessageNotFoundError,
    "RECEIPT_HANDLE_INVALID": InvalidReceiptHandleError,
    "RECEIPT_HANDLE_EXPIRED": ReceiptHandleExpiredError,
    "SEND_IN_PROGRESS": SendInProgressError,
    "TOO_MANY_REQUESTS": BrokerUnavailableError,  # busy: retriable, the producer retries with backoff
    "LIMIT_EXCEEDED": LimitExceededError,
    "DISK_FULL": DiskFullError,
    "DISK_FAILED": DiskFailedError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": PermissionDeniedError,
}
# gRPC status code names -> error classes, when the broker gave no reason.
_BY_CODE = {
    "UNAVAILABLE": BrokerUnavailableError,
    "DEADLINE_EXCEEDED": RequestTimeoutError,
    "NOT_FOUND": TopicNotFoundError,
    "ALREADY_EXISTS": TopicConflictError,
    "INVALID_ARGUMENT": InvalidRequestError,
    "OUT_OF_RANGE": OffsetOutOfRangeError,
    "FAILED_PRECONDITION": WrongQueueTypeError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": PermissionDeniedError,
}


def error_for(code_name: str, message: str, reason: str | None = None, code=None) -> RmqError:
    """The typed error for a broker answer."""
    cls = _BY_REASON.get(reason or "") or _BY_CODE.get(code_name, BrokerError)
    return cls(message, code=code, reason=reason)
