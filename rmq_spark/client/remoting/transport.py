"""RemotingTransport: the Transport over RocketMQ's remoting protocol, made of this package's
parts, each one subject (the package's __init__ lists them). It holds what they share (the
calls, the name servers, the message ids) and hands each Transport operation to its part."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Callable, Iterator, Sequence

from rmq_spark.client.message_ids import UniqueKeys
from rmq_spark.client.remoting.calls import Calls, client_id
from rmq_spark.client.remoting.cluster import Cluster
from rmq_spark.client.remoting.groups import Groups
from rmq_spark.client.remoting.halves import Halves
from rmq_spark.client.remoting.messages import Messages
from rmq_spark.client.remoting.offsets import Offsets
from rmq_spark.client.remoting.pops import Pops
from rmq_spark.client.remoting.pulls import Pulls
from rmq_spark.client.remoting.routes import NameServers, TopicRoute
from rmq_spark.client.remoting.sends import Sends
from rmq_spark.client.remoting.topics import Topics
from rmq_spark.client.transport import (
    AckFailure,
    Popped,
    PopQuery,
    RangeChunk,
    Send,
    SendAnswer,
    Transport,
    TransportConfig,
)
from rmq_spark.errors import ConfigError
from rmq_spark.structs import (
    BrokerInfo,
    BrokerQueues,
    BrokerStats,
    CommitResult,
    ConsumerConnection,
    GroupInfo,
    GroupOffset,
    HalfMessage,
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

PULL_GROUP = "rocketmq-batch-reader"  # the consumer group pulls name unless a reader names its own
TRANSACTIONS_REFUSED = (
    "transactions of batches (a Producer's transaction_id, Transactions) are broker_sim's (through endpoint): "
    "RocketMQ prepares and ends transactional messages one at a time and has no fence against a replayed batch. "
    "Through name servers, send at least once (each message carries a UNIQ_KEY, so readers can drop repeats), or "
    "write a stream exactly once with the Spark sink (deliveryGuarantee=exactlyOnce: RocketMQ's transactional "
    "messages)")


class RemotingTransport(Transport):
    """Name servers ``name_server`` ("host:port;host:port") and a connection per broker."""

    native_rocketmq = True
    supports_transactions = False
    supports_half_messages = True
    transactions_refused = TRANSACTIONS_REFUSED
    write_form = (Codec.RMQ, Compression.NONE)
    write_form_reason = ("through name servers a batch is RocketMQ's MessageBatch, uncompressed, which RocketMQ's "
                         "brokers and clients read")

    def __init__(self, name_server: str, config: TransportConfig, *, pull_group: str = PULL_GROUP,
                 sleep: Callable[[float], None] = time.sleep):
        self.endpoint = name_server
        self.config = config
        self.client_id = client_id()
        self.unique_keys = UniqueKeys()
        self.calls = Calls(config, sleep=sleep, backoff_s=self.backoff_s, on_request=self._asked)
        self.names = NameServers(name_server.split(";"), self.calls.invoke)
        self.topics = Topics(self.calls, self.names)
        self.queue_offsets = Offsets(self.calls, self.names, pull_group)
        self.consumer_groups = Groups(self.calls, self.names, self.topics, self.client_id)
        self.sends = Sends(self.calls, self.names, self.unique_keys, self.check_write, self.write_form)
        self.pulls = Pulls(self.calls, self.names, pull_group)
        self.pops = Pops(self.calls, self.names)
        self.messages = Messages(self.calls, self.names)
        self.halves = Halves(self.calls, self.names, self.messages, self.unique_keys, self.client_id)
        self.cluster = Cluster(self.calls, self.names)

    def _asked(self, connection, command) -> None:
        self.halves.asked(connection, command)  # the only requests a broker sends a client: checks

    @property
    def pull_group(self) -> str:
        return self.pulls.pull_group

    @pull_group.setter
    def pull_group(self, group: str) -> None:
        self.pulls.pull_group = self.queue_offsets.pull_group = group

    # --- topics ----------------------------------------------------------------------------------

    def route(self, topic: str, refresh: bool = False, last_known: bool = True) -> TopicRoute:
        return self.names.route(topic, refresh, last_known)

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType) -> TopicInfo:
        return self.topics.create(name, queue_count, queue_type)

    def delete_topic(self, name: str) -> bool:
        return self.topics.delete(name)

    def list_topics(self) -> list[TopicInfo]:
        return self.topics.list()

    def new_topic(self, name: str) -> TopicInfo | None:
        return self.topics.new(name)

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        return self.topics.info(self.names.route(name)), self.offsets([name])[name]

    # --- offsets and groups --------------------------------------------------------------------

    def offsets(self, topics: list[str], unreachable: set | None = None, past: dict | None = None,
                wait_ms: int = 0) -> dict[str, list[QueueOffsets]]:
        if past and wait_ms > 0:
            self.queue_offsets.wait_past(past, wait_ms)
        return self.queue_offsets.of(topics or [t.name for t in self.topics.list()], unreachable)

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids: list[int],
                              broker: str = "") -> dict[int, int]:
        return self.queue_offsets.for_timestamp(topic, timestamp_ms, queue_ids, broker)

    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, str, int], int]) -> None:
        self.consumer_groups.commit_offsets(group, offsets)

    def group_offsets(self, group: str, topics: list[str]) -> list[GroupOffset]:
        return self.consumer_groups.offsets(group, topics)

    def groups(self, names: list[str]) -> list[GroupInfo]:
        return self.consumer_groups.list(names)

    def broker_stats(self) -> BrokerStats:
        raise ConfigError("broker stats are broker_sim's (rmq-admin broker stats, through its endpoint); through "
                          "name servers: rmq-admin broker status [BROKER] (RocketMQ's brokerStatus)")

    # --- what operators look at and change ---------------------------------------------------------

    def update_topic(self, name: str, queue_count: int = 0, perm: int = 0) -> TopicInfo:
        return self.topics.update(name, queue_count, perm)

    def delete_group(self, group: str) -> bool:
        return self.consumer_groups.delete(group)

    def topic_route(self, topic: str) -> list[BrokerQueues]:
        return list(self.names.route(topic, refresh=True, last_known=False).brokers)

    def brokers(self) -> list[BrokerInfo]:
        return self.cluster.brokers()

    def broker_status(self, broker: str = "") -> dict[str, str]:
        return self.cluster.status(broker)

    def consumer_connections(self, group: str) -> list[ConsumerConnection]:
        return self.consumer_groups.connections(group)

    def query_messages(self, topic: str, key: str, *, unique_key: bool = False, begin_ms: int = 0, end_ms: int = 0,
                       max_messages: int = 32) -> list[StoredMessage]:
        return self.messages.query(topic, key, unique_key=unique_key, begin_ms=begin_ms, end_ms=end_ms,
                                   max_messages=max_messages)

    def message_by_offset_id(self, message_id: str) -> StoredMessage:
        return self.messages.by_offset_id(message_id)

    # --- messages ------------------------------------------------------------------------------

    def send_many(self, sends: list[Send], timeout_ms: int, answer: SendAnswer) -> None:
        self.sends.send_many(sends, timeout_ms, answer)

    def read_ranges(self, ranges: Sequence[OffsetRange], max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        return self.pulls.read(ranges, max_bytes, tag_filter)

    def pop(self, query: PopQuery) -> Popped:
        return self.pops.pop(query)

    def ack(self, group: str, receipt_handles: list[str]) -> list[AckFailure]:
        return self.pops.ack(group, receipt_handles)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        return self.pops.change_invisible(group, receipt_handle, invisible_ms)

    # --- RocketMQ's transactional messages (halves.py) -----------------------------------------

    def send_half(self, topic: str, queue: tuple[str, int], body: bytes, properties: dict, group: str,
                  check_immunity_s: int = 0) -> Future:
        return self.halves.send(topic, queue, body, properties, group, check_immunity_s)

    def end_halves(self, halves: Sequence[HalfMessage], commit: bool, group: str, timeout_ms: int | None = None,
                   in_flight: int = 128, ended: Callable[[int], None] | None = None) -> None:
        self.halves.end(halves, commit, group, timeout_ms, in_flight, ended)

    def answer_checks(self, group: str, answer: Callable[[dict], bool | None]) -> None:
        self.halves.answer_checks(group, answer)

    def message_exists(self, topic: str, broker: str, unique_key: str) -> bool:
        return self.halves.message_exists(topic, broker, unique_key)

    # --- transactions of batches: not RocketMQ's -------------------------------------------------

    def end_transactions(self, commit: bool, transactions: list[PreparedTransaction],
                         sink_batch: tuple[str, int] | None, timeout_ms: int) -> CommitResult:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def list_transactions(self, transaction_ids: list[str]) -> list[TransactionInfo]:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def list_sinks(self) -> list[SinkInfo]:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def release_sink(self, sink_id: str) -> str | None:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def close(self) -> None:
        self.halves.close()
        self.calls.close()
