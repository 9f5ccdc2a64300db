"""The clients the broker knows from their heartbeats (RocketMQ's ProducerManager,
ConsumerManager and RebalanceLockManager): producer and consumer groups by connection, each
consumer group's subscriptions and how it consumes (its ConsumerConnection, what mqadmin
consumerConnection shows), and orderly consumers' queue locks."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from broker_sim.doors.remoting import bodies

LOCK_EXPIRY_MS = 60_000  # RebalanceLockManager's REBALANCE_LOCK_MAX_LIVE_TIME


@dataclass
class _Client:
    client_id: str
    connection: object
    producer_groups: set = field(default_factory=set)
    consumer_groups: set = field(default_factory=set)
    language: str = "JAVA"  # its requests' (LanguageCode), and RocketMQ's version number
    version: int = 0


class ClientRegistry:
    """``consumers``: the core's LiveConsumers, told of the consumers that come and go here."""

    def __init__(self, clock_ms=lambda: time.monotonic() * 1000):
        self._clock_ms = clock_ms
        self.consumers = None  # set when the door serves a core
        self._lock = threading.Lock()
        self._clients: dict[int, _Client] = {}  # by id(connection)
        self._subscriptions: dict[str, dict[str, str]] = {}  # group -> topic -> expression
        # group -> its last heartbeat's consumeType, messageModel, consumeFromWhere and
        # subscriptionTable (topic -> SubscriptionData as the client sent it)
        self._consuming: dict[str, dict] = {}
        self._locks: dict[tuple[str, str, str, int], tuple[str, float]] = {}  # (group, topic, broker, queue)

    def heartbeat(self, connection, data: dict, language: str = "JAVA", version: int = 0) -> list[str]:
        """Record a HeartbeatData (sent in a request of ``language`` and ``version``); the
        clustering consumer groups in it (their retry topics are due). Raises BrokerFault for a
        field of the wrong type, recording nothing."""
        client_id = bodies.text(data, "clientID", "HeartbeatData")
        producers = [bodies.text(p, "groupName", "producer data") for p in bodies.objects(data, "producerDataSet",
                                                                                           "HeartbeatData")]
        consumers = [(bodies.text(c, "groupName", "consumer data"),
                      [(bodies.text(s, "topic", "subscription data"), bodies.text(s, "subString", "subscription data"),
                        s) for s in bodies.objects(c, "subscriptionDataSet", "consumer data")],
                      c.get("messageModel", "CLUSTERING"), c)  # Java's a name, the C++ client's a number
                     for c in bodies.objects(data, "consumerDataSet", "HeartbeatData")]
        clustering = []
        with self._lock:
            client = self._clients.setdefault(id(connection), _Client(client_id, connection))
            client.language, client.version = language, version
            client.producer_groups.update(producers)
            for group, subscribed, model, consumer in consumers:
                client.consumer_groups.add(group)
                subscriptions = self._subscriptions.setdefault(group, {})
                for topic, expression, _data in subscribed:
                    subscriptions[topic] = expression or "*"
                self._consuming[group] = {
                    "consumeType": consumer.get("consumeType"), "messageModel": model,
                    "consumeFromWhere": consumer.get("consumeFromWhere"),
                    "subscriptionTable": {topic: subscription for topic, _expression, subscription in subscribed}}
                if model == "CLUSTERING":
                    clustering.append(group)
        for group, _subscribed, _model, _consumer in consumers:
            if self.consumers is not None:
                self.consumers.seen(group, client_id)
        return clustering

    def unregister(self, connection, client_id: str, producer_group: str | None, consumer_group: str | None) -> None:
        with self._lock:
            client = self._clients.get(id(connection))
            if client is None:
                return
            client.producer_groups.discard(producer_group)
            client.consumer_groups.discard(consumer_group)
        self._gone(client.client_id, [consumer_group])

    def forget(self, connection) -> None:
        """A connection closed: its client is gone."""
        with self._lock:
            client = self._clients.pop(id(connection), None)
        if client is not None:
            self._gone(client.client_id, client.consumer_groups)

    def _gone(self, client_id: str, groups) -> None:
        if self.consumers is not None:
            for group in groups:
                if group:
                    self.consumers.gone(group, client_id)

    def consumer_connection(self, group: str) -> dict | None:
        """RocketMQ's ConsumerConnection of ``group``: its connected consumers (clientId,
        clientAddr, language, version) and, from their last heartbeat, its subscriptions and how
        it consumes; None when none of its consumers is connected."""
        with self._lock:
            clients = [c for c in self._clients.values() if group in c.consumer_groups]
            if not clients:
                return None
            consuming = self._consuming.get(group, {})
            connections = [{"clientId": c.client_id, "clientAddr": getattr(c.connection, "remote", ""),
                            "language": c.language, "version": c.version}
                           for c in sorted(clients, key=lambda c: c.client_id)]
            return {"connectionSet": connections, "subscriptionTable": consuming.get("subscriptionTable", {}),
                    "consumeType": consuming.get("consumeType"), "messageModel": consuming.get("messageModel"),
                    "consumeFromWhere": consuming.get("consumeFromWhere")}

    def consumer_ids(self, group: str) -> list[str]:
        with self._lock:
            return sorted({c.client_id for c in self._clients.values() if group in c.consumer_groups})

    def subscription(self, group: str, topic: str) -> str | None:
        with self._lock:
            return self._subscriptions.get(group, {}).get(topic)

    def producer_connection(self, group: str):
        """A live connection of a client of producer ``group``, or None."""
        with self._lock:
            for client in self._clients.values():
                if group in client.producer_groups:
                    return client.connection
        return None

    # --- orderly consumers' queue locks ----------------------------------------------------

    def lock(self, group: str, client_id: str, queues: list[dict]) -> list[dict]:
        """Lock each queue for ``client_id`` unless another live client holds it; those it holds now."""
        now = self._clock_ms()
        held = []
        with self._lock:
            for queue in queues:
                key = _lock_key(group, queue)
                owner = self._locks.get(key)
                if owner is None or owner[0] == client_id or now - owner[1] > LOCK_EXPIRY_MS:
                    self._locks[key] = (client_id, now)
                    held.append(queue)
        return held

    def unlock(self, group: str, client_id: str, queues: list[dict]) -> None:
        with self._lock:
            for queue in queues:
                key = _lock_key(group, queue)
                if self._locks.get(key, ("",))[0] == client_id:
                    del self._locks[key]


def queues_of(body: dict, what: str) -> list[dict]:
    """The message queues of a Lock/UnlockBatchRequestBody's mqSet, their fields checked."""
    queues = bodies.objects(body, "mqSet", what)
    for queue in queues:
        bodies.text(queue, "topic", "message queue")
        bodies.text(queue, "brokerName", "message queue")
        bodies.integer(queue, "queueId", "message queue", -1)
    return queues


def _lock_key(group: str, queue: dict) -> tuple:
    return group, queue.get("topic") or "", queue.get("brokerName") or "", queue.get("queueId", -1)
