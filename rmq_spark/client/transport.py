"""The transport seam: every broker operation the SDK needs, in the SDK's own types.

The producer, the readers, the pop consumer, Admin and Transactions call a ``Transport`` and
never a wire format. Two transports build on this module, which knows neither: for an endpoint,
``GrpcTransport`` (grpc_transport.py, our own gRPC contract, one broker); for name servers,
``RemotingTransport`` (the package remoting/, RocketMQ's remoting protocol to any RocketMQ
cluster, broker_sim's remoting door included). ``connect`` (connect.py) picks one.

What a transport can do beyond the calls every transport answers is declared on ``Transport``
(``native_rocketmq``, ``supports_transactions``, ``write_form``, ``pull_group``,
``unique_keys``), so that callers ask it rather than probe for attributes; ``check_write`` is
where a write a transport cannot carry is refused, before anything is sent.

A queue is (topic, broker, queue id): through our door the broker is "" (there is one);
through name servers a topic may be served by several brokers, each with its own queue 0.

An implementation raises the typed errors of errors.py, retries the calls that are safe to
repeat (``TransportConfig.retries``), and says "expected" outcomes (a range's end, an ack that
came too late) in the values it returns.
"""

from __future__ import annotations

import enum
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple, Sequence

from rmq_spark.client.message_ids import UniqueKeys
from rmq_spark.errors import ConfigError, RmqError
from rmq_spark.structs import (
    BrokerInfo,
    BrokerQueues,
    BrokerStats,
    CommitResult,
    ConsumerConnection,
    Credentials,
    GroupInfo,
    GroupOffset,
    Message,
    OffsetRange,
    PreparedTransaction,
    QueueOffsets,
    QueueType,
    SinkBatchStatus,
    SinkInfo,
    StoredMessage,
    TopicInfo,
    TransactionInfo,
)
from rmq_wire.codec import Codec, Compression


@dataclass(frozen=True)
class TransportConfig:
    """Deadlines, retries, credentials and TLS of the calls to the broker.

    ``retries``: further attempts of a call that failed with a retriable code, when the call is
    safe to repeat (a producer's sends are retried for its ``delivery_timeout_ms`` instead, as
    Kafka's are); the wait before attempt n is ``retry_backoff_ms * 2**n`` (capped at
    ``retry_backoff_max_ms``) with jitter. ``credentials``: the account every call is signed
    with, for brokers that check ACLs (RocketMQ's signatures on either protocol).

    ``tls``: connect with TLS (a broker started with ``--tls-cert``), checking the broker's
    certificate against the system's CAs, or ``tls_ca_file`` (PEM) for a private CA;
    ``tls_cert_file`` and ``tls_key_file`` (PEM, the key unencrypted): the client's certificate,
    for a broker that requires one (``--tls-client-ca``, mutual TLS). See tls.py.
    """

    timeout_ms: int = 10_000
    retries: int = 3
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 2_000
    keepalive_ms: int = 30_000
    credentials: Credentials | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    def __post_init__(self):
        for name in ("timeout_ms", "retry_backoff_ms", "retry_backoff_max_ms", "keepalive_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be a positive number of milliseconds")
        if self.retries < 0:
            raise ConfigError(f"retries={self.retries!r}: must be 0 or more")
        if not self.tls and (self.tls_ca_file or self.tls_cert_file or self.tls_key_file):
            raise ConfigError("tls_ca_file, tls_cert_file and tls_key_file are for TLS connections: set tls=True too")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("a client certificate needs both tls_cert_file and tls_key_file (PEM files)")


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it is ``HOST:PORT`` (a port from 1 to 65535); else ``ConfigError``, before
    any connection is tried."""
    host, sep, port = str(endpoint).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"endpoint {endpoint!r} is not HOST:PORT (for example 127.0.0.1:10911)")
    return endpoint


# --- sending ----------------------------------------------------------------------------------

class EarlyBatch(NamedTuple):
    """Messages in RocketMQ's MessageBatch encoding, uncompressed: the broker stores a record
    per message. ``message_ids``: the UNIQ_KEYs the producer gave its messages (a native
    RocketMQ transport answers with them), else empty."""

    payload: bytes
    count: int
    message_ids: Sequence[str] = ()


class InnerBatch(NamedTuple):
    """An encoded (and maybe compressed) batch the broker stores as ONE record of a BatchCQ
    topic without decoding it; ``tags``: the tag its messages share; ``message_ids`` as
    EarlyBatch's."""

    payload: bytes
    count: int
    codec: Codec
    compression: Compression
    tags: str | None = None
    message_ids: Sequence[str] = ()


