"""Stored messages found again: by a key of their KEYS or by the id their producer gave them
(QUERY_MESSAGE, the broker's index of keys: mqadmin queryMsgByKey, queryMsgByUniqueKey), and
by RocketMQ's offset message id (VIEW_MESSAGE_BY_ID at the store host it names: mqadmin
queryMsgById)."""

from __future__ import annotations

import time

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers
from rmq_spark.client.stored import offset_message_id, stored_messages
from rmq_spark.errors import MessageNotFoundError
from rmq_spark.structs import StoredMessage
from rmq_wire.remoting import RequestCode, ResponseCode


class Messages:
    def __init__(self, calls: Calls, names: NameServers):
        self.calls = calls
        self.names = names

    def query(self, topic: str, key: str, *, unique_key: bool = False, begin_ms: int = 0, end_ms: int = 0,
              max_messages: int = 32, broker: str = "") -> list[StoredMessage]:
        """The stored messages of ``topic`` (on ``broker``, or on each of its brokers) whose KEYS
        hold ``key``, or whose UNIQ_KEY is ``key``; most recent first. A broker's index finds keys
        by hash: only the records that hold the key are kept."""
        route = self.names.route(topic)
        entries = [b for b in route.brokers if not broker or b.broker == broker]
        fields = {"topic": topic, "key": key, "maxNum": max_messages, "beginTimestamp": begin_ms,
                  "endTimestamp": end_ms or int(time.time() * 1000)}
        if unique_key:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        answers = self.calls.invoke_all([(entry.address, RequestCode.QUERY_MESSAGE, fields) for entry in entries])
        found = []
        for entry, answer in zip(entries, answers):
            if answer.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {entry.broker} could not look up key {key!r} of topic {topic!r}")
            found += [m for m in stored_messages(answer.body, entry.broker) if m.topic == topic and (
                m.unique_key == key if unique_key else key in m.keys.split(" "))]
        return sorted(found, key=lambda m: m.store_timestamp_ms, reverse=True)

    def by_offset_id(self, message_id: str) -> StoredMessage:
        """The stored message an offset message id names, from the broker at its store host."""
        address, offset = offset_message_id(message_id)
        answer = self.calls.invoke(address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
        if answer.code == ResponseCode.SYSTEM_ERROR and "find" in (answer.remark or "").lower():
            raise MessageNotFoundError(f"the broker at {address} holds no message at commitlog offset {offset} (of "
                                       f"message id {message_id}): it was deleted, or the id is not of this cluster's "
                                       f"messages ({answer.remark})")
        if answer.code != ResponseCode.SUCCESS:
            raise refused(answer, f"the broker at {address} refused message {message_id}")
        brokers = {address: name for name, address in self.names.masters().items()}
        found = stored_messages(answer.body, brokers.get(address, ""))
        if not found:
            raise MessageNotFoundError(f"the broker at {address} answered no message at commitlog offset {offset}")
        return found[0]
