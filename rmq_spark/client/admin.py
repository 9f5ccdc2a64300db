"""Admin: topics, offsets, timestamps, consumer groups and their offsets, the cluster's brokers,
and stored messages found by key or id: what rmq-admin shows and changes."""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.client.connect import connect
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import ConfigError, GroupBusyError, MessageNotFoundError
from rmq_spark.structs import (
    PERM_READ,
    PERM_WRITE,
    BrokerInfo,
    BrokerQueues,
    BrokerStats,
    ConsumerConnection,
    GroupInfo,
    GroupOffset,
    QueueOffsets,
    QueueType,
    StoredMessage,
    TopicInfo,
)
from rmq_wire.types import MAX_OFFSETS_WAIT_MS


class Admin:
    """Administration of a broker, or of a RocketMQ cluster through its name servers.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of broker_sim's own door.
    name_server : str
        Or RocketMQ's name servers, ``HOST:PORT;HOST:PORT``: any RocketMQ cluster (broker_sim's
        remoting door too). A topic may then be served by several brokers, whose queues are
        told apart by their broker's name (``QueueOffsets.broker``).
    transport : TransportConfig, optional
        Deadlines, retries and TLS.
    """

    MAX_WAIT_MS = MAX_OFFSETS_WAIT_MS  # the longest a long poll of offsets waits (the broker's cap)

    def __init__(self, endpoint: str | None = None, transport: TransportConfig | None = None, *,
                 name_server: str | None = None):
        self._transport = connect(endpoint, transport, name_server=name_server)

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType | str = QueueType.BATCH_CQ) -> TopicInfo:
        """Create a topic (or return it, when it exists with the same settings). Through name
        servers: ``queue_count`` queues on every broker of the cluster, as ``mqadmin updateTopic
        -c`` makes them."""
        if not isinstance(queue_count, int) or queue_count < 1:
            raise ConfigError(f"queue_count={queue_count!r}: a topic needs at least one queue")
        return self._transport.create_topic(name, queue_count, QueueType.parse(queue_type))

    def delete_topic(self, name: str) -> bool:
        return self._transport.delete_topic(name)

    def update_topic(self, name: str, *, queue_count: int | None = None, perm: "int | str | None" = None) -> TopicInfo:
        """Change a topic that exists, as ``mqadmin updateTopic`` does: ``queue_count`` queues (on
        each of its brokers; more add queues, fewer leave those past the count unserved, their
        messages kept), ``perm`` "rw" / "r" / "w" (or RocketMQ's PermName bits 6 / 4 / 2): a topic
        without "w" refuses sends, without "r" reads. None leaves a setting as it is."""
        if queue_count is not None and (not isinstance(queue_count, int) or queue_count < 1):
            raise ConfigError(f"queue_count={queue_count!r}: a topic needs at least one queue")
        bits = _perm_bits(perm) if perm is not None else 0
        if queue_count is None and not bits:
            raise ConfigError("nothing to change: give queue_count or perm")
        return self._transport.update_topic(name, queue_count or 0, bits)

    def topic_route(self, name: str) -> list[BrokerQueues]:
        """Where topic ``name`` is served now, each broker's queues and permission (RocketMQ's
        topicRoute; through our door the one broker)."""
        return self._transport.topic_route(name)

    def brokers(self) -> list[BrokerInfo]:
        """The cluster's brokers, as the name servers list them (RocketMQ's clusterList)."""
        return self._transport.brokers()

    def broker_status(self, broker: str = "") -> dict[str, str]:
        """A broker's runtime figures (RocketMQ's brokerStatus; through our door its stats);
        ``broker`` may be left out where the cluster has one."""
        return self._transport.broker_status(broker)

    def list_topics(self) -> list[TopicInfo]:
        """Every application topic (the broker's own left out: ``is_system_topic``); through name
        servers, for an account that is not an admin of a broker with ACLs, those it may publish
        or subscribe to (``RemotingTransport.list_topics`` says why)."""
        return self._transport.list_topics()

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        """The topic and its queues' min / max offsets."""
        return self._transport.describe_topic(name)

    def new_topic(self, name: str) -> TopicInfo | None:
        """Where the broker makes a topic on its first send (RocketMQ's autoCreateTopicEnable):
        the queues a first send to ``name``, which does not exist, creates it with; None where
        it makes none, and a topic must be created first."""
        return self._transport.new_topic(name)

    def offsets(self, topics: list[str], *, unreachable: set | None = None, past: dict | None = None,
                wait_ms: int = 0) -> dict[str, list[QueueOffsets]]:
        """Min / max offsets of every queue of many topics (of every topic when ``topics`` is
        empty), in as few calls as the broker's answers allow (it pages them). Through name
        servers, with an ``unreachable`` set: the brokers that cannot be reached now are added to
        it and their queues left out, rather than failing the call.

        A long poll, for a reader that has read everything: with ``past`` ({(topic, broker,
        queue id): offset}, the broker "" through our door) and ``wait_ms`` (at most 30,000), the
        answer comes once a queue of ``past`` ends past its offset there (woken by the broker as
        the messages are stored, not polled), or after ``wait_ms`` with nothing new. Through
        name servers each queue's wait is a suspended PULL_MESSAGE, as RocketMQ's consumers wait."""
        if wait_ms < 0 or wait_ms > self.MAX_WAIT_MS:
            raise ConfigError(f"wait_ms={wait_ms}: give 0 (answer now) to {self.MAX_WAIT_MS:,}")
        return self._transport.offsets(list(topics), unreachable, past, int(wait_ms))

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids=None, broker: str = "") -> dict[int, int]:
        """Per queue (of ``broker``, for a topic served by several), the first offset stored at
        or after ``timestamp_ms`` (the max offset if none)."""
        return self._transport.offsets_for_timestamp(topic, int(timestamp_ms), list(queue_ids or []), broker)

    def commit_group_offsets(self, group: str, offsets: dict[tuple, int]) -> None:
        """Commit a consumer group's next offsets, ``{(topic, queue_id): offset}``, or
        ``{(topic, broker, queue_id): offset}`` for topics served by several brokers."""
        keyed = {}
        for key, offset in offsets.items():
            if len(key) == 2:
                key = (key[0], "", key[1])
            elif len(key) != 3:
                raise ConfigError(f"offset key {key!r}: use (topic, queue_id) or (topic, broker, queue_id)")
            keyed[key] = offset
        self._transport.commit_group_offsets(group, keyed)

    def group_offsets(self, group: str, topics=None) -> list[GroupOffset]:
        return self._transport.group_offsets(group, list(topics or []))

    def groups(self, names=None) -> list[GroupInfo]:
        """The consumer groups named (every group the brokers know when none is), each with its
        live consumers."""
        return self._transport.groups(list(names or []))

    def consumer_connections(self, group: str) -> list[ConsumerConnection]:
        """The consumers of ``group`` connected now, with their addresses, languages and
        versions where the brokers know them (RocketMQ's consumerConnection)."""
        return self._transport.consumer_connections(group)

    def delete_group(self, group: str) -> bool:
        """Forget a consumer group: its committed offsets, settings, and (through name servers)
        its retry and dead-letter topics, as ``mqadmin deleteSubGroup -r`` does. Refused with
        ``GroupBusyError`` while it has live consumers, as Kafka refuses to delete a group that is
        not empty. False where no broker knew it."""
        self._refuse_if_live(group, "would recreate it at their next commit")
        return self._transport.delete_group(group)

    def find_messages(self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0,
                      max_messages: int = 32) -> list[StoredMessage]:
        """The stored messages of ``topic`` whose keys (KEYS, space-separated) hold ``key``,
        stored between ``begin_ms`` and ``end_ms`` (0: now), most recent first (RocketMQ's
        queryMsgByKey)."""
        if not key:
            raise ConfigError("key is empty: give a key the messages were sent with")
        return self._transport.query_messages(topic, key, begin_ms=begin_ms, end_ms=end_ms,
                                              max_messages=max_messages)

    def message(self, message_id: str, topic: str | None = None) -> StoredMessage:
        """The stored message ``message_id`` names: with ``topic``, the id its producer gave it
        (its UNIQ_KEY: RocketMQ's queryMsgByUniqueKey); without, RocketMQ's offset message id
        (store host and commitlog offset: queryMsgById). MessageNotFoundError where none is."""
        if topic is None:
            return self._transport.message_by_offset_id(message_id)
        found = self._transport.query_messages(topic, message_id, unique_key=True, max_messages=1)
        if not found:
            raise MessageNotFoundError(f"topic {topic!r} holds no message with id {message_id!r} (the UNIQ_KEY its "
                                       "producer gave it; an offset message id is looked up without --topic)")
        return found[0]

    def reset_group_offsets(self, group: str, topic: str, *, to: str, timestamp_ms: int | None = None,
                            offset: int | None = None, shift_by: int | None = None,
                            dry_run: bool = False) -> list["OffsetReset"]:
        """Move ``group``'s offsets of every queue of ``topic``, as ``kafka-consumer-groups
        --reset-offsets`` does: ``to`` "earliest" (each queue's first stored offset), "latest"
        (its max offset), "datetime" (the first stored at or after ``timestamp_ms``), "offset"
        (``offset``) or "shift" (the committed offset moved by ``shift_by``, which may be
        negative; the first stored offset where the group committed none), each kept within the
        queue's stored offsets. Refused with ``GroupBusyError``
        while the group has live consumers (they would commit their own positions over the
        new ones). ``dry_run``: only say what would be committed."""
        if to not in ("earliest", "latest", "datetime", "offset", "shift"):
            raise ConfigError(f"to={to!r}: use earliest, latest, datetime, offset or shift")
        if (to == "datetime") != (timestamp_ms is not None) or (to == "offset") != (offset is not None) or (
                to == "shift") != (shift_by is not None):
            raise ConfigError("give timestamp_ms with to='datetime', offset with to='offset' and shift_by with "
                              "to='shift', and only then")
        if not dry_run:
            self._refuse_if_live(group, "would overwrite the reset")
        _topic, queues = self.describe_topic(topic)
        committed = {(o.broker, o.queue_id): o.offset for o in self.group_offsets(group, [topic])}
        by_time = {}
        if to == "datetime":
            for broker in sorted({q.broker for q in queues}):
                found = self.offsets_for_timestamp(topic, timestamp_ms, [q.queue_id for q in queues
                                                                         if q.broker == broker], broker)
                by_time.update({(broker, queue_id): at for queue_id, at in found.items()})
        resets = []
        for q in queues:
            current = committed.get((q.broker, q.queue_id))
            wanted = {"earliest": q.min_offset, "latest": q.max_offset, "offset": offset,
                      "datetime": by_time.get((q.broker, q.queue_id), q.max_offset),
                      "shift": (q.min_offset if current is None else current) + (shift_by or 0)}[to]
            new = min(max(wanted, q.min_offset), q.max_offset)
            resets.append(OffsetReset(group, topic, q.queue_id, committed.get((q.broker, q.queue_id)), new, q.broker))
        if not dry_run:
            self.commit_group_offsets(group, {(r.topic, r.broker, r.queue_id): r.new_offset for r in resets})
        return resets

    def broker_stats(self) -> BrokerStats:
        return self._transport.broker_stats()

    def _refuse_if_live(self, group: str, because: str) -> None:
        [info] = self.groups([group])
        if info.consumers:
            raise GroupBusyError(f"group {group!r} has live consumers ({', '.join(info.consumers)}), which {because}: "
                                 "stop them and try again (a broker counts a consumer live until 2 minutes after its "
                                 "last heartbeat or pop)")

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class OffsetReset:
    """A queue's offset of a group before a reset (None: never committed) and after it."""

    group: str
    topic: str
    queue_id: int
    offset: int | None
    new_offset: int
    broker: str = ""


_PERMS = {"rw": PERM_READ | PERM_WRITE, "wr": PERM_READ | PERM_WRITE, "r": PERM_READ, "w": PERM_WRITE}


def _perm_bits(perm: "int | str") -> int:
    """A permission as RocketMQ's PermName bits, from "rw" / "r" / "w" or 6 / 4 / 2."""
    if isinstance(perm, int) and not isinstance(perm, bool) and perm in (2, 4, 6):
        return perm
    if isinstance(perm, str) and perm.strip().lower() in _PERMS:
        return _PERMS[perm.strip().lower()]
    if isinstance(perm, str) and perm.strip() in ("2", "4", "6"):
        return int(perm)
    raise ConfigError(f"perm={perm!r}: use rw (6: read and write), r (4: read only) or w (2: write only)")