class Send(NamedTuple):
    """One send of a SendMany: a message alone, an early batch or an inner batch to one queue.
    ``producer_id`` and ``sequence`` stamp it (the broker stores a stamp once);
    ``transaction_id``: stored prepared under that transaction."""

    topic: str
    queue_id: int
    content: Message | EarlyBatch | InnerBatch
    producer_id: str = ""
    sequence: int = 0
    transaction_id: str = ""
    broker: str = ""


class Stored(NamedTuple):
    """Where the broker stored a send: offsets ``base_offset`` .. ``base_offset + count - 1``.
    No ``message_ids`` when it was prepared under a transaction (offsets come at the commit)."""

    queue_id: int
    base_offset: int
    count: int
    message_ids: Sequence[str]
    store_timestamp_ms: int


# Answers a SendMany, on the transport's thread: (an outcome per send, in order, None) or
# (None, the RmqError that failed the whole call). An outcome is Stored, or the error of that send
# (the broker's refusal as an RmqError, or why the transport could not encode it).
SendAnswer = Callable[["list[Stored | RmqError] | None", "RmqError | None"], None]


# --- reading ----------------------------------------------------------------------------------

class ReadStatus(enum.Enum):
    """How a range of a read ended."""

    FOUND = "found"  # records returned, up to next_offset
    NO_MESSAGE = "no_message"  # nothing stored at the start yet
    OFFSET_TOO_SMALL = "offset_too_small"  # the start is below the min offset: data was deleted
    OFFSET_OVERFLOW = "offset_overflow"  # the start is past the max offset
    BUDGET_EXHAUSTED = "budget_exhausted"  # the call's byte budget ran out first: read on in the next
    RECORD_CORRUPTED = "record_corrupted"  # offsets corrupted_from .. next_offset - 1 are never served


class RangeChunk(NamedTuple):
    """A chunk of one range's stored records as they are in the commitlog (``records``, each
    starting with its TOTALSIZE). The last chunk of a range is ``done``, with its ``status``,
    where a next read starts and the queue's min / max offsets. ``cut_start`` / ``cut_end``:
    the offsets the chunk's rows are cut to, where a transport pulled a part of the range (its
    records may hold messages of the parts beside it); None: the range's own."""

    range_index: int
    records: bytes
    record_count: int
    done: bool
    status: ReadStatus | None
    next_offset: int
    min_offset: int
    max_offset: int
    corrupted_from: int
    detail: str
    cut_start: int | None = None
    cut_end: int | None = None


# --- pop --------------------------------------------------------------------------------------

class PopQuery(NamedTuple):
    """One pop of a group from a topic (``queue_id`` -1: every queue and the group's retry queue)."""

    group: str
    topic: str
    queue_id: int
    max_messages: int
    invisible_ms: int
    poll_ms: int
    tag_filter: str
    orderly: bool
    ack_handles: Sequence[str] = ()  # of the group, acked before the pop (in the same call where the door can)


class Popped(NamedTuple):
    """The deliveries of a pop, column by column (an element a delivery), and their stored
    records concatenated in order (``record_bytes`` each)."""

    topic: str
    invisible_until_ms: int
    polling_full: bool  # nothing to pop and too many pops wait already: try again shortly
    receipt_handles: Sequence[str]
    queue_ids: Sequence[int]
    offsets: Sequence[int]
    counts: Sequence[int]
    reconsume_times: Sequence[int]
    retry: Sequence[bool]
    record_bytes: Sequence[int]
    records: memoryview
    broker: str = ""  # the broker that answered (a pop goes to one broker)
    ack_failures: Sequence["AckFailure"] = ()  # of the query's ack_handles: those not acked


class AckFailure(NamedTuple):
    """A receipt handle that was not acked: ``invalid`` (not issued to this group), else expired."""

    index: int  # of the handle in the call
    invalid: bool
    detail: str


# --- the seam ---------------------------------------------------------------------------------

