"""A broker's refusal (a remoting answer that is not SUCCESS) as the SDK's typed error: what was
refused, the broker's code and remark; a real RocketMQ's ACL refusal as our sentence
(acl_refusals.py)."""

from __future__ import annotations

from rmq_spark.client.remoting.acl_refusals import acl_refusal
from rmq_spark.errors import (
    BrokerError,
    BrokerUnavailableError,
    GroupNotFoundError,
    InvalidRequestError,
    MessageTooLargeError,
    PermissionDeniedError,
    RmqError,
    TopicConflictError,
    TopicNotFoundError,
)
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode

_ERRORS = {
    ResponseCode.TOPIC_NOT_EXIST: TopicNotFoundError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: GroupNotFoundError,
    ResponseCode.MESSAGE_ILLEGAL: InvalidRequestError,
    ResponseCode.INVALID_PARAMETER: InvalidRequestError,
    ResponseCode.SERVICE_NOT_AVAILABLE: BrokerUnavailableError,
    ResponseCode.SYSTEM_BUSY: BrokerUnavailableError,
    ResponseCode.TOPIC_EXIST_ALREADY: TopicConflictError,
    ResponseCode.NO_PERMISSION: PermissionDeniedError,  # RocketMQ's answer to bad credentials too
}


def refused(answer: RemotingCommand, what: str) -> RmqError:
    """A broker's refusal of ``what`` as a typed error."""
    if answer.code in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR):
        error = acl_refusal(answer.remark, what)
        if error is not None:
            error.code = answer.code
            return error
    cls = _ERRORS.get(answer.code, BrokerError)
    if answer.code == ResponseCode.MESSAGE_ILLEGAL and "too large" in (answer.remark or "").lower():
        cls = MessageTooLargeError
    return cls(f"{what}: {code_name(answer.code, ResponseCode)}, {answer.remark or 'no remark'}", code=answer.code)


def code_name(code: int, codes: type = RequestCode) -> str:
    """A request's (or, with ``codes=ResponseCode``, an answer's) code by its RocketMQ name."""
    try:
        return codes(code).name
    except ValueError:
        return str(code)
