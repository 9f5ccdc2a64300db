"""What store calls take and answer: the per-call context of a put, and expected outcomes as
status values (RocketMQ's PutMessageStatus and GetMessageStatus); exceptions are kept for faults."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

ZERO_HOST = bytes(8)  # BORNHOST when the sender's address is not known (or not IPv4)


@dataclass(slots=True)
class PutContext:
    """Who sent a put, when, and how it is to be stored: RocketMQ's born host and time, the
    producer's stamp, and what a retry copy carries.

    ``born_timestamp_ms`` None: the store's time. ``producer``: (producer id, sequence), which
    makes the put idempotent (see producer_state). ``reconsume_times``: RECONSUMETIMES, set by
    pop's retries. ``stored_before``: the payload is a copy of a stored record (pop's retries),
    not checked again: it must reach the retry topic and the DLQ even when it does not decode.
    Made per put and never changed (not frozen: that costs ~0.6 us a put).
    """

    born_timestamp_ms: int | None = None
    born_host: bytes = ZERO_HOST
    producer: tuple[str, int] | None = None
    reconsume_times: int = 0
    stored_before: bool = False


DEFAULT_PUT = PutContext()


@dataclass(slots=True)
class BatchPut:
    """What ``put_inner_batch`` is given: ``count`` messages encoded by ``codec`` ("rmq" or
    "arrow"), maybe compressed, to be stored as ONE record (an inner batch: SYSFLAG INNER_BATCH |
    NEED_UNWRAP) on a BatchCQ topic, the payload as it is.

    Not to be confused with the stored inner batch (a record, ``rmq_wire.record.Record`` with
    ``SysFlag.INNER_BATCH``), the core's ``InnerBatchSend`` (what a door asks to send, which the
    core turns into a ``BatchPut``) or ``InnerBatchIds`` (the ids of a stored batch's messages).
    """

    payload: bytes
    count: int
    codec: str = "rmq"
    compression: object = "none"  # format.Compression, or its name
    properties: dict | None = None
    flag: int = 0


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    QUEUE_NOT_FOUND = "QUEUE_NOT_FOUND"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # malformed batch, batch rules broken
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"  # over max_message_bytes, or larger than a segment
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    WRONG_QUEUE_TYPE = "WRONG_QUEUE_TYPE"  # an inner batch sent to a SimpleCQ topic
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # the store is closed
    SEND_IN_PROGRESS = "SEND_IN_PROGRESS"  # an earlier attempt of this idempotent send is being stored
    DISK_FULL = "DISK_FULL"  # free space is below the reserve, or a file could not grow: nothing stored
    DISK_FAILED = "DISK_FAILED"  # a flush failed: no write is accepted until the broker restarts


@dataclass(frozen=True)
class PutResult:
    status: PutStatus
    detail: str = ""  # for a failure: what was wrong and how to fix it
    queue_id: int = -1
    queue_offset: int = -1  # the first message's offset
    count: int = 0  # messages stored (offsets queue_offset .. queue_offset + count - 1)
    physical_offsets: tuple = ()  # one per commitlog record written
    store_timestamp: int = 0
    duplicate: bool = False  # an idempotent send stored before: this is its first answer

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


@dataclass(frozen=True)
class QueueRecords:
    """Records checked and built for one queue of a topic (``MessageStore.build_*``), not yet
    appended: ``records`` are commitlog ``PendingRecord``s."""

    config: object  # TopicConfig
    queue_id: int
    records: list

    @property
    def count(self) -> int:
        return sum(r.count for r in self.records)


@dataclass(frozen=True)
class LogPositions:
    """Where the commitlog starts and ends, how far it is on disk and how far it is indexed."""

    min_offset: int
    max_offset: int
    flushed_offset: int
    dispatched_offset: int


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such topic or queue
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue is empty
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below the minimum: read from next_begin_offset
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # at the maximum: nothing indexed there yet
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # past the maximum
    RECORD_CORRUPTED = "RECORD_CORRUPTED"  # the record holding start is damaged: detail says which offsets and why


class CreateStatus(enum.Enum):
    CREATED = "CREATED"
    ALREADY_EXISTS = "ALREADY_EXISTS"  # same name, queue count and type: nothing to do
    CONFLICT = "CONFLICT"  # same name, another queue count or type: fixed at creation
    INVALID = "INVALID"


@dataclass(frozen=True)
class StoredBatch:
    """A stored record as it is on disk, with the offsets it covers.

    ``data`` is a view of the whole commitlog record (no copy); a single message has count 1,
    an inner batch covers ``base_offset`` .. ``base_offset + count - 1``.
    """

    base_offset: int
    count: int
    physical_offset: int
    tags_code: int
    data: memoryview


@dataclass(frozen=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    batches: list = field(default_factory=list)
    detail: str = ""  # for RECORD_CORRUPTED: the offsets that cannot be read, and why

    @property
    def message_count(self) -> int:
        return sum(b.count for b in self.batches)
