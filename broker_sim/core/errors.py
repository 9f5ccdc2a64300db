"""The broker core's refusals: every fault is a ``BrokerFault`` (broker_sim/common/faults.py)
carrying its ``Reason`` and a sentence a user can act on; each door maps the reason to its
protocol's code in one table of its own (doors/grpc_common.py, doors/remoting/errors.py,
doors/rocketmq_v2/errors.py). A sentence shows what the client sent (names, expressions, ids)
through ``broker_sim.store.echo``, cut short: it never grows with the input.
"""

from __future__ import annotations

import errno
import logging

from broker_sim.common.faults import RETRIABLE, BrokerFault, Reason, refused
from broker_sim.store import STOPPING, CreateStatus, DiskFullError, PutResult, PutStatus

log = logging.getLogger(__name__)

__all__ = ["RETRIABLE", "STOPPING", "BrokerFault", "Reason", "bad_range", "from_create", "from_exception",
           "from_put", "invalid", "refused"]

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


def invalid(message: str) -> BrokerFault:
    return refused(Reason.INVALID_ARGUMENT, message)


def bad_range(message: str) -> BrokerFault:
    return refused(Reason.BAD_OFFSET_RANGE, message)


def from_put(result: PutResult) -> BrokerFault:
    """The refusal for a failed put (an expected outcome of the store, as the call's fault)."""
    reason = _PUT_REASONS.get(result.status, Reason.INTERNAL)
    return refused(reason, result.detail or f"the store answered {result.status.value}")


def from_create(status: CreateStatus, detail: str) -> BrokerFault:
    """The refusal for a topic creation that neither created nor found the same topic."""
    if status is CreateStatus.CONFLICT:
        return refused(Reason.TOPIC_CONFLICT, detail)
    return invalid(detail)


def from_exception(err: BaseException) -> BrokerFault:
    """The refusal for an exception raised while serving a call: a fault is its own refusal,
    but a part's own INTERNAL fault (a ``StoreError`` such as a damaged file, a ``HalfLogError``)
    is answered as a broker failure and logged, as is any other exception; a disk out of space
    is DISK_FULL wherever it was met."""
    if isinstance(err, BrokerFault) and (err.reason is not Reason.INTERNAL or type(err) is BrokerFault):
        return err
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):  # the topic journal, offsets
        return DiskFullError(f"{err.filename or 'a file'}: {err.strerror}")
    if _rocksdb_out_of_space(err):
        return refused(Reason.DISK_FULL, f"out of disk space: the pop or transaction state (RocksDB) could not be "
                                         f"written ({err}); nothing was changed. Free space on that disk and "
                                         "restart the broker: RocksDB refuses writes after such a failure until it "
                                         "is opened again")
    log.error("internal error while serving a call", exc_info=err)
    return refused(Reason.INTERNAL, f"the broker failed with {type(err).__name__}: {err}. This is a broker bug; its "
                                    "log has the details")


def _rocksdb_out_of_space(err: BaseException) -> bool:
    """RocksDB (pop and transaction state, through rocksdict) raises a plain Exception holding
    its Status text, "IO error: No space left on device: ..."."""
    return type(err) is Exception and "No space left on device" in str(err)
