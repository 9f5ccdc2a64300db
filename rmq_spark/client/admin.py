"""Admin: topics, offsets, timestamps, consumer group offsets and broker stats."""

from __future__ import annotations

from ..errors import ConfigError
from ..structs import BrokerStats, GroupOffset, QueueOffsets, QueueType, TopicInfo
from .transport import TransportConfig, connect


class Admin:
    """Administration of one broker.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    transport : TransportConfig, optional
        Deadlines and retries.
    """

    def __init__(self, endpoint: str, transport: TransportConfig | None = None):
        self._transport = connect(endpoint, transport)

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType | str = QueueType.BATCH_CQ) -> TopicInfo:
        """Create a topic (or return it, when it exists with the same settings)."""
        if not isinstance(queue_count, int) or queue_count < 1:
            raise ConfigError(f"queue_count={queue_count!r}: a topic needs at least one queue")
        return self._transport.create_topic(name, queue_count, QueueType.parse(queue_type))

    def delete_topic(self, name: str) -> bool:
        return self._transport.delete_topic(name)

    def list_topics(self) -> list[TopicInfo]:
        return self._transport.list_topics()

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        """The topic and its queues' min / max offsets."""
        return self._transport.describe_topic(name)

    def offsets(self, topics: list[str]) -> dict[str, list[QueueOffsets]]:
        """Min / max offsets of every queue of many topics (of every topic when ``topics`` is
        empty), in as few calls as the broker's answers allow (it pages them)."""
        return self._transport.offsets(list(topics))

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids=None) -> dict[int, int]:
        """Per queue, the first offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        return self._transport.offsets_for_timestamp(topic, int(timestamp_ms), list(queue_ids or []))

    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit a consumer group's next offsets, ``{(topic, queue_id): offset}``."""
        self._transport.commit_group_offsets(group, offsets)

    def group_offsets(self, group: str, topics=None) -> list[GroupOffset]:
        return self._transport.group_offsets(group, list(topics or []))

    def broker_stats(self) -> BrokerStats:
        return self._transport.broker_stats()

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
