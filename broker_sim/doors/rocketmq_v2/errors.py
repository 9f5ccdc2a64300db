"""The RocketMQ 5 gRPC door's refusals: the broker core's reasons as the protocol's Codes (as the
proxy answers them), in the Status each answer carries (gRPC's own status stays OK), and a
refusal with a code of the protocol's own."""

from __future__ import annotations

from broker_sim.core import BrokerFault, Reason
from broker_sim.core.errors import from_exception
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2

CODES = {
    Reason.TOPIC_NOT_FOUND: v2.TOPIC_NOT_FOUND,
    Reason.QUEUE_NOT_FOUND: v2.NOT_FOUND,
    Reason.MESSAGE_TOO_LARGE: v2.MESSAGE_BODY_TOO_LARGE,
    Reason.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    Reason.PROPERTIES_SIZE_EXCEEDED: v2.MESSAGE_PROPERTIES_TOO_LARGE,
    Reason.WRONG_QUEUE_TYPE: v2.BAD_REQUEST,
    Reason.TOPIC_CONFLICT: v2.BAD_REQUEST,
    Reason.INVALID_ARGUMENT: v2.BAD_REQUEST,
    Reason.BAD_OFFSET_RANGE: v2.ILLEGAL_OFFSET,
    Reason.TRANSACTION_NOT_FOUND: v2.INVALID_TRANSACTION_ID,
    Reason.TRANSACTION_ENDED: v2.INVALID_TRANSACTION_ID,
    Reason.TRANSACTION_INCOMPLETE: v2.BAD_REQUEST,
    Reason.GROUP_NOT_FOUND: v2.CONSUMER_GROUP_NOT_FOUND,
    Reason.MESSAGE_NOT_FOUND: v2.MESSAGE_NOT_FOUND,
    Reason.RECEIPT_HANDLE_INVALID: v2.INVALID_RECEIPT_HANDLE,
    Reason.RECEIPT_HANDLE_EXPIRED: v2.INVALID_RECEIPT_HANDLE,
    Reason.SERVICE_NOT_AVAILABLE: v2.INTERNAL_SERVER_ERROR,
    Reason.SEND_IN_PROGRESS: v2.TOO_MANY_REQUESTS,
    Reason.STREAM_STALLED: v2.REQUEST_TIMEOUT,
    Reason.TOO_MANY_REQUESTS: v2.TOO_MANY_REQUESTS,  # the proxy's flow control
    Reason.LIMIT_EXCEEDED: v2.FORBIDDEN,
    Reason.DISK_FULL: v2.INTERNAL_SERVER_ERROR,
    Reason.DISK_FAILED: v2.INTERNAL_SERVER_ERROR,
    Reason.UNAUTHENTICATED: v2.UNAUTHORIZED,
    Reason.PERMISSION_DENIED: v2.FORBIDDEN,
    Reason.INTERNAL: v2.INTERNAL_ERROR,
}


class V2Refusal(BrokerFault):
    """A refusal with the protocol's own ``code`` (checks the proxy makes before the core is
    asked); this door answers the code, any other would answer its reason, INVALID_ARGUMENT."""

    reason = Reason.INVALID_ARGUMENT

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def status(code: int, message: str = "") -> v2.Status:
    return v2.Status(code=code, message=message or v2.Code.Name(code))


OK = status(v2.OK)


def refusal_status(err: Exception) -> v2.Status:
    """The Status answering a refusal or a fault of a call."""
    error = from_exception(err)
    return status(error.code if isinstance(error, V2Refusal) else CODES[error.reason], error.message)
