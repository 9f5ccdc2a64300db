"""Plain, documented types that the SDK takes and returns (never protobuf objects)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from rmq_wire.types import SECRET_KEY_VARIABLE, Credentials, InnerBatchIds, QueueType  # noqa: F401  (re-exported)


@dataclass(slots=True)
class Message:
    """A message to send.

    ``keys``: space-separated keys, as RocketMQ's KEYS (the default queue selector hashes them).
    ``queue_id``: send to this queue (otherwise the producer's selector chooses); ``broker``:
    of this broker, for a topic served by several (RocketMQ's queues are (broker, queue id)).
    A message is not copied when sent: do not change it until its send is answered. (Not
    frozen: a frozen dataclass costs four times as much to create, on the hottest path.)
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | None = None
    properties: dict = field(default_factory=dict)
    queue_id: int | None = None
    broker: str | None = None


class SendResult(NamedTuple):
    """Where one message was stored. (A tuple: one is made per message sent, and a tuple is
    quick to make.) ``broker``: the broker's name through a name server, "" through our door
    (one broker)."""

    topic: str
    queue_id: int
    queue_offset: int
    message_id: str
    store_timestamp_ms: int
    broker: str = ""


# RocketMQ's own topics (TopicValidator's system topics; retry, dead-letter and light topics; the
# brokers' own, RMQ_SYS_* and rmq_sys_*), broker_sim's too (RMQ_SYS_SINK_BATCHES, SCHEDULE_TOPIC_XXXX).
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%", "%LMQ%", "RMQ_SYS_")


def is_system_topic(name: str) -> bool:
    """A topic of RocketMQ's (or broker_sim's) own making rather than an application's: what a
    topic pattern leaves out, as Kafka's leaves out its internal topics."""
    return name in SYSTEM_TOPICS or name.startswith(SYSTEM_TOPIC_PREFIXES) or name.endswith("_REPLY_TOPIC")


PERM_WRITE = 0x2  # RocketMQ's PermName: a topic's queues take sends
PERM_READ = 0x4  # ... and are read


def perm_text(perm: int) -> str:
    """A topic's permission as mqadmin's -p reads it: "rw" (6), "r" (4), "w" (2), "-" (0)."""
    return ("r" if perm & PERM_READ else "") + ("w" if perm & PERM_WRITE else "") or "-"


@dataclass(frozen=True)
class TopicInfo:
    """A topic. Through a name server (RocketMQ's remoting protocol) a topic may be served by
    several brokers, each with queues of its own: ``brokers`` is ((broker name, queue count),
    ...) and ``queue_count`` their sum; through our door (one broker) ``brokers`` is empty."""

    name: str
    queue_count: int
    queue_type: QueueType
    brokers: tuple = ()
    perm: int = PERM_READ | PERM_WRITE  # RocketMQ's PermName bits (its first broker's, through name servers)

    @property
    def queues(self) -> list[tuple[str, int]]:
        """Every queue, as (broker name, queue id): the broker "" through our door."""
        if not self.brokers:
            return [("", queue_id) for queue_id in range(self.queue_count)]
        return [(broker, queue_id) for broker, count in self.brokers for queue_id in range(count)]


@dataclass(frozen=True)
class QueueOffsets:
    """A queue's readable offsets: ``min_offset`` .. ``max_offset - 1``. A queue is (broker,
    queue id): the broker "" through our door, where there is one."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    broker: str = ""

    @property
    def messages(self) -> int:
        return self.max_offset - self.min_offset


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` .. ``end - 1`` of a queue; ``end`` None: up to what is stored.
    ``broker``: the queue's broker, for a topic served by several (through a name server)."""

    topic: str
    queue_id: int
    start: int
    end: int | None = None
    broker: str = ""


@dataclass(frozen=True)
class GroupOffset:
    """A consumer group's committed next offset of a queue."""

    group: str
    topic: str
    queue_id: int
    offset: int
    broker: str = ""


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group the brokers know, and its consumers alive now (their client ids; through
    name servers, the ones the brokers know from their heartbeats)."""

    name: str
    consumers: tuple[str, ...] = ()


@dataclass(frozen=True)
class BrokerStats:
    topics: int
    queues: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    dispatched_offset: int
    dispatch_lag_bytes: int
    messages_put: int
    messages_read: int
    resident_memory_bytes: int
    data_dir: str
    flush_mode: str
    dispatch_lag_ms: int = 0  # age of the oldest record not indexed yet (0: everything is indexed)
    corrupted_records: int = 0  # damaged records the broker keeps and never serves
    corrupted: tuple = ()  # CorruptedRecord, the first 100 by commitlog offset
    disk_failure: str = ""  # set after a failed flush: why the broker refuses writes until it is restarted


@dataclass(frozen=True)
class CorruptedRecord:
    """A damaged record of a broker's commitlog, kept in place (its offsets stay taken) and never
    served. Topic "" and -1s where neither its index unit nor its header can tell."""

    commitlog_offset: int
    size: int
    topic: str
    queue_id: int
    first_offset: int
    end_offset: int  # exclusive
    reason: str
    found_by: str  # "recovery" or "read"


class TransactionState(str, enum.Enum):
    """Where a transaction stands on the broker."""

    OPEN = "open"  # batches prepared, nothing visible
    COMMITTING = "committing"  # decided; being made visible (completed after a broker crash)
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    UNKNOWN = "unknown"  # never prepared, or ended longer ago than the broker remembers


class HalfMessage(NamedTuple):
    """A message prepared under RocketMQ's transactional messages (a "half message"): stored in
    the broker's half topic, invisible until END_TRANSACTION commits it, and what that request
    names (``RemotingTransport.end_halves``)."""

    broker: str
    topic: str  # the topic the message is for, once committed
    unique_key: str  # its UNIQ_KEY (RocketMQ's msgId), which the committed message keeps
    commit_log_offset: int  # where the broker stored the half message
    queue_offset: int  # its offset in the broker's half topic (tranStateTableOffset)


@dataclass(frozen=True)
class PreparedTransaction:
    """What a writer prepared under one transaction: what it hands to the committer.

    ``message_count`` travels with the commit, and the broker refuses a commit whose
    transaction holds another number of messages (batches lost or added).
    """

    transaction_id: str
    batch_count: int  # sends
    message_count: int


@dataclass(frozen=True)
class TransactionOutcome:
    """What a commit or rollback did to one transaction; ``changed`` False: it was in that
    state already (a repeated call)."""

    transaction_id: str
    state: TransactionState
    changed: bool
    batch_count: int  # records prepared (an early batch prepares one per message)
    message_count: int


@dataclass(frozen=True)
class CommitResult:
    """The outcome of a commit.

    ``sink_batch_replayed``: the sink batch named was committed before this call, by
    ``sink_batch_transaction_ids``; nothing was made visible, and the call's open transactions
    were rolled back.
    """

    transactions: tuple
    sink_batch_replayed: bool = False
    sink_batch_transaction_ids: tuple = ()

    @property
    def messages_made_visible(self) -> int:
        return sum(t.message_count for t in self.transactions
                   if t.changed and t.state is TransactionState.COMMITTED)


@dataclass(frozen=True)
class SinkInfo:
    """A sink of the broker's: the account that owns it ("" none), its highest committed batch
    id, how many of its latest committed batches it remembers, and when the latest was committed."""

    sink_id: str
    owner: str
    latest_batch_id: int
    batches_kept: int
    committed_ms: int


@dataclass(frozen=True)
class SinkBatchStatus:
    """Whether a sink's batch was committed, and the sink's highest committed batch id
    (-1: none)."""

    sink_id: str
    batch_id: int
    committed: bool
    transaction_ids: tuple = ()
    committed_ms: int = 0
    latest_batch_id: int = -1


@dataclass(frozen=True)
class TransactionInfo:
    """A transaction as the broker holds it (``expires_ms``: when the timeout rolls an open
    one back, else 0)."""

    transaction_id: str
    state: TransactionState
    batch_count: int = 0
    message_count: int = 0
    created_ms: int = 0
    last_prepared_ms: int = 0
    expires_ms: int = 0
    ended_ms: int = 0
    expired: bool = False  # rolled back by the timeout


class ReceivedMessage(NamedTuple):
    """A message handed out by a PopConsumer; ack it through its ``receipt_handle`` (shared by
    the messages of one BatchCQ unit: they are acked together). (A tuple: a pop hands out
    hundreds at a time, and a tuple is quick to make.)"""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    keys: str | None
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int
    receipt_handle: str
    properties: dict
    broker: str = ""


@dataclass(frozen=True)
class BrokerInfo:
    """A broker of a cluster, as the name servers list it (through our door: the one broker)."""

    cluster: str
    name: str
    address: str  # its master's address (through our door: the endpoint)


@dataclass(frozen=True)
class BrokerQueues:
    """One broker's part of a topic's route (RocketMQ's QueueData, with its master's address): its
    queues 0 .. read_queues - 1 are read, 0 .. write_queues - 1 written, as ``perm`` allows."""

    broker: str
    address: str  # the master's address (through our door: the endpoint)
    read_queues: int
    write_queues: int
    perm: int


@dataclass(frozen=True)
class ConsumerConnection:
    """A consumer of a group connected to a broker now, as it says in its heartbeats (through our
    door the client id alone: the broker knows no more)."""

    group: str
    client_id: str
    address: str = ""
    language: str = ""
    version: str = ""
    broker: str = ""
    subscriptions: tuple = ()  # (topic, expression) of the group's subscriptions


@dataclass(frozen=True)
class StoredMessage:
    """A message as a broker stores it (one stored record: an inner batch is one record of many
    messages, ``messages`` of them, its body the batch's payload), found by key or by id.
    ``message_id`` is RocketMQ's offset message id (store host and commitlog offset), which
    finds the record again (``rmq-admin message get``); ``unique_key`` the id its producer gave."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    message_id: str
    unique_key: str
    keys: str
    tags: str
    born_timestamp_ms: int
    store_timestamp_ms: int
    properties: dict
    body: bytes
    messages: int = 1
    broker: str = ""
