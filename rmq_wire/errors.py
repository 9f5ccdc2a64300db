"""The root of the error tree both products share, and the errors of the wire itself.

``rmq_spark.errors`` re-exports these and adds the SDK's; a ``CodecError`` raised while a batch
or a stored record is encoded or decoded is an ``rmq_spark.errors.RmqError`` to its users.
"""

from __future__ import annotations


class RmqError(Exception):
    """Base of every error of rmq_spark."""

    retriable = False

    def __init__(self, message: str, *, code=None, reason: str | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason


class ConfigError(RmqError, ValueError):
    """A bad argument or option on the client side; nothing was sent."""


class InvalidRequestError(RmqError, ValueError):
    """The broker refused a malformed request."""


class CodecError(InvalidRequestError):
    """Messages or stored bytes that do not encode or decode: a bad column, message tuple,
    property, codec name, or a damaged payload or record; the message says which and where."""


class BatchFormatError(CodecError):
    """A MessageBatch payload (RocketMQ's batch encoding) that does not parse: the broker's check
    of a batch it is sent and the SDK's decoding raise this one. The message says where and
    why; ``payload`` which of those scanned together."""

    def __init__(self, message: str, payload: int = 0):
        super().__init__(message)
        self.payload = payload
