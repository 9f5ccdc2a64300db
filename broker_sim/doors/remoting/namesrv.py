"""The name server: which broker serves which topic's queues (RocketMQ's RouteInfoManager).

This door's own broker is always in the table, its topics read live from the core; other
brokers register (REGISTER_BROKER) with their topics and keep registering: one that has not
for its heartbeat timeout (RocketMQ's default 120 s) drops out of every answer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import orjson

from broker_sim.doors.remoting.fields import Fields
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode

PERM_READ_WRITE = 6  # PermName.PERM_READ | PERM_WRITE
DEFAULT_BROKER_TIMEOUT_MS = 120_000  # RouteInfoManager's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME


def queue_data(broker_name: str, queue_count: int, perm: int = PERM_READ_WRITE) -> dict:
    """RocketMQ's QueueData of a topic on one broker."""
    return {"brokerName": broker_name, "readQueueNums": queue_count, "writeQueueNums": queue_count, "perm": perm,
            "topicSysFlag": 0}


@dataclass
class BrokerEntry:
    """A broker as the name server knows it: its topics ({name: QueueData}) as last registered."""

    cluster: str
    name: str
    address: str
    broker_id: int = 0
    topics: dict = field(default_factory=dict)
    timeout_ms: int = DEFAULT_BROKER_TIMEOUT_MS
    last_update_ms: float = 0.0

    def queue_data(self, topic: str) -> dict | None:
        return self.topics.get(topic)

    def topic_names(self):
        return self.topics.keys()

    def broker_data(self) -> dict:
        return {"cluster": self.cluster, "brokerName": self.name, "brokerAddrs": {str(self.broker_id): self.address},
                "enableActingMaster": False}


class LocalBroker(BrokerEntry):
    """This door's broker: its topics come from the core at each question, never stale."""

    def __init__(self, cluster: str, name: str, address: str, topics: Callable[[], list], find_topic: Callable):
        super().__init__(cluster, name, address)
        self._topics, self._find = topics, find_topic

    def queue_data(self, topic: str) -> dict | None:
        config = self._find(topic)
        return None if config is None else queue_data(self.name, config.queue_count, config.perm)

    def topic_names(self):
        return [t.name for t in self._topics()]

    def registered_topics(self) -> dict:
        """{name: TopicConfig as RocketMQ's JSON}, what this broker registers with name servers."""
        return {t.name: {"topicName": t.name, "readQueueNums": t.queue_count, "writeQueueNums": t.queue_count,
                         "perm": t.perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
                         "attributes": {}} for t in self._topics()}


class RouteTable:
    """The brokers this name server knows, by (cluster, broker name); ``clock_ms`` for tests."""

    def __init__(self, local: LocalBroker, clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000):
        self.local = local
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._remote: dict[tuple[str, str], BrokerEntry] = {}

    def register(self, entry: BrokerEntry) -> None:
        entry.last_update_ms = self._clock_ms()
        with self._lock:
            self._remote[(entry.cluster, entry.name)] = entry

    def unregister(self, cluster: str, name: str) -> bool:
        with self._lock:
            return self._remote.pop((cluster, name), None) is not None

    def brokers(self) -> list[BrokerEntry]:
        """The live brokers: this one, and those registered within their timeout."""
        now = self._clock_ms()
        with self._lock:
            for key, entry in list(self._remote.items()):
                if now - entry.last_update_ms > entry.timeout_ms:
                    del self._remote[key]
            remote = [e for e in self._remote.values() if (e.cluster, e.name) != (self.local.cluster, self.local.name)]
        return [self.local, *remote]

    def route(self, topic: str) -> dict | None:
        """RocketMQ's TopicRouteData of ``topic``, None when no live broker has it."""
        queues, brokers = [], []
        for entry in self.brokers():
            data = entry.queue_data(topic)
            if data is not None:
                queues.append(data)
                brokers.append(entry.broker_data())
        if not queues:
            return None
        return {"orderTopicConf": None, "queueDatas": queues, "brokerDatas": brokers, "filterServerTable": {}}

    def cluster_info(self) -> dict:
        """RocketMQ's ClusterInfo: broker addresses by name, broker names by cluster."""
        brokers, clusters = {}, {}
        for entry in self.brokers():
            brokers[entry.name] = entry.broker_data()
            clusters.setdefault(entry.cluster, []).append(entry.name)
        return {"brokerAddrTable": brokers, "clusterAddrTable": clusters}

    def topic_names(self, cluster: str | None = None) -> list[str]:
        names = set()
        for entry in self.brokers():
            if cluster is None or entry.cluster == cluster:
                names.update(entry.topic_names())
        return sorted(names)


class NameServer:
    """The name server's requests over a RouteTable."""

    def __init__(self, table: RouteTable):
        self.table = table

    def handlers(self) -> dict:
        return {RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route, RequestCode.REGISTER_BROKER: self.register_broker,
                RequestCode.UNREGISTER_BROKER: self.unregister_broker,
                RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
                RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
                RequestCode.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
                RequestCode.GET_KV_CONFIG: self.kv_config, RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
                RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic}

    def route(self, request: RemotingCommand, _connection) -> RemotingCommand:
        topic = Fields(request).text("topic")
        route = self.table.route(topic)
        if route is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No topic route info in name server for the topic: {topic}; create it on a broker "
                                    "first (rmq-admin topic create, or mqadmin updateTopic)")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(route))

    def register_broker(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        entry = BrokerEntry(fields.text("clusterName"), fields.text("brokerName"), fields.text("brokerAddr"),
                            fields.integer("brokerId"),
                            timeout_ms=fields.integer("heartbeatTimeoutMillis", DEFAULT_BROKER_TIMEOUT_MS))
        if fields.flag("compressed"):
            return request.response(ResponseCode.SYSTEM_ERROR, "compressed broker registrations are not supported by "
                                    "broker_sim's name server: register with compressed=false")
        if request.body:
            try:
                body = orjson.loads(request.body)
                table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
                entry.topics = {name: queue_data(entry.name, int(c["writeQueueNums"]), int(c.get("perm", 6)))
                                for name, c in table.items()}
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as bad:
                return request.response(ResponseCode.SYSTEM_ERROR, f"the broker registration's body is not a "
                                        f"RegisterBrokerBody with a topicConfigTable: {bad}")
        self.table.register(entry)
        return request.response(ResponseCode.SUCCESS, ext_fields={"haServerAddr": "", "masterAddr": ""})

    def unregister_broker(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        self.table.unregister(fields.text("clusterName"), fields.text("brokerName"))
        return request.response(ResponseCode.SUCCESS)

    def cluster_info(self, request: RemotingCommand, _connection) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.table.cluster_info()))

    def topic_list(self, request: RemotingCommand, _connection) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": self.table.topic_names()}))

    def topics_by_cluster(self, request: RemotingCommand, _connection) -> RemotingCommand:
        cluster = Fields(request).text("cluster")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": self.table.topic_names(cluster)}))

    def kv_config(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: "
                                f"{fields.text('namespace', '')} Key: {fields.text('key', '')}")

    def delete_kv_config(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """This name server keeps no KV config: nothing to delete, SUCCESS as RocketMQ's answers
        (mqadmin's deleteTopic of a cluster, and deleteSubGroup -c, delete a topic's ORDER_TOPIC_CONFIG)."""
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """Topics live on brokers here: deleting one on a broker drops it from the routes."""
        return request.response(ResponseCode.SUCCESS)
