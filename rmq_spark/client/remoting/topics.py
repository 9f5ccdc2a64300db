"""Topics through the brokers and name servers: creating one on every master
(UPDATE_AND_CREATE_TOPIC, a BatchCQ topic with RocketMQ's ``queue.type`` attribute), deleting
it (from the brokers, then the name servers), listing the topics an account may use, and a
topic's queue type (GET_TOPIC_CONFIG)."""

from __future__ import annotations

import time

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers, TopicRoute
from rmq_spark.client.remoting.versions import BATCH_CQ
from rmq_spark.errors import (
    BrokerUnavailableError,
    RequestTimeoutError,
    RmqError,
    TopicConflictError,
    TopicNotFoundError,
)
from rmq_spark.structs import QueueType, TopicInfo, is_system_topic
from rmq_wire.record import AUTO_CREATE_TOPIC
from rmq_wire.remoting import RequestCode, ResponseCode, fastjson

QUEUE_TYPE_ATTRIBUTE = "queue.type"


class Topics:
    def __init__(self, calls: Calls, names: NameServers):
        self.calls = calls
        self.names = names

    def create(self, name: str, queue_count: int, queue_type: QueueType) -> TopicInfo:
        """``queue_count`` queues of ``queue_type`` on every master; the topic as it is when it
        exists so already, TopicConflictError when it exists otherwise."""
        if queue_type is QueueType.BATCH_CQ:  # RocketMQ 4 would make a SimpleCQ topic of it, silently
            for broker, address in self.names.masters().items():
                self.calls.require(BATCH_CQ, broker, address)
        existing = self._existing(name)
        if existing is not None:
            if all(count == queue_count for _broker, count in existing.brokers) and existing.queue_type is queue_type:
                return existing
            raise TopicConflictError(f"topic {name!r} exists with {existing.queue_type.value} queues "
                                     f"{dict(existing.brokers)} per broker; asked for {queue_count} "
                                     f"{queue_type.value} queues per broker: delete it first, or use it as it is")
        masters = self.names.masters()
        if not masters:
            raise BrokerUnavailableError(f"the name servers {';'.join(self.names.addresses)} know no broker with a "
                                         "master")
        fields = {"topic": name, "defaultTopic": AUTO_CREATE_TOPIC, "readQueueNums": queue_count,
                  "writeQueueNums": queue_count, "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                  "order": "false"}
        if queue_type is QueueType.BATCH_CQ:
            fields["attributes"] = f"+{QUEUE_TYPE_ATTRIBUTE}=BatchCQ"
        for broker, address in masters.items():
            answer = self.calls.invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} ({address}) refused to create topic {name!r}")
        timeout_ms = self.calls.config.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        while True:  # the brokers register the topic with the name servers
            try:
                route = self.names.route(name, refresh=True, last_known=False)
                if {b.broker for b in route.brokers} >= set(masters):
                    break
            except TopicNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"topic {name!r} was created on {', '.join(masters)} but the name servers "
                                          f"do not route it after {timeout_ms} ms")
            self.calls.sleep(0.1)
        return TopicInfo(name, queue_count * len(masters), queue_type,
                         tuple((broker, queue_count) for broker in sorted(masters)))

    def _existing(self, name: str) -> TopicInfo | None:
        try:
            route = self.names.route(name, refresh=True, last_known=False)
        except TopicNotFoundError:
            return None
        return self.info(route)

    def info(self, route: TopicRoute) -> TopicInfo:
        """The topic as its route and its first broker's config say (the queue type)."""
        config = self._config(route.brokers[0].address, route.topic) or {}
        brokers = tuple((b.broker, b.read_queues) for b in route.brokers)
        return TopicInfo(route.topic, sum(count for _b, count in brokers), _queue_type(config), brokers,
                         int(config.get("perm", route.brokers[0].perm)))

    def _config(self, address: str, topic: str) -> dict | None:
        """The broker's TopicConfig of ``topic``; None where it answers none."""
        answer = self.calls.invoke(address, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
        if answer.code != ResponseCode.SUCCESS:
            return None
        config = fastjson.loads(answer.body)
        return config.get("topicConfig", config)

    def update(self, name: str, queue_count: int = 0, perm: int = 0) -> TopicInfo:
        """Change a topic that exists on each of its brokers, as mqadmin updateTopic does
        (UPDATE_AND_CREATE_TOPIC with the topic's config changed; 0: that setting as it is), and
        wait for the name servers to route it so."""
        route = self.names.route(name, refresh=True, last_known=False)
        wanted = {}
        for entry in route.brokers:
            config = self._config(entry.address, name) or {}
            fields = {"topic": name, "defaultTopic": AUTO_CREATE_TOPIC,
                      "readQueueNums": queue_count or int(config.get("readQueueNums", entry.read_queues)),
                      "writeQueueNums": queue_count or int(config.get("writeQueueNums", entry.write_queues)),
                      "perm": perm or int(config.get("perm", entry.perm)),
                      "topicFilterType": config.get("topicFilterType", "SINGLE_TAG"),
                      "topicSysFlag": int(config.get("topicSysFlag", 0)), "order": str(bool(config.get("order")))
                      .lower()}
            answer = self.calls.invoke(entry.address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {entry.broker} ({entry.address}) refused to update topic {name!r}")
            wanted[entry.broker] = (fields["readQueueNums"], fields["writeQueueNums"], fields["perm"])
        timeout_ms = self.calls.config.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        while True:  # the brokers register the change with the name servers
            route = self.names.route(name, refresh=True, last_known=False)
            if {b.broker: (b.read_queues, b.write_queues, b.perm) for b in route.brokers} == wanted:
                return self.info(route)
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"topic {name!r} was updated on {', '.join(wanted)} but the name servers "
                                          f"do not route it so after {timeout_ms} ms")
            self.calls.sleep(0.1)

    def new(self, name: str) -> TopicInfo | None:
        """The topic a first send to ``name`` makes where the brokers create topics so; None where
        they do not."""
        try:
            route = self.names.send_route(name)
        except TopicNotFoundError:
            return None
        stand_in = self.info(self.names.route(AUTO_CREATE_TOPIC))
        brokers = tuple((entry.broker, entry.write_queues) for entry in route.brokers)
        return TopicInfo(name, sum(count for _b, count in brokers), stand_in.queue_type, brokers)

    def delete(self, name: str) -> bool:
        try:
            route = self.names.route(name, refresh=True, last_known=False)
        except TopicNotFoundError:
            return False
        for entry in route.brokers:
            answer = self.calls.invoke(entry.address, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name})
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {entry.broker} refused to delete topic {name!r}")
        for address in self.names.addresses:
            try:
                self.calls.invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name})
            except RmqError:
                pass  # that name server forgets it when the brokers register again
        self.names.forget(name)
        return True

    def list(self) -> list[TopicInfo]:
        """User topics (not RocketMQ's system, retry and dead-letter topics), from each
        broker's topic configs, those of every topic at once (GET_ALL_TOPIC_CONFIG, a request
        per broker).

        A broker that keeps that table for admins (broker_sim with ACLs; RocketMQ leaves it
        open) refuses it to other accounts. Then the topics are those the name servers list
        (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, open, as mqadmin topicList lists them), each with
        its own config (GET_TOPIC_CONFIG, all in flight), which a broker gives an account that
        may publish or subscribe to the topic; the others are left out. A list is for choosing
        what to use: a topic the account may not use would be a name without its queue type
        (which is in the config refused), and would fail the whole of a ``topicPattern`` read
        that matched it, so the list is what the account may use (an admin's: every topic, as
        before). An account that may use none of the topics (or whose signature is wrong) gets
        the broker's refusal, not an empty list that would read as "no topics"."""
        masters = self.names.masters()
        system = set(masters) | self.names.clusters
        answers = self.calls.invoke_all([(address, RequestCode.GET_ALL_TOPIC_CONFIG, {})
                                         for address in masters.values()])
        configs = []  # (broker, topic, config)
        for broker, answer in zip(masters, answers):
            if answer.code == ResponseCode.NO_PERMISSION:
                configs = self._usable_configs(masters, system)
                break
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} refused its topic list")
            configs.extend((broker, name, config)
                           for name, config in (fastjson.loads(answer.body).get("topicConfigTable") or {}).items())
        found: dict[str, list] = {}
        types: dict[str, QueueType] = {}
        for broker, name, config in configs:
            if _is_system_topic(name, system):
                continue
            found.setdefault(name, []).append((broker, int(config.get("readQueueNums", 0))))
            types[name] = _queue_type(config)
        return [TopicInfo(name, sum(c for _b, c in brokers), types[name], tuple(sorted(brokers)))
                for name, brokers in sorted(found.items())]

    def _usable_configs(self, masters: dict[str, str], system: set) -> list:
        """(broker, topic, config) of each topic the name servers list that the account may
        use, asking every broker for each (one that does not have it says so); a refusal when
        it may use none."""
        names = [name for name in self.names.topic_names() if not _is_system_topic(name, system)]
        asked = [(broker, address, name) for name in names for broker, address in masters.items()]
        answers = self.calls.invoke_all([(address, RequestCode.GET_TOPIC_CONFIG, {"topic": name})
                                         for _broker, address, name in asked])
        configs, refusal = [], None
        for (broker, _address, name), answer in zip(asked, answers):
            if answer.code == ResponseCode.SUCCESS:
                config = fastjson.loads(answer.body)
                configs.append((broker, name, config.get("topicConfig", config)))
            elif answer.code == ResponseCode.NO_PERMISSION:
                refusal = refusal or answer
            elif answer.code != ResponseCode.TOPIC_NOT_EXIST:
                raise refused(answer, f"broker {broker} refused the config of topic {name!r}")
        if not configs and refusal is not None:
            raise refused(refusal, f"listing topics: the account may use none of the {len(names)} topics the name "
                                   f"servers {';'.join(self.names.addresses)} list (only an admin lists them all)")
        return configs

    def configs(self, masters: dict[str, str]) -> dict[str, dict]:
        """Each broker's topic configs, by topic name (system topics too)."""
        answers = self.calls.invoke_all([(address, RequestCode.GET_ALL_TOPIC_CONFIG, {})
                                         for address in masters.values()])
        tables = {}
        for broker, answer in zip(masters, answers):
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} refused its topic list")
            tables[broker] = fastjson.loads(answer.body).get("topicConfigTable") or {}
        return tables


def _queue_type(config: dict) -> QueueType:
    attributes = config.get("attributes") or {}
    value = attributes.get(QUEUE_TYPE_ATTRIBUTE) or attributes.get("+" + QUEUE_TYPE_ATTRIBUTE) or "SimpleCQ"
    return QueueType.BATCH_CQ if value.lower() == "batchcq" else QueueType.SIMPLE_CQ


def _is_system_topic(name: str, brokers_and_clusters: set) -> bool:
    """RocketMQ's own topics (``is_system_topic``), and those a broker and a cluster make under
    their names."""
    return is_system_topic(name) or name in brokers_and_clusters
