"""Offsets of the source: the checkpointed form, the broker's view of the subscribed queues,
and starting / ending offsets resolved from the options.

A position is a queue's next offset, as RocketMQ's consumer offsets. Spark checkpoints them
as ``{"topic": {"queueId": next_offset}}``; topics and queues are always written in sorted
order, so that equal positions give equal JSON (Spark compares offsets as JSON text).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import Admin, ConfigError, QueueOffsets, TopicNotFoundError
from .options import EARLIEST, LATEST, SourceOptions, Subscription


def to_json(positions: dict) -> dict:
    """{(topic, queue_id): offset} -> {"topic": {"queueId": offset}}, sorted."""
    out: dict = {}
    for (topic, queue_id), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(queue_id)] = int(offset)
    return out


def from_json(offsets: dict | None) -> dict:
    """{"topic": {"queueId": offset}} -> {(topic, queue_id): offset}."""
    return {(topic, int(queue_id)): int(offset) for topic, queues in (offsets or {}).items()
            for queue_id, offset in queues.items()}


@dataclass(frozen=True)
class Snapshot:
    """The subscribed queues' min / max offsets at one moment: {(topic, queue_id): QueueOffsets},
    and the named topics that the broker does not have (``missing``)."""

    queues: dict
    missing: tuple = ()

    def max_positions(self) -> dict:
        return {key: q.max_offset for key, q in self.queues.items()}

    def min_positions(self) -> dict:
        return {key: q.min_offset for key, q in self.queues.items()}

    def topics(self) -> set:
        return {topic for topic, _ in self.queues}

    def require_topics(self) -> None:
        """A query starts only on topics that exist."""
        if self.missing:
            topic = self.missing[0]
            raise TopicNotFoundError(f"topic {topic!r} does not exist on the broker; create it "
                                     f"(rmq-admin topic create {topic} --queues N) or fix the subscription")


def snapshot(admin: Admin, subscription: Subscription) -> Snapshot:
    """The subscribed queues as the broker has them now (two calls at most: topics for a
    pattern, then every queue's offsets in one GetOffsets; a call per topic only when a named
    topic is missing).

    Raises ConfigError for an assigned queue that the topic does not have.
    """
    if subscription.pattern is not None:
        topics = sorted(t.name for t in admin.list_topics() if subscription.matches(t.name))
    else:
        topics = sorted(subscription.assign or subscription.topics)
    found = _offsets(admin, topics)
    queues = {}
    for topic in topics:
        if topic not in found:
            continue
        wanted = subscription.assign.get(topic) if subscription.assign else None
        have = {q.queue_id: q for q in found[topic]}
        if wanted is not None and not set(wanted) <= set(have):
            raise ConfigError(f"option assign names queues {sorted(set(wanted) - set(have))} of topic {topic!r}, "
                              f"which has {len(have)} queues (0 to {len(have) - 1})")
        for queue_id in (wanted if wanted is not None else sorted(have)):
            queues[(topic, queue_id)] = have[queue_id]
    missing = () if subscription.pattern is not None else tuple(t for t in topics if t not in found)
    return Snapshot(queues, missing)


def _offsets(admin: Admin, topics: list) -> dict:
    """{topic: [QueueOffsets]} of the topics that exist (a deleted one is left out)."""
    if not topics:
        return {}
    try:
        return admin.offsets(topics)
    except TopicNotFoundError:
        found = {}
        for topic in topics:
            try:
                found.update(admin.offsets([topic]))
            except TopicNotFoundError:
                pass
        return found


def resolve(admin: Admin, view: Snapshot, offsets, timestamp_ms: int | None, default: str, option: str) -> dict:
    """Concrete positions of every queue of ``view`` from an offsets option (or a timestamp,
    which wins, as in Spark's Kafka source).

    ``offsets``: "earliest" | "latest" | {topic: {queue_id: offset, -2, -1}} | None (``default``).
    A JSON that leaves out a queue of a subscribed topic is refused: the caller names them all.
    """
    if timestamp_ms is not None:
        positions = {}
        for topic in sorted(view.topics()):
            queue_ids = [q for t, q in view.queues if t == topic]
            found = admin.offsets_for_timestamp(topic, timestamp_ms, queue_ids)
            positions.update({(topic, q): found[q] for q in queue_ids})
        return positions
    offsets = offsets if offsets is not None else default
    if offsets == "earliest":
        return view.min_positions()
    if offsets == "latest":
        return view.max_positions()
    missing = sorted(key for key in view.queues if key[1] not in offsets.get(key[0], {}))
    if missing and any(topic in offsets for topic, _ in missing):
        topic, queue_id = next(key for key in missing if key[0] in offsets)
        raise ConfigError(f"option {option} names some queues of topic {topic!r} but not queue {queue_id}: name "
                          "every queue of a topic (-2 for earliest, -1 for latest)")
    unknown = sorted((t, q) for t, queues in offsets.items() for q in queues if (t, q) not in view.queues)
    if unknown:
        raise ConfigError(f"option {option} names queue {unknown[0][1]} of topic {unknown[0][0]!r}, which the "
                          "broker does not have")
    positions = {}
    for key, queue in view.queues.items():
        given = offsets.get(key[0], {}).get(key[1], EARLIEST if option == "startingOffsets" else LATEST)
        positions[key] = _concrete(given, queue)
    return positions


def _concrete(offset: int, queue: QueueOffsets) -> int:
    if offset == EARLIEST:
        return queue.min_offset
    if offset == LATEST:
        return queue.max_offset
    return offset


def starting_positions(admin: Admin, options: SourceOptions, view: Snapshot, default: str) -> dict:
    return resolve(admin, view, options.starting_offsets, options.starting_timestamp_ms, default, "startingOffsets")


def ending_positions(admin: Admin, options: SourceOptions, view: Snapshot) -> dict:
    return resolve(admin, view, options.ending_offsets, options.ending_timestamp_ms, "latest", "endingOffsets")
