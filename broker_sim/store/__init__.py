"""broker_sim.store: RocketMQ's batch storage model (commitlog, SimpleCQ, BatchCQ, dispatcher,
checkpoint, recovery, consumer offsets). Knows nothing of gRPC, RocksDB or rmq_spark."""

from .commitlog import PendingRecord, wall_clock_ms
from .config import FlushMode, StoreConfig
from .consume_queue import IndexUnit
from .consumer_offsets import ConsumerOffsetTable
from .disk import full_sentence
from .errors import (
    DataDirInUseError,
    DiskFailedError,
    DiskFullError,
    StoreClosedError,
    StoreError,
    UnknownTopicError,
    echo,
)
from .format import Compression, SysFlag, decode_record, encode_message_batch
from .integrity import CorruptedRecord
from .message_store import MessageStore
from .recovery import RecoveryReport
from .status import (
    DEFAULT_PUT,
    ZERO_HOST,
    CreateStatus,
    GetResult,
    GetStatus,
    InnerBatch,
    LogPositions,
    PutContext,
    PutResult,
    PutStatus,
    QueueRecords,
    StoredBatch,
)
from .topics import QueueType, TopicConfig, system_topic_problem

__all__ = [
    "DEFAULT_PUT", "ZERO_HOST", "Compression", "ConsumerOffsetTable", "CorruptedRecord", "CreateStatus",
    "DataDirInUseError", "DiskFailedError", "DiskFullError", "FlushMode", "GetResult", "GetStatus", "IndexUnit",
    "InnerBatch", "LogPositions", "MessageStore", "PendingRecord", "PutContext", "PutResult", "PutStatus",
    "QueueRecords", "QueueType", "RecoveryReport", "StoreClosedError", "StoreConfig", "StoreError", "StoredBatch",
    "SysFlag", "TopicConfig", "UnknownTopicError", "decode_record", "echo", "encode_message_batch", "full_sentence",
    "system_topic_problem", "wall_clock_ms",
]
