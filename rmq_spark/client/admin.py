"""Admin: topics, offsets, timestamps, consumer group offsets and broker stats."""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.client.connect import connect
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import ConfigError, GroupBusyError
from rmq_spark.structs import BrokerStats, GroupInfo, GroupOffset, QueueOffsets, QueueType, TopicInfo
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

    def reset_group_offsets(self, group: str, topic: str, *, to: str, timestamp_ms: int | None = None,
                            offset: int | None = None, dry_run: bool = False) -> list["OffsetReset"]:
        """Move ``group``'s offsets of every queue of ``topic``, as ``kafka-consumer-groups
        --reset-offsets`` does: ``to`` "earliest" (each queue's first stored offset), "latest"
        (its max offset), "datetime" (the first stored at or after ``timestamp_ms``) or "offset"
        (``offset``, kept within the queue's stored offsets). Refused with ``GroupBusyError``
        while the group has live consumers (they would commit their own positions over the
        new ones). ``dry_run``: only say what would be committed."""
        if to not in ("earliest", "latest", "datetime", "offset"):
            raise ConfigError(f"to={to!r}: use earliest, latest, datetime or offset")
        if (to == "datetime") != (timestamp_ms is not None) or (to == "offset") != (offset is not None):
            raise ConfigError("give timestamp_ms with to='datetime' and offset with to='offset', and only then")
        [info] = self.groups([group])
        if info.consumers and not dry_run:
            raise GroupBusyError(f"group {group!r} has live consumers ({', '.join(info.consumers)}), whose commits "
                                 "would overwrite the reset: stop them and reset again (a broker counts a consumer "
                                 "live until 2 minutes after its last heartbeat or pop)")
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
            wanted = {"earliest": q.min_offset, "latest": q.max_offset, "offset": offset,
                      "datetime": by_time.get((q.broker, q.queue_id), q.max_offset)}[to]
            new = min(max(wanted, q.min_offset), q.max_offset)
            resets.append(OffsetReset(group, topic, q.queue_id, committed.get((q.broker, q.queue_id)), new, q.broker))
        if not dry_run:
            self.commit_group_offsets(group, {(r.topic, r.broker, r.queue_id): r.new_offset for r in resets})
        return resets

    def broker_stats(self) -> BrokerStats:
        return self._transport.broker_stats()

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
