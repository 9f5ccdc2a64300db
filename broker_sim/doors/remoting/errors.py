"""The remoting door's refusals: the broker core's reasons as RocketMQ's response codes (as its
processors answer them), and a bad request header field."""

from __future__ import annotations

from broker_sim.core import BrokerFault, Reason
from rmq_wire.remoting import ResponseCode


class HeaderFieldError(BrokerFault, ValueError):
    """A request header field is missing or not what its type needs: this door answers
    SYSTEM_ERROR, as RocketMQ does for a header its decoder cannot fill (any other door would
    answer its reason, INVALID_ARGUMENT)."""

    reason = Reason.INVALID_ARGUMENT


CODES = {
    Reason.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Reason.QUEUE_NOT_FOUND: ResponseCode.SYSTEM_ERROR,  # "queueId[n] is illegal", as RocketMQ answers
    Reason.MESSAGE_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Reason.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    Reason.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    Reason.WRONG_QUEUE_TYPE: ResponseCode.MESSAGE_ILLEGAL,
    Reason.TOPIC_CONFLICT: ResponseCode.TOPIC_EXIST_ALREADY,
    Reason.INVALID_ARGUMENT: ResponseCode.INVALID_PARAMETER,
    Reason.BAD_OFFSET_RANGE: ResponseCode.INVALID_PARAMETER,
    Reason.TRANSACTION_NOT_FOUND: ResponseCode.TRANSACTION_FAILED,
    Reason.TRANSACTION_ENDED: ResponseCode.TRANSACTION_FAILED,
    Reason.TRANSACTION_INCOMPLETE: ResponseCode.TRANSACTION_FAILED,
    Reason.GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Reason.MESSAGE_NOT_FOUND: ResponseCode.SYSTEM_ERROR,  # "can not find message by the offset"
    Reason.RECEIPT_HANDLE_INVALID: ResponseCode.INVALID_PARAMETER,
    Reason.RECEIPT_HANDLE_EXPIRED: ResponseCode.NO_MESSAGE,
    Reason.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    Reason.SEND_IN_PROGRESS: ResponseCode.SYSTEM_BUSY,
    Reason.STREAM_STALLED: ResponseCode.SYSTEM_ERROR,  # ReadRanges is our contract's: never met here
    Reason.TOO_MANY_REQUESTS: ResponseCode.SYSTEM_BUSY,  # RocketMQ's flow control; its clients retry
    Reason.LIMIT_EXCEEDED: ResponseCode.INVALID_PARAMETER,  # as RocketMQ refuses a topic creation
    Reason.DISK_FULL: ResponseCode.SERVICE_NOT_AVAILABLE,  # RocketMQ: "service not available now ... disk full"
    Reason.DISK_FAILED: ResponseCode.SYSTEM_ERROR,
    Reason.UNAUTHENTICATED: ResponseCode.NO_PERMISSION,  # RocketMQ answers both with NO_PERMISSION (16)
    Reason.PERMISSION_DENIED: ResponseCode.NO_PERMISSION,
    Reason.INTERNAL: ResponseCode.SYSTEM_ERROR,
}


def response_code(refused: BrokerFault) -> int:
    """RocketMQ's response code for a refusal."""
    if isinstance(refused, HeaderFieldError):
        return ResponseCode.SYSTEM_ERROR
    return CODES[refused.reason]
