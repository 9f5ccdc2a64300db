"""The error mapping as tables: every store status and fault has its core reason and sentence
(broker_sim.core.errors), every fault of the broker is under one root with a reason, every reason
has its code in each door's table, and our door's docstring documents exactly the reasons there
are."""

import importlib
import pkgutil

import grpc
import pytest

import broker_sim
from broker_sim.core import CallGate, errors
from broker_sim.core.errors import BrokerFault, Reason
from broker_sim.doors import grpc_common as door
from broker_sim.doors.grpc_common import CODES, code_of
from broker_sim.doors.remoting import errors as remoting_errors
from broker_sim.doors.rocketmq_v2 import errors as v2_errors
from broker_sim.pop import GroupNotFound, InvalidPopRequest, InvalidReceiptHandle, ReceiptHandleExpired
from broker_sim.store import (
    CreateStatus,
    DiskFailedError,
    DiskFullError,
    PutResult,
    PutStatus,
    StoreClosedError,
    StoreError,
    UnknownQueueError,
    UnknownTopicError,
)
from rmq_spark import errors as sdk_errors

EXPECTED = {
    "TOPIC_NOT_FOUND": "NOT_FOUND",
    "QUEUE_NOT_FOUND": "NOT_FOUND",
    "MESSAGE_TOO_LARGE": "INVALID_ARGUMENT",
    "MESSAGE_ILLEGAL": "INVALID_ARGUMENT",
    "PROPERTIES_SIZE_EXCEEDED": "INVALID_ARGUMENT",
    "WRONG_QUEUE_TYPE": "FAILED_PRECONDITION",
    "TOPIC_CONFLICT": "ALREADY_EXISTS",
    "INVALID_ARGUMENT": "INVALID_ARGUMENT",
    "BAD_OFFSET_RANGE": "INVALID_ARGUMENT",
    "TRANSACTION_NOT_FOUND": "NOT_FOUND",
    "TRANSACTION_ENDED": "FAILED_PRECONDITION",
    "TRANSACTION_INCOMPLETE": "FAILED_PRECONDITION",
    "GROUP_NOT_FOUND": "NOT_FOUND",
    "MESSAGE_NOT_FOUND": "NOT_FOUND",
    "RECEIPT_HANDLE_INVALID": "INVALID_ARGUMENT",
    "RECEIPT_HANDLE_EXPIRED": "FAILED_PRECONDITION",
    "SERVICE_NOT_AVAILABLE": "UNAVAILABLE",
    "SEND_IN_PROGRESS": "ABORTED",
    "STREAM_STALLED": "DEADLINE_EXCEEDED",
    "TOO_MANY_REQUESTS": "RESOURCE_EXHAUSTED",
    "LIMIT_EXCEEDED": "RESOURCE_EXHAUSTED",
    "DISK_FULL": "RESOURCE_EXHAUSTED",
    "DISK_FAILED": "UNAVAILABLE",
    "UNAUTHENTICATED": "UNAUTHENTICATED",
    "PERMISSION_DENIED": "PERMISSION_DENIED",
    "INTERNAL": "INTERNAL",
}


def test_the_table_and_its_documentation():
    assert {reason.value: code.name for reason, code in CODES.items()} == EXPECTED
    assert set(CODES) == set(Reason)
    table = [line.split() for line in door.__doc__.splitlines() if line and line.split()[0] in EXPECTED]
    assert {row[0]: row[1] for row in table} == EXPECTED


@pytest.mark.parametrize("status", [s for s in PutStatus if s is not PutStatus.PUT_OK])
def test_every_put_status_has_its_reason(status):
    error = errors.from_put(PutResult(status, "what went wrong"))
    assert error.reason.value == status.value and error.message == "what went wrong"
    assert code_of(error) is CODES[error.reason]


