"""broker_sim.store: RocketMQ's batch storage model (commitlog, SimpleCQ, BatchCQ, dispatcher,
checkpoint, recovery, consumer offsets), and RocksDB as pop and transactions open it (rocks.py).
Imported by the core and by pop, txn and schedule beneath it, never by a door; imports
``broker_sim.common`` and ``rmq_wire`` (the record format) only."""

from broker_sim.store.commitlog import PendingRecord, wall_clock_ms
from broker_sim.store.config import FlushMode, StoreConfig
from broker_sim.store.consume_queue import IndexUnit
from broker_sim.store.consumer_offsets import DEFAULT_FLUSH_INTERVAL_MS, ConsumerOffsetTable
from broker_sim.store.disk import DiskGuard, full_at_start_sentence
from broker_sim.store.errors import (
    STOPPING,
    DataDirInUseError,
    DiskFailedError,
    DiskFullError,
    StoreClosedError,
    StoreError,
    UnknownQueueError,
    UnknownTopicError,
    echo,
)
from broker_sim.store.integrity import CorruptedRecord
from broker_sim.store.mapped_file import NAME_DIGITS, MappedFile, file_name
from broker_sim.store.message_filter import TagFilter
from broker_sim.store.message_store import MessageStore
from broker_sim.store.paths import StorePaths
from broker_sim.store.producer_state import stamp_problem
from broker_sim.store.recovery import RecoveryReport
from broker_sim.store.state_marks import StateLossError, StateMarks
from broker_sim.store.status import (
    DEFAULT_PUT,
    ZERO_HOST,
    BatchPut,
    CreateStatus,
    GetResult,
    GetStatus,
    LogPositions,
    PutContext,
    PutResult,
    PutStatus,
    QueueRecords,
    StoredBatch,
)
from broker_sim.store.topics import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    QueueType,
    TopicConfig,
    creation_problem,
    perm_problem,
    same_topic,
    system_topic_problem,
)
from rmq_wire.record import Compression, SysFlag, decode_record, encode_message_batch

__all__ = [
    "DEFAULT_FLUSH_INTERVAL_MS", "DEFAULT_PUT", "NAME_DIGITS", "PERM_READ", "PERM_READ_WRITE", "PERM_WRITE",
    "ZERO_HOST", "BatchPut", "Compression",
    "ConsumerOffsetTable",
    "CorruptedRecord", "CreateStatus", "DataDirInUseError", "DiskFailedError", "DiskFullError", "DiskGuard",
    "FlushMode", "GetResult", "GetStatus", "IndexUnit", "LogPositions", "MappedFile", "MessageStore",
    "PendingRecord", "PutContext", "PutResult", "PutStatus", "QueueRecords", "QueueType", "RecoveryReport",
    "STOPPING", "StateLossError", "StateMarks",
    "StoreClosedError", "StoreConfig", "StoreError", "StorePaths", "StoredBatch", "SysFlag",
    "TagFilter", "TopicConfig", "UnknownQueueError", "UnknownTopicError", "creation_problem", "decode_record", "echo",
    "encode_message_batch", "file_name",
    "full_at_start_sentence", "perm_problem", "same_topic",
    "close_checked", "open_checked", "stamp_problem", "system_topic_problem", "wall_clock_ms",
]


def __getattr__(name: str):
    """RocksDB's open and close, as pop and transactions take them, imported on first use: the
    store's own processes (the concurrent dispatcher's workers) never load rocksdict."""
    if name in ("close_checked", "open_checked"):
        from broker_sim.store import rocks

        return getattr(rocks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
