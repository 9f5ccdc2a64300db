"""Consumer groups: their offsets (UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET, a broker's
consume stats), and which groups exist with which live consumers (a group's retry topic, the
brokers' heartbeats)."""

from __future__ import annotations

import time

import orjson

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers
from rmq_spark.client.remoting.topics import Topics
from rmq_spark.errors import GroupNotFoundError, RmqError
from rmq_spark.structs import ConsumerConnection, GroupInfo, GroupOffset
from rmq_wire.remoting import RequestCode, ResponseCode, fastjson

RETRY_PREFIX = "%RETRY%"  # a group's retry topic: %RETRY%{group}
DLQ_PREFIX = "%DLQ%"  # and its dead-letter topic
HEARTBEAT_S = 60.0  # a group announced to a broker is announced again after this


class Groups:
    def __init__(self, calls: Calls, names: NameServers, topics: Topics, client_id: str):
        self.calls = calls
        self.names = names
        self.topics = topics
        self.client_id = client_id
        self._announced: dict[tuple[str, str], float] = {}  # (broker address, group) -> when

    def commit_offsets(self, group: str, offsets: dict[tuple[str, str, int], int]) -> None:
        """RocketMQ's consumer offsets (UPDATE_CONSUMER_OFFSET), which its tools show. The
        group is first announced to each broker by a heartbeat, then unregistered: the broker
        makes the group's retry topic, which ``mqadmin consumerProgress`` looks up, and no
        consumer of the group counts this client when it shares out queues."""
        calls = []
        for (topic, broker, queue_id), offset in offsets.items():
            address = self.names.route(topic).address(broker)
            self._announce(address, group, topic)
            calls.append((address, RequestCode.UPDATE_CONSUMER_OFFSET,
                          {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}))
        for (address, _code, fields), answer in zip(calls, self.calls.invoke_all(calls)):
            if answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise GroupNotFoundError(f"consumer group {group!r} does not exist on the broker at {address}: create "
                                         f"it (mqadmin updateSubGroup -g {group}) or turn on "
                                         "autoCreateSubscriptionGroup")
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"the broker at {address} refused the offset of {fields['topic']!r} queue "
                                      f"{fields['queueId']} for group {group!r}")

    def _announce(self, address: str, group: str, topic: str) -> None:
        key = (address, group)
        if time.monotonic() - self._announced.get(key, -HEARTBEAT_S) < HEARTBEAT_S:
            return
        data = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
                "topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [],
                "subVersion": int(time.time() * 1000), "expressionType": "TAG"}]}]}
        self.calls.invoke(address, RequestCode.HEART_BEAT, {}, orjson.dumps(data))
        self.calls.invoke(address, RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "consumerGroup": group})
        self._announced[key] = time.monotonic()

    def offsets(self, group: str, topics: list[str]) -> list[GroupOffset]:
        """The group's offset of each readable queue of ``topics`` it has one for (of every topic,
        for none named)."""
        if not topics:
            return self._offsets_everywhere(group)
        calls, queues = [], []
        for topic in topics:
            route = self.names.route(topic)
            for broker, queue_id in route.readable():
                fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "setZeroIfNotFound": "false"}
                calls.append((route.address(broker), RequestCode.QUERY_CONSUMER_OFFSET, fields))
                queues.append((topic, broker, queue_id))
        out = []
        for (topic, broker, queue_id), answer in zip(queues, self.calls.invoke_all(calls)):
            if answer.code == ResponseCode.SUCCESS:
                out.append(GroupOffset(group, topic, queue_id, int(answer.ext_fields["offset"]), broker))
            elif answer.code not in (ResponseCode.QUERY_NOT_FOUND, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST):
                raise refused(answer, f"broker {broker} refused group {group!r}'s offset of {topic!r} queue "
                                      f"{queue_id}")
        return out

    def _offsets_everywhere(self, group: str) -> list[GroupOffset]:
        """Every topic's offsets of ``group``, as each broker's consume stats list them."""
        masters = self.names.masters()
        answers = self.calls.invoke_all([(address, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})
                                         for address in masters.values()])
        out = []
        for broker, answer in zip(masters, answers):
            if answer.code != ResponseCode.SUCCESS:
                continue  # the group has nothing on that broker
            for queue, stats in (fastjson.loads(answer.body).get("offsetTable") or {}).items():
                queue = dict(queue)
                if not queue["topic"].startswith(RETRY_PREFIX):
                    out.append(GroupOffset(group, queue["topic"], int(queue["queueId"]),
                                           int(stats["consumerOffset"]), queue.get("brokerName", broker)))
        return sorted(out, key=lambda o: (o.topic, o.broker, o.queue_id))

    def list(self, names: list[str]) -> list[GroupInfo]:
        """The groups named, or every group with a retry topic on a broker (RocketMQ makes it at a
        consumer's heartbeat; ``mqadmin consumerProgress`` finds groups so), each with the live
        consumers the brokers know from their heartbeats (GET_CONSUMER_LIST_BY_GROUP)."""
        masters = self.names.masters()
        if not names:
            names = sorted({name[len(RETRY_PREFIX):] for table in self.topics.configs(masters).values()
                            for name in table if name.startswith(RETRY_PREFIX)})
        calls = [(group, broker, address) for group in names for broker, address in masters.items()]
        answers = self.calls.invoke_all([(address, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
                                         for group, _broker, address in calls])
        consumers: dict[str, set] = {group: set() for group in names}
        for (group, broker, _address), answer in zip(calls, answers):
            if answer.code == ResponseCode.SUCCESS:
                consumers[group].update(fastjson.loads(answer.body).get("consumerIdList") or [])
            elif answer.code != ResponseCode.SYSTEM_ERROR:  # SYSTEM_ERROR: no consumer of the group is connected
                raise refused(answer, f"broker {broker} refused the consumers of group {group!r}")
        return [GroupInfo(group, tuple(sorted(consumers[group]))) for group in names]

    def delete(self, group: str) -> bool:
        """Forget ``group`` on every master, its offsets too (DELETE_SUBSCRIPTIONGROUP with
        cleanOffset), and its retry and dead-letter topics, as ``mqadmin deleteSubGroup -r``
        does. False where no broker knew it (no offsets, no retry topic; Admin refuses a group with live
        consumers before asking)."""
        masters = self.names.masters()
        known = bool(self._offsets_everywhere(group)) or any(
            RETRY_PREFIX + group in table for table in self.topics.configs(masters).values())
        answers = self.calls.invoke_all([(address, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                          {"groupName": group, "cleanOffset": "true", "removeOffset": "true"})
                                         for address in masters.values()])
        for broker, answer in zip(masters, answers):
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} refused to delete group {group!r}")
        for topic in (RETRY_PREFIX + group, DLQ_PREFIX + group):
            try:
                self.topics.delete(topic)
            except RmqError:  # a broker that keeps no such topic, or refuses it: the group is gone all the same
                pass
        return known

    def connections(self, group: str) -> list[ConsumerConnection]:
        """The consumers of ``group`` connected to each master now, as their heartbeats say
        (GET_CONSUMER_CONNECTION_LIST; CONSUMER_NOT_ONLINE where none is)."""
        masters = self.names.masters()
        answers = self.calls.invoke_all([(address, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
                                         for address in masters.values()])
        out = []
        for broker, answer in zip(masters, answers):
            if answer.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} refused the connections of group {group!r}")
            body = fastjson.loads(answer.body)
            subscriptions = tuple(sorted((topic, (data or {}).get("subString", "*"))
                                         for topic, data in (body.get("subscriptionTable") or {}).items()))
            for c in body.get("connectionSet") or []:
                out.append(ConsumerConnection(group, c.get("clientId", ""), c.get("clientAddr", ""),
                                              str(c.get("language", "")), str(c.get("version", "")), broker,
                                              subscriptions))
        return sorted(out, key=lambda c: (c.broker, c.client_id))
