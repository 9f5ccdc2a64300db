"""Admin: topics, offsets, timestamps, consumer group offsets and broker stats."""

from __future__ import annotations

from ..errors import ConfigError
from ..protocol.v1 import broker_pb2 as pb
from ..structs import BrokerStats, CorruptedRecord, GroupOffset, QueueOffsets, QueueType, TopicInfo
from .transport import Transport, TransportConfig

_QUEUE_TYPES = {QueueType.BATCH_CQ: pb.BATCH_CQ, QueueType.SIMPLE_CQ: pb.SIMPLE_CQ}
_FROM_PB_QUEUE_TYPE = {v: k for k, v in _QUEUE_TYPES.items()}


def topic_from_pb(topic: pb.Topic) -> TopicInfo:
    return TopicInfo(topic.name, topic.queue_count, _FROM_PB_QUEUE_TYPE[topic.queue_type])


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
        self._transport = Transport(endpoint, transport)
        self._admin = self._transport.admin

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType | str = QueueType.BATCH_CQ) -> TopicInfo:
        """Create a topic (or return it, when it exists with the same settings)."""
        if not isinstance(queue_count, int) or queue_count < 1:
            raise ConfigError(f"queue_count={queue_count!r}: a topic needs at least one queue")
        request = pb.CreateTopicRequest(topic=pb.Topic(name=name, queue_count=queue_count,
                                                       queue_type=_QUEUE_TYPES[QueueType.parse(queue_type)]))
        return topic_from_pb(self._call(self._admin.CreateTopic, request).topic)

    def delete_topic(self, name: str) -> bool:
        return self._call(self._admin.DeleteTopic, pb.DeleteTopicRequest(name=name)).deleted

    def list_topics(self) -> list[TopicInfo]:
        return [topic_from_pb(t) for t in self._call(self._admin.ListTopics, pb.ListTopicsRequest()).topics]

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        """The topic and its queues' min / max offsets."""
        response = self._call(self._admin.DescribeTopic, pb.DescribeTopicRequest(name=name))
        return topic_from_pb(response.topic), [
            QueueOffsets(name, q.queue_id, q.min_offset, q.max_offset) for q in response.queues]

    def offsets(self, topics: list[str]) -> dict[str, list[QueueOffsets]]:
        """Min / max offsets of every queue of many topics (of every topic when ``topics`` is
        empty), in as few calls as the broker's answers allow (it pages them)."""
        out = {}
        request = pb.GetOffsetsRequest(topics=list(topics))
        while True:  # ends: every page but the last holds a topic, and its token is past it
            response = self._call(self._admin.GetOffsets, request)
            out.update({t.topic: [QueueOffsets(t.topic, q.queue_id, q.min_offset, q.max_offset) for q in t.queues]
                        for t in response.topics})
            if not response.next_page_token or not response.topics:
                return out
            request.page_token = response.next_page_token

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids=None) -> dict[int, int]:
        """Per queue, the first offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        request = pb.OffsetForTimestampRequest(topic=topic, timestamp_ms=int(timestamp_ms),
                                               queue_ids=list(queue_ids or []))
        return {o.queue_id: o.offset for o in self._call(self._admin.OffsetForTimestamp, request).offsets}

    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit a consumer group's next offsets, ``{(topic, queue_id): offset}``."""
        request = pb.CommitOffsetsRequest(group=group, offsets=[
            pb.GroupOffset(topic=topic, queue_id=queue_id, offset=offset)
            for (topic, queue_id), offset in offsets.items()])
        self._call(self._admin.CommitOffsets, request)

    def group_offsets(self, group: str, topics=None) -> list[GroupOffset]:
        response = self._call(self._admin.QueryOffsets, pb.QueryOffsetsRequest(group=group, topics=list(topics or [])))
        return [GroupOffset(group, o.topic, o.queue_id, o.offset) for o in response.offsets]

    def broker_stats(self) -> BrokerStats:
        r = self._call(self._admin.BrokerStats, pb.BrokerStatsRequest())
        return BrokerStats(r.topics, r.queues, r.commitlog_min_offset, r.commitlog_max_offset,
                           r.commitlog_flushed_offset, r.dispatched_offset, r.dispatch_lag_bytes, r.messages_put,
                           r.messages_read, r.resident_memory_bytes, r.data_dir, r.flush_mode,
                           r.dispatch_lag_ms, r.corrupted_records, tuple(
                               CorruptedRecord(c.commitlog_offset, c.size, c.topic, c.queue_id, c.first_offset,
                                               c.end_offset, c.reason, c.found_by) for c in r.corrupted),
                           r.disk_failure)

    def _call(self, method, request):
        return self._transport.call(method, request)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