def test_faults_and_creation_outcomes():
    assert code_of(errors.from_exception(StoreClosedError("closed"))) is grpc.StatusCode.UNAVAILABLE
    assert errors.from_exception(UnknownTopicError("topic 'x' does not exist")).reason is Reason.TOPIC_NOT_FOUND
    assert errors.from_exception(UnknownQueueError("topic 't' has queues 0 to 1; there is no queue 5")).reason \
        is Reason.QUEUE_NOT_FOUND
    full = errors.from_exception(OSError(28, "No space left on device", "config/topics.json.tmp"))
    assert full.reason is Reason.DISK_FULL and "topics.json" in full.message and "broker bug" not in full.message
    assert errors.from_exception(DiskFullError("no room")).reason is Reason.DISK_FULL
    assert errors.from_exception(DiskFailedError("restart it")).reason is Reason.DISK_FAILED
    internal = errors.from_exception(KeyError("boom"))
    assert internal.reason is Reason.INTERNAL and "KeyError" in internal.message
    assert errors.from_create(CreateStatus.CONFLICT, "fixed").reason is Reason.TOPIC_CONFLICT
    assert errors.from_create(CreateStatus.INVALID, "bad").reason is Reason.INVALID_ARGUMENT


def test_a_closed_gate_refuses_calls_as_unavailable():
    gate = CallGate()
    with gate:
        assert gate.close(0.01) is False  # a call is still inside
    assert gate.close(0.01) is True
    with pytest.raises(BrokerFault) as caught:
        with gate:
            pass
    assert code_of(caught.value) is grpc.StatusCode.UNAVAILABLE and "stopping" in caught.value.message


DOOR_TABLES = {
    "our contract (doors/grpc_common.py)": CODES,
    "remoting (doors/remoting/errors.py)": remoting_errors.CODES,
    "RocketMQ 5 (doors/rocketmq_v2/errors.py)": v2_errors.CODES,
}


@pytest.mark.parametrize("door", DOOR_TABLES)
def test_each_door_has_a_code_for_every_reason(door):
    assert set(DOOR_TABLES[door]) == set(Reason), f"reasons without a code: {set(Reason) - set(DOOR_TABLES[door])}"


def _exception_classes(package) -> dict:
    found = {}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_fault_of_the_broker_is_under_one_root_with_a_reason():
    classes = _exception_classes(broker_sim)
    assert len(classes) > 15  # the walk found the parts' faults
    assert {name for name, cls in classes.items() if not issubclass(cls, BrokerFault)} == set()
    assert all(isinstance(cls.reason, Reason) for cls in classes.values())


def test_the_pop_and_transaction_faults_carry_their_reasons():
    assert errors.from_exception(InvalidReceiptHandle("forged")).reason is Reason.RECEIPT_HANDLE_INVALID
    assert errors.from_exception(ReceiptHandleExpired("acked")).reason is Reason.RECEIPT_HANDLE_EXPIRED
    assert errors.from_exception(GroupNotFound("never popped")).reason is Reason.GROUP_NOT_FOUND
    assert errors.from_exception(InvalidPopRequest("max_messages 0")).reason is Reason.INVALID_ARGUMENT
    assert errors.from_exception(StoreClosedError("the store is closed")).message == errors.STOPPING
    full = DiskFullError("f could not grow")
    assert errors.from_exception(full).message.startswith("out of disk space: f could not grow; nothing was stored")
    damaged = errors.from_exception(StoreError("the consumer offset table is closed"))  # the broker's own fault
    assert damaged.reason is Reason.INTERNAL and "broker failed with StoreError" in damaged.message
    assert errors.from_exception(damaged) is damaged  # answered once: a door may translate twice


@pytest.mark.parametrize("reason", list(Reason))
def test_retriable_says_what_the_sdk_retries(reason):
    """The broker's flag and the SDK's error class for the same answer agree."""
    fault = errors.refused(reason, "what went wrong")
    client = sdk_errors.error_for(CODES[reason].name, fault.message, reason.value)
    assert fault.retriable == client.retriable