class Transport(ABC):
    """The broker operations of the SDK. Safe to share between threads.

    Capabilities, declared here with what every transport has unless it says otherwise:

    ``native_rocketmq``: what is sent are RocketMQ's own messages (RocketMQ's remoting
    protocol), each message with its UNIQ_KEY, with no idempotent stamps (a retried send may be
    stored twice). ``supports_transactions``: sends prepared under a transaction, and
    ``end_transactions``, ``sink_batch``, ``list_transactions`` (without, they raise
    ConfigError(``transactions_refused``)). ``write_form``: the one (codec, compression) this
    transport's batches may have, None for any, and ``write_form_reason``, why; see
    ``check_write``. ``pull_group``: the consumer group reads name where the protocol's reads
    name one (RocketMQ's pulls); settable, ignored by the others. ``unique_keys``: where sends
    carry message ids the producer gives them (``native_rocketmq``), the ``UniqueKeys`` it
    draws them from; else None. ``supports_half_messages``: RocketMQ's transactional messages,
    prepared one at a time and ended one at a time (``send_half``, ``end_halves``,
    ``message_exists``: the remoting transport's own methods).
    """

    endpoint: str  # what the transport reaches, for sentences: HOST:PORT, or the name servers
    config: TransportConfig
    native_rocketmq = False
    supports_transactions = True
    supports_half_messages = False
    transactions_refused = ""
    write_form: tuple[Codec, Compression] | None = None
    write_form_reason = ""
    pull_group: str | None = None
    unique_keys: UniqueKeys | None = None

    @classmethod
    def refused_write_settings(cls, codec: "Codec | str", compression: "Compression | str") -> dict[str, str]:
        """The settings of a write in ``codec`` and ``compression`` (or their names) that this
        transport cannot carry, each with the value ``write_form`` needs (``{"compression":
        "none"}``); empty when it carries them. The one place the rule is checked: ``check_write``
        and the Spark sink's options ask it."""
        if cls.write_form is None:
            return {}
        codec, compression = Codec.parse(codec), Compression.parse(compression)
        needed = {"codec": cls.write_form[0].value, "compression": cls.write_form[1].name.lower()}
        given = {"codec": codec.value, "compression": compression.name.lower()}
        return {name: value for name, value in needed.items() if given[name] != value}

    @classmethod
    def check_write(cls, codec: Codec, compression: Compression, transaction_id: str = "") -> None:
        """Refuse (ConfigError, saying what to use instead) a write this transport cannot carry:
        batches in ``codec`` and ``compression`` (``refused_write_settings``), sends prepared
        under ``transaction_id`` (``supports_transactions``). The Producer asks when it is
        created, a transport again at each send."""
        if cls.refused_write_settings(codec, compression):
            needed = f"codec={cls.write_form[0].value!r} and compression={cls.write_form[1].name.lower()!r}"
            raise ConfigError(f"codec={codec.value!r}, compression={compression.name.lower()!r}: "
                              f"{cls.write_form_reason}; use {needed} (the defaults)")
        if transaction_id and not cls.supports_transactions:
            raise ConfigError(cls.transactions_refused)

    # topics and offsets
    @abstractmethod
    def create_topic(self, name: str, queue_count: int, queue_type: QueueType) -> TopicInfo: ...

    @abstractmethod
    def delete_topic(self, name: str) -> bool: ...

    @abstractmethod
    def list_topics(self) -> list[TopicInfo]: ...

    @abstractmethod
    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]: ...

    @abstractmethod
    def new_topic(self, name: str) -> TopicInfo | None:
        """How a first send reaches topic ``name``, which does not exist, where the broker makes
        topics on a first send (RocketMQ's autoCreateTopicEnable, whose brokers serve the topic
        TBW102, standing for the topics they make): the queues such a topic gets; None where it
        makes none."""

    @abstractmethod
    def offsets(self, topics: list[str], unreachable: set | None = None, past: dict | None = None,
                wait_ms: int = 0) -> dict[str, list[QueueOffsets]]:
        """Min / max offsets of every queue of ``topics`` (of every topic when empty). With
        ``unreachable``, a broker that cannot be reached is added to it and its queues left out
        (where there are several brokers); otherwise its error is raised. With ``past``
        ({(topic, broker, queue id): offset}) and ``wait_ms``, a long poll: the answer waits at
        the broker until a queue of ``past`` ends past its offset there, or ``wait_ms`` passes."""

    @abstractmethod
    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids: list[int],
                              broker: str = "") -> dict[int, int]:
        """Per queue of ``broker`` (all its queues of the topic when ``queue_ids`` is empty),
        the first offset stored at or after ``timestamp_ms``."""

    @abstractmethod
    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, str, int], int]) -> None:
        """Commit ``{(topic, broker, queue_id): next offset}`` as ``group``'s."""

    @abstractmethod
    def group_offsets(self, group: str, topics: list[str]) -> list[GroupOffset]: ...

    @abstractmethod
    def groups(self, names: list[str]) -> list[GroupInfo]:
        """The consumer groups named (every group the brokers know when empty), with their live
        consumers."""

    @abstractmethod
    def broker_stats(self) -> BrokerStats: ...

    # what operators look at and change (rmq-admin; RocketMQ's mqadmin)

    @abstractmethod
    def update_topic(self, name: str, queue_count: int = 0, perm: int = 0) -> TopicInfo:
        """Change a topic that exists (0: leave that setting): its queue count per broker, its
        permission (PERM_READ | PERM_WRITE bits), as RocketMQ's updateTopic does."""

    @abstractmethod
    def delete_group(self, group: str) -> bool:
        """Forget a consumer group on every broker: its offsets and settings. False where no
        broker knew it."""

    @abstractmethod
    def topic_route(self, topic: str) -> list[BrokerQueues]:
        """Where ``topic`` is served now: each broker's part (one entry through our door)."""

    @abstractmethod
    def brokers(self) -> list[BrokerInfo]:
        """The brokers of the cluster (through our door: the one broker)."""

    @abstractmethod
    def broker_status(self, broker: str = "") -> dict[str, str]:
        """A broker's runtime figures by name, as it reports them (RocketMQ's brokerStatus; our
        door's broker stats)."""

    @abstractmethod
    def consumer_connections(self, group: str) -> list[ConsumerConnection]:
        """The consumers of ``group`` connected now, on every broker."""

    @abstractmethod
    def query_messages(self, topic: str, key: str, *, unique_key: bool = False, begin_ms: int = 0, end_ms: int = 0,
                       max_messages: int = 32) -> list[StoredMessage]:
        """The stored messages of ``topic`` whose KEYS hold ``key`` (``unique_key``: whose id, the
        UNIQ_KEY its producer gave, is ``key``), stored between ``begin_ms`` and ``end_ms`` (0: now),
        most recent first, at most ``max_messages`` from each broker."""

    @abstractmethod
    def message_by_offset_id(self, message_id: str) -> StoredMessage:
        """The stored message RocketMQ's offset message id names (its store host and commitlog
        offset: stored.offset_message_id)."""

    # messages
    @abstractmethod
    def send_many(self, sends: list[Send], timeout_ms: int, answer: SendAnswer) -> None:
        """Sends in one call, without waiting: ``answer`` is called once, on the transport's
        thread (not retried here: the caller retries what failed retriably). A send the
        transport cannot encode is answered with its error; the others go."""

    @abstractmethod
    def read_ranges(self, ranges: Sequence[OffsetRange], max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        """The stored records of ``ranges`` (end None: up to the max offset at read time), at
        most ``max_bytes`` of them in all (not retried: the caller knows how far it got).
        A range may be any object with OffsetRange's four attributes."""

    # pop
    @abstractmethod
    def pop(self, query: PopQuery) -> Popped: ...

    @abstractmethod
    def ack(self, group: str, receipt_handles: list[str]) -> list[AckFailure]:
        """Ack in one call; returns the handles that were not acked (not retried: a repeat
        would find the first attempt's acks expired)."""

    @abstractmethod
    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        """The delivery's new receipt handle and when it becomes visible again."""

    # transactions
    @abstractmethod
    def end_transactions(self, commit: bool, transactions: list[PreparedTransaction],
                         sink_batch: tuple[str, int] | None, timeout_ms: int) -> CommitResult:
        """Commit (or roll back) ``transactions`` in order, recording ``(sink_id, batch_id)``
        with a commit; a message count of 0 is not checked."""

    @abstractmethod
    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus: ...

    @abstractmethod
    def list_transactions(self, transaction_ids: list[str]) -> list[TransactionInfo]: ...

    @abstractmethod
    def list_sinks(self) -> list[SinkInfo]: ...

    @abstractmethod
    def release_sink(self, sink_id: str) -> str | None:
        """Forget who owns the sink; the owner it had (None: none)."""

    @abstractmethod
    def close(self) -> None: ...

    def backoff_s(self, attempt: int) -> float:
        """The wait before retry ``attempt + 1``: exponential, capped, with jitter."""
        ceiling = min(self.config.retry_backoff_max_ms, self.config.retry_backoff_ms * 2 ** attempt)
        return ceiling * random.uniform(0.5, 1.0) / 1000


def check_name_server(name_server: str) -> str:
    """``name_server`` if it is RocketMQ's address list, ``HOST:PORT[;HOST:PORT...]``; else
    ``ConfigError``, before any connection is tried."""
    addresses = [part.strip() for part in str(name_server).split(";") if part.strip()]
    if not addresses:
        raise ConfigError(f"name server {name_server!r} names no address: give HOST:PORT, or several separated "
                          "by ';' (for example 127.0.0.1:9876;127.0.0.2:9876)")
    for address in addresses:
        try:
            check_endpoint(address)
        except ConfigError:
            raise ConfigError(f"name server {name_server!r}: {address!r} is not HOST:PORT (for example "
                              "127.0.0.1:9876); separate several with ';'") from None
    return ";".join(addresses)

