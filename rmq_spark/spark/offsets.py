"""Offsets of the source: the checkpointed form, the broker's view of the subscribed queues,
and starting / ending offsets resolved from the options.

A queue is (topic, broker, queue id): the broker "" through our door (one broker); through
name servers a topic may be served by several brokers, each with its own queue 0. A position
is a queue's next offset, as RocketMQ's consumer offsets. Spark checkpoints them as
``{"topic": {"queueId": next_offset}}``, a queue of a named broker as ``"broker:queueId"``;
topics and queues are always written in sorted order, so that equal positions give equal JSON
(Spark compares offsets as JSON text). A queue named without its broker (a checkpoint written
through our door, or before brokers were named) is the queue of the topic's only broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rmq_spark import Admin, ConfigError, QueueOffsets, TopicNotFoundError
from rmq_spark.spark.options import EARLIEST, LATEST, SourceOptions, Subscription, parse_queue, queue_text


def to_json(positions: dict) -> dict:
    """{(topic, broker, queue_id): offset} -> {"topic": {"queueId" or "broker:queueId": offset}}, sorted."""
    out: dict = {}
    for (topic, broker, queue_id), offset in sorted(positions.items()):
        out.setdefault(topic, {})[queue_text(broker, queue_id)] = int(offset)
    return out


def from_json(offsets: dict | None, known=None) -> dict:
    """{"topic": {"queueId" or "broker:queueId": offset}} -> {(topic, broker, queue_id): offset};
    with ``known`` (the queues there are), queues named without their broker are aligned."""
    positions = {}
    for topic, queues in (offsets or {}).items():
        for text, offset in queues.items():
            broker, queue_id = parse_queue(text)
            positions[(topic, broker, queue_id)] = int(offset)
    return positions if known is None else align(positions, known)


def align(positions: dict, known) -> dict:
    """``positions`` with each queue named without its broker given the broker of its topic
    in ``known`` (keys (topic, broker, queue id)); ConfigError when the topic has several."""
    brokers: dict = {}
    for topic, broker, _queue_id in known:
        brokers.setdefault(topic, set()).add(broker)
    out = {}
    for (topic, broker, queue_id), value in positions.items():
        served = brokers.get(topic, set())
        if not broker and "" not in served and served:
            if len(served) > 1:
                raise ConfigError(f"queue {queue_id} of topic {topic!r} is named without its broker, and the topic is "
                                  f"served by brokers {', '.join(sorted(served))}, each with its own queue "
                                  f"{queue_id}: name it as \"broker:{queue_id}\"")
            broker = next(iter(served))
        out[(topic, broker, queue_id)] = value
    return out


@dataclass(frozen=True)
class Snapshot:
    """The subscribed queues' min / max offsets at one moment: {(topic, broker, queue_id):
    QueueOffsets}, and the named topics that the broker does not have (``missing``)."""

    queues: dict
    missing: tuple = ()
    unreachable: frozenset = frozenset()  # brokers whose queues could not be asked now (they are left out)

    def max_positions(self) -> dict:
        return {key: q.max_offset for key, q in self.queues.items()}

    def min_positions(self) -> dict:
        return {key: q.min_offset for key, q in self.queues.items()}

    def topics(self) -> set:
        return {topic for topic, _broker, _queue_id in self.queues}

    def require_topics(self, where: str = "the broker") -> None:
        """A query starts only on topics that exist."""
        if self.missing:
            topic = self.missing[0]
            raise TopicNotFoundError(f"topic {topic!r} does not exist on {where}; create it "
                                     f"(rmq-admin topic create {topic} --queues N, or mqadmin updateTopic) or fix "
                                     "the subscription")


def snapshot(admin: Admin, subscription: Subscription, past: dict | None = None, wait_ms: int = 0) -> Snapshot:
    """The subscribed queues as the broker has them now (two calls at most: topics for a
    pattern, then every queue's offsets in one GetOffsets; a call per topic only when a named
    topic is missing). With ``past`` (positions) and ``wait_ms``, the offsets wait at the broker
    until a queue of ``past`` ends past its position, at most ``wait_ms`` (a long poll).

    Raises ConfigError for an assigned queue that the topic does not have.
    """
    if subscription.pattern is not None:
        topics = sorted(t.name for t in admin.list_topics() if subscription.matches(t.name))  # no system topics
    else:
        topics = sorted(subscription.assign or subscription.topics)
    unreachable: set = set()
    found = _offsets(admin, topics, unreachable, past, wait_ms)
    queues = {}
    for topic in topics:
        if topic not in found:
            continue
        have = {(q.topic, q.broker, q.queue_id): q for q in found[topic]}
        wanted = subscription.assign.get(topic) if subscription.assign else None
        if wanted is not None:
            keys = list(align({(topic, broker, queue_id): None for broker, queue_id in wanted}, have))
            absent = [queue_text(b, q) for _t, b, q in keys if (topic, b, q) not in have]
            if absent:
                raise ConfigError(f"option assign names queues {absent} of topic {topic!r}, which has "
                                  f"{', '.join(queue_text(b, q) for _t, b, q in sorted(have))}")
        else:
            keys = sorted(have)
        for key in keys:
            queues[key] = have[key]
    missing = () if subscription.pattern is not None else tuple(t for t in topics if t not in found)
    return Snapshot(queues, missing, frozenset(unreachable))


def _offsets(admin: Admin, topics: list, unreachable: set, past: dict | None = None, wait_ms: int = 0) -> dict:
    """{topic: [QueueOffsets]} of the topics that exist (a deleted one is left out); a broker
    that cannot be reached (through name servers) goes to ``unreachable``, its queues left out."""
    if not topics:
        return {}
    try:
        return admin.offsets(topics, unreachable=unreachable, past=past, wait_ms=wait_ms)
    except TopicNotFoundError:
        found = {}
        for topic in topics:
            try:
                found.update(admin.offsets([topic], unreachable=unreachable))
            except TopicNotFoundError:
                pass
        return found


def resolve(admin: Admin, view: Snapshot, offsets, timestamp_ms: int | None, default: str, option: str) -> dict:
    """Concrete positions of every queue of ``view`` from an offsets option (or a timestamp,
    which wins, as in Spark's Kafka source).

    ``offsets``: "earliest" | "latest" | {topic: {(broker, queue_id): offset, -2, -1}} | None
    (``default``). A JSON that leaves out a queue of a subscribed topic is refused: the caller
    names them all.
    """
    if timestamp_ms is not None:  # an empty queue's answer is its end: only the others are asked
        positions = {key: queue.max_offset for key, queue in view.queues.items()}
        for topic, broker in sorted({(t, b) for (t, b, _q), queue in view.queues.items() if queue.messages}):
            queue_ids = [q for (t, b, q), queue in view.queues.items() if (t, b) == (topic, broker) and queue.messages]
            found = admin.offsets_for_timestamp(topic, timestamp_ms, queue_ids, broker)
            positions.update({(topic, broker, q): found[q] for q in queue_ids})
        return positions
    offsets = offsets if offsets is not None else default
    if offsets == "earliest":
        return view.min_positions()
    if offsets == "latest":
        return view.max_positions()
    given = align({(topic, broker, queue_id): offset for topic, queues in offsets.items()
                   for (broker, queue_id), offset in queues.items()}, view.queues)
    named_topics = {topic for topic, _b, _q in given}
    missing = sorted(key for key in view.queues if key[0] in named_topics and key not in given)
    if missing:
        topic, broker, queue_id = missing[0]
        raise ConfigError(f"option {option} names some queues of topic {topic!r} but not queue "
                          f"{queue_text(broker, queue_id)}: name every queue of a topic (-2 for earliest, -1 for "
                          "latest)")
    unknown = sorted(key for key in given if key not in view.queues)
    if unknown:
        topic, broker, queue_id = unknown[0]
        raise ConfigError(f"option {option} names queue {queue_text(broker, queue_id)} of topic {topic!r}, which the "
                          "broker does not have")
    positions = {}
    for key, queue in view.queues.items():
        positions[key] = _concrete(given.get(key, EARLIEST if option == "startingOffsets" else LATEST), queue)
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


def offsets_behind_latest(progress) -> dict | None:
    """How far a streaming query is behind the broker after a micro-batch, in the Kafka
    connector's names: ``{"minOffsetsBehindLatest": int, "avgOffsetsBehindLatest": float,
    "maxOffsetsBehindLatest": int}`` over the queues, each queue's latest offset less the
    micro-batch's end offset.

    ``progress`` is a query's progress (``query.lastProgress``, an entry of
    ``query.recentProgress`` or a listener's ``event.progress``), or one of its ``sources``. Spark
    lets a Python source report its latest offsets (``reportLatestOffset``: each source's
    ``latestOffset`` in the progress) but not metrics of its own (Spark's ``ReportsSourceMetrics``
    is not open to Python sources, so these numbers cannot sit in the source's ``metrics`` as
    the Kafka connector's do): this computes them from the two offsets. Every source whose
    offsets name topics and queues counts. None when no source has both offsets yet."""
    sources = _field(progress, "sources")
    behind = []
    for source in (sources if sources is not None else [progress]):
        end, latest = _offsets_of(_field(source, "endOffset")), _offsets_of(_field(source, "latestOffset"))
        if end is None or latest is None:
            continue
        for key, newest in latest.items():
            behind.append(max(0, newest - end.get(key, 0)))
    if not behind:
        return None
    return {"minOffsetsBehindLatest": min(behind), "avgOffsetsBehindLatest": sum(behind) / len(behind),
            "maxOffsetsBehindLatest": max(behind)}


def _field(item, name: str):
    """A field of a progress: a dict's key or a StreamingQueryProgress / SourceProgress attribute."""
    if isinstance(item, dict):
        return item.get(name)
    return getattr(item, name, None)


def _offsets_of(value) -> dict | None:
    """A source offset of a progress (JSON text or parsed) as positions, None when it is not
    {"topic": {"queue": offset}}."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not all(isinstance(q, dict) for q in value.values()):
        return None
    try:
        return from_json(value)
    except (ValueError, TypeError):
        return None
