"""broker_sim.store: RocketMQ's batch storage model (commitlog, SimpleCQ, BatchCQ, dispatcher,
checkpoint, recovery, consumer offsets). Knows nothing of gRPC, RocksDB or rmq_spark."""

from .commitlog import PendingRecord, wall_clock_ms
from .config import FlushMode, StoreConfig
from .consume_queue import IndexUnit
from .consumer_offsets import DEFAULT_FLUSH_INTERVAL_MS, ConsumerOffsetTable
from .disk import DiskGuard, full_at_start_sentence, full_sentence
from .errors import (
    DataDirInUseError,
    DiskFailedError,
    DiskFullError,
    StoreClosedError,
    StoreError,
    UnknownTopicError,
    echo,
)
from .files import fsync_dir, write_atomically
from .format import Compression, SysFlag, decode_record, encode_message_batch
from .integrity import CorruptedRecord
from .mapped_file import NAME_DIGITS, MappedFile, file_name
from .message_filter import TagFilter
from .message_store import MessageStore
from .paths import StorePaths
from .producer_state import stamp_problem
from .recovery import RecoveryReport
from .service_thread import ServiceThread
from .state_marks import StateLossError, StateMarks
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
from .topics import QueueType, TopicConfig, creation_problem, system_topic_problem

__all__ = [
    "DEFAULT_FLUSH_INTERVAL_MS", "DEFAULT_PUT", "NAME_DIGITS", "ZERO_HOST", "Compression", "ConsumerOffsetTable",
    "CorruptedRecord", "CreateStatus", "DataDirInUseError", "DiskFailedError", "DiskFullError", "DiskGuard",
    "FlushMode", "GetResult", "GetStatus", "IndexUnit", "InnerBatch", "LogPositions", "MappedFile", "MessageStore",
    "PendingRecord", "PutContext", "PutResult", "PutStatus", "QueueRecords", "QueueType", "RecoveryReport",
    "ServiceThread", "StateLossError", "StateMarks",
    "StoreClosedError", "StoreConfig", "StoreError", "StorePaths", "StoredBatch", "SysFlag",
    "TagFilter", "TopicConfig", "UnknownTopicError", "creation_problem", "decode_record", "echo",
    "encode_message_batch", "file_name",
    "fsync_dir", "full_at_start_sentence",
    "full_sentence", "stamp_problem", "system_topic_problem", "wall_clock_ms", "write_atomically",
]
