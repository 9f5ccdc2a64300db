"""The broker's remoting requests, each translated into a BrokerCore call and back, as
RocketMQ's broker processors answer them (SendMessageProcessor, PullMessageProcessor,
ConsumerManageProcessor, ClientManageProcessor, AdminBrokerProcessor, ...).

What RocketMQ means by each request (message ids, tag filters, retry topics, offsets) is the
core's; here are only the header fields, the bodies and the response codes.
"""

from __future__ import annotations

import itertools
import logging
import socket
import struct
import zlib

import orjson

from broker_sim.core import (
    PERM_READ_WRITE,
    BrokerCore,
    EarlyBatchSend,
    InnerBatchSend,
    RangeStatus,
    Reason,
    SendRequest,
    SingleSend,
    TopicConfig,
    parse_tag_filter,
    refused,
)
from broker_sim.core.limits import Holding, client_key
from broker_sim.doors.checks import TransactionChecks
from broker_sim.doors.remoting import bodies
from broker_sim.doors.remoting.clients import ClientRegistry, queues_of
from broker_sim.doors.remoting.fields import SEND_V2_NAMES, Fields
from broker_sim.doors.remoting.server import Connection, Handler
from rmq_wire import record as fmt
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode
from rmq_wire.types import QueueType

log = logging.getLogger(__name__)

# PullSysFlag bits.
PULL_COMMIT_OFFSET = 0x1
PARKED_PULL_BYTES = 5 << 10  # what a waiting pull holds (its request, task, future), about: 4.7 KiB measured
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
MAX_PULL_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory
MAX_PULL_MESSAGES_DEFAULT = 32
_PROPERTY_FIELDS = (fmt.PROPERTY_TAGS, fmt.PROPERTY_KEYS)


_READS = {RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.GET_MAX_OFFSET,
          RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
          RequestCode.QUERY_MESSAGE, RequestCode.GET_TOPIC_STATS_INFO, RequestCode.GET_CONSUME_STATS}


class BrokerRequests:
    """The broker's side of the door: requests over ``core``; ``clients`` holds heartbeats,
    subscriptions and queue locks; ``address`` is this broker's remoting address."""

    def __init__(self, core: BrokerCore, clients: ClientRegistry, checks: TransactionChecks, broker_name: str,
                 cluster_name: str, address: str, hold):
        self.core = core
        self.clients = clients
        self.checks = checks  # transactions opened here are checked back
        self.broker_name = broker_name
        self.cluster_name = cluster_name
        self.address = address
        self.hold = hold  # PullHold: suspended pulls
        self._half_ids = itertools.count(1)

    def handlers(self) -> dict:
        blocking = self.core.appends_wait_for_flush
        plain = {
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.LITE_PULL_MESSAGE: self.pull,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.GET_TOPIC_CONFIG: self.topic_config,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.create_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.QUERY_DATA_VERSION: self.data_version,
        }
        # Reads wait for the index to hold what was stored before them (read-your-writes): in
        # the pool while it is behind, on the loop otherwise.
        table = {code: Handler(call, waits_now=self.core.reads_may_wait if code in _READS else None)
                 for code, call in plain.items()}
        for code, call in ((RequestCode.SEND_MESSAGE, self.send), (RequestCode.SEND_MESSAGE_V2, self.send_v2),
                           (RequestCode.SEND_BATCH_MESSAGE, self.send_batch)):
            table[code] = Handler(call, blocking)
        return table

    # --- sends -----------------------------------------------------------------------------

    def send(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        fields = Fields(request)  # the C++ client sends its batches with this code and batch=1
        return self._send(request, connection, fields, batch=fields.flag("batch"))

    def send_v2(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        fields = Fields(request, SEND_V2_NAMES)
        return self._send(request, connection, fields, batch=fields.flag("batch"))

    def send_batch(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        names = SEND_V2_NAMES if "b" in request.ext_fields else None
        return self._send(request, connection, Fields(request, names), batch=True)

    def _send(self, request: RemotingCommand, connection: Connection, fields: Fields, batch: bool) -> RemotingCommand:
        topic = fields.text("topic")
        client = client_key(connection.client, request.account)
        # A topic that does not exist is created where the broker creates topics on a first send and
        # the client says so as RocketMQ's do, naming TBW102 (its defaultTopic) and the queues it asks.
        new_topic_queues = fields.integer("defaultTopicQueueNums", 0) \
            if fields.text("defaultTopic", "") == fmt.AUTO_CREATE_TOPIC else -1
        config = self.core.sending_topic(topic, client, new_topic_queues) if new_topic_queues >= 0 \
            else self.core.topic(topic)
        queue_id = fields.integer("queueId")
        if queue_id < 0:  # RocketMQ: any queue
            queue_id = fields.integer("bornTimestamp", 0) % config.queue_count
        properties = fmt.decode_properties(fields.text("properties", ""))
        # A consumed message re-sent as it came (a client's send-back fallback, a forwarder)
        # carries the store's own CRC property: the store writes a new one.
        properties.pop(fmt.PROPERTY_RECORD_CRC, None)
        sys_flag = fields.integer("sysFlag", 0)
        tags, keys = properties.pop(fmt.PROPERTY_TAGS, ""), properties.pop(fmt.PROPERTY_KEYS, "")
        transaction_id = ""
        if properties.get(fmt.PROPERTY_TRANSACTION_PREPARED) == "true":
            if batch:
                raise refused(Reason.INVALID_ARGUMENT, "a batch cannot be transactional: send its messages "
                                                       "one at a time")
            transaction_id = properties.get(fmt.PROPERTY_UNIQ_KEY) or f"{connection.remote}-{request.opaque}"
        if batch:
            body = _inflated(request.body, self.core.max_message_bytes) \
                if sys_flag & fmt.SysFlag.COMPRESSED else request.body  # the C++ client compresses its batches
            content = self._batch_content(body, config, properties, tags)
        else:
            content = SingleSend(request.body, properties, tags, keys, fields.integer("flag", 0), sys_flag)
        send = SendRequest(topic, queue_id, content, fields.integer("bornTimestamp", 0), born_host(connection),
                           transaction_id=transaction_id, reconsume_times=fields.integer("reconsumeTimes", 0),
                           owner=request.account, client=client, new_topic_queues=max(new_topic_queues, 0))
        outcome = self.core.send(send)
        if transaction_id:  # offsets come at the commit: the id only has to be one a client can decode
            self.checks.opened(transaction_id, fields.text("producerGroup", ""), topic,
                               fmt.check_immunity_s(properties) * 1000)
            msg_id = fmt.message_id(self.core.store_host_bytes, next(self._half_ids))
            return request.response(ResponseCode.SUCCESS, ext_fields={
                "msgId": msg_id, "queueId": str(queue_id), "queueOffset": "0", "transactionId": transaction_id})
        header = {"queueId": str(outcome.queue_id), "queueOffset": str(outcome.base_offset)}
        if isinstance(content, InnerBatchSend):  # one record: its offsetMsgId, and the batch's UNIQ_KEY
            header["msgId"] = outcome.message_ids.record_id
            header["batchUniqId"] = properties[fmt.PROPERTY_UNIQ_KEY]
        else:  # a batch unpacked: the offsetMsgId of each message
            header["msgId"] = ",".join(outcome.message_ids)
        return request.response(ResponseCode.SUCCESS, ext_fields=header)

    @staticmethod
    def _batch_content(body: bytes, config: TopicConfig, properties: dict, tags: str):
        """A batch into a BatchCQ topic is ONE inner batch, as RocketMQ 5's broker stores it
        when the batch carries a UNIQ_KEY; otherwise a record per message."""
        try:
            count = sum(1 for _ in fmt.iter_message_batch(body, len(body) // fmt.BATCH_ENTRY_FIXED_BYTES + 1))
        except fmt.BatchFormatError as bad:
            raise refused(Reason.MESSAGE_ILLEGAL, f"the batch's body is not RocketMQ's MessageBatch encoding: "
                                                  f"{bad}") from None
        if not count:
            raise refused(Reason.MESSAGE_ILLEGAL, "the batch holds no message: send at least one")
        if config.queue_type is QueueType.BATCH_CQ and fmt.PROPERTY_UNIQ_KEY in properties:
            return InnerBatchSend(body, count, "rmq", properties=properties, tags=tags)
        return EarlyBatchSend(body, count)

    # --- pulls -----------------------------------------------------------------------------

    def pull(self, request: RemotingCommand, connection: Connection):
        fields = Fields(request)
        pull = PullRequest.read(fields, self.clients)
        answer = self.pull_once(request, pull)
        if answer.code == ResponseCode.PULL_NOT_FOUND and pull.suspend_ms > 0:
            return self.suspended(request, pull, connection.memory)
        return answer

    def suspended(self, request: RemotingCommand, pull: "PullRequest", memory: Holding | None):
        """A coroutine answering ``pull`` once it finds messages or its suspend time is over
        (the hold wakes it); raises TOO_MANY_REQUESTS when as many pulls wait as allowed, or
        past the client's share of the memory budget (``memory``: its connection's holding,
        which counts ``PARKED_PULL_BYTES`` while the pull waits)."""
        hold = self.hold
        hold.check_room()
        if memory is not None:
            memory.reserve(PARKED_PULL_BYTES)
        pull.commit_offset = -1  # committed by the first try

        async def wait() -> RemotingCommand:
            try:
                deadline = hold.loop.time() + pull.suspend_ms / 1000
                while True:
                    await hold.arrival(deadline - hold.loop.time(), (pull.topic, pull.queue_id, pull.offset))
                    answer = await hold.read(self.core.reads_may_wait(), self.pull_once, request, pull)
                    if answer.code != ResponseCode.PULL_NOT_FOUND or hold.loop.time() >= deadline:
                        return answer
            finally:
                if memory is not None:
                    memory.release(PARKED_PULL_BYTES)

        return wait()

    def pull_once(self, request: RemotingCommand, pull: "PullRequest") -> RemotingCommand:
        if pull.commit_offset >= 0:
            self.core.commit_offsets(pull.group, [(pull.topic, pull.queue_id, pull.commit_offset)])

        def answer(cursor, records):
            header = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(cursor.next_offset),
                      "minOffset": str(cursor.min_offset), "maxOffset": str(cursor.max_offset),
                      "topicSysFlag": "0", "groupSysFlag": "0", "forbiddenType": "0"}
            if records:
                if cursor.status is RangeStatus.RECORD_CORRUPTED:  # the next pull is answered with it alone
                    header["nextBeginOffset"] = str(cursor.corrupted_from)
                return request.response(ResponseCode.SUCCESS, "FOUND", header, b"".join(records))
            code, remark = _PULL_CODES[cursor.status]
            if cursor.status is RangeStatus.RECORD_CORRUPTED:  # the client reads on from nextBeginOffset
                remark = f"{cursor.detail}; read on from offset {cursor.next_offset}"
            return request.response(code, remark, header)

        return self.core.pull(pull.topic, pull.queue_id, pull.offset, pull.max_messages, MAX_PULL_BYTES,
                              pull.tags, answer, pull.group)

    def send_back(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        limit = fields.integer("maxReconsumeTimes", -1)
        self.core.send_back(fields.text("group"), fields.integer("offset"), fields.integer("delayLevel", 0),
                            None if limit < 0 else limit, fields.text("originMsgId", ""))
        return request.response(ResponseCode.SUCCESS)

    def view_message(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """A message by its offsetMsgId, which the client decodes into this commitlog offset."""
        return request.response(ResponseCode.SUCCESS, body=self.core.message_at(Fields(request).integer("offset")))

    def query_message(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """Messages by key (mqadmin queryMsgByKey), or by unique key (queryMsgByUniqueKey)."""
        fields = Fields(request)
        unique = fields.flag("_UNIQUE_KEY_QUERY")
        found = self.core.query_messages(fields.text("topic"), fields.text("key"), fields.integer("maxNum"),
                                         fields.integer("beginTimestamp"), fields.integer("endTimestamp"), unique)
        if not found:
            return request.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        header = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=b"".join(found))

    # --- offsets ---------------------------------------------------------------------------

    def _queue(self, fields: Fields) -> tuple[TopicConfig, int]:
        config = self.core.topic(fields.text("topic"))
        queue_id = fields.integer("queueId")
        if not 0 <= queue_id < config.queue_count:
            raise refused(Reason.QUEUE_NOT_FOUND, f"queueId[{queue_id}] is illegal, topic:[{config.name}] has "
                                                  f"queues 0 to {config.queue_count - 1}")
        return config, queue_id

    def max_offset(self, request: RemotingCommand, _connection) -> RemotingCommand:
        config, queue_id = self._queue(Fields(request))
        return request.response(ResponseCode.SUCCESS, ext_fields={
            "offset": str(self.core.queue_offsets(config, queue_id)[1])})

    def min_offset(self, request: RemotingCommand, _connection) -> RemotingCommand:
        config, queue_id = self._queue(Fields(request))
        return request.response(ResponseCode.SUCCESS, ext_fields={
            "offset": str(self.core.queue_offsets(config, queue_id)[0])})

    def search_offset(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        config, queue_id = self._queue(fields)
        [(_q, offset)] = self.core.offsets_for_timestamp(config.name, [queue_id], fields.integer("timestamp"))
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def earliest_store_time(self, request: RemotingCommand, _connection) -> RemotingCommand:
        config, queue_id = self._queue(Fields(request))
        timestamp = self.core.earliest_store_time(config.name, queue_id)
        if timestamp < 0:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic {config.name} queue {queue_id} holds no "
                                                               "message: it has no earliest store time")
        return request.response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})

    def query_consumer_offset(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        group = fields.text("consumerGroup")
        config, queue_id = self._queue(fields)
        committed = {q: o for _t, q, o in self.core.query_offsets(group, [config.name])}
        if queue_id in committed:
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(committed[queue_id])})
        low, high = self.core.queue_offsets(config, queue_id)
        if fields.text("setZeroIfNotFound", "true") != "false" and low == 0 and high > 0:
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return request.response(ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")

    def update_consumer_offset(self, request: RemotingCommand, _connection) -> RemotingCommand:
        fields = Fields(request)
        config, queue_id = self._queue(fields)
        offset = fields.integer("commitOffset")
        self.core.commit_offsets(fields.text("consumerGroup"), [(config.name, queue_id, offset)],
                                 client_key(_connection.client, request.account))
        return request.response(ResponseCode.SUCCESS)

    # --- clients ---------------------------------------------------------------------------

    def heartbeat(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        try:
            data = orjson.loads(request.body or b"{}")
        except orjson.JSONDecodeError as bad:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the heartbeat's body is not HeartbeatData JSON: {bad}")
        if not isinstance(data, dict):
            return request.response(ResponseCode.SYSTEM_ERROR, "the heartbeat's body is not a HeartbeatData object")
        for group in self.clients.heartbeat(connection, data, request.language, request.version):
            self.core.ensure_retry_topic(group, client_key(connection.client, request.account))
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        fields = Fields(request)
        self.clients.unregister(connection, fields.text("clientID"), fields.text("producerGroup", None),
                                fields.text("consumerGroup", None))
        return request.response(ResponseCode.SUCCESS)

    def consumer_list(self, request: RemotingCommand, _connection) -> RemotingCommand:
        group = Fields(request).text("consumerGroup")
        ids = self.clients.consumer_ids(group)
        if not ids:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer of group {group} is connected")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))

    def consumer_connections(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """mqadmin consumerConnection: the group's connected consumers (RocketMQ's
        ConsumerConnection: connectionSet, subscriptionTable, consumeType, messageModel,
        consumeFromWhere, from their heartbeats); CONSUMER_NOT_ONLINE when none is connected."""
        group = Fields(request).text("consumerGroup")
        found = self.clients.consumer_connection(group)
        if found is None:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(found))

    def lock_batch(self, request: RemotingCommand, _connection) -> RemotingCommand:
        body = _json_body(request, "LockBatchRequestBody")
        locked = self.clients.lock(bodies.text(body, "consumerGroup", "LockBatchRequestBody"),
                                   bodies.text(body, "clientId", "LockBatchRequestBody"),
                                   queues_of(body, "LockBatchRequestBody"))
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": locked}))

    def unlock_batch(self, request: RemotingCommand, _connection) -> RemotingCommand:
        body = _json_body(request, "UnlockBatchRequestBody")
        self.clients.unlock(bodies.text(body, "consumerGroup", "UnlockBatchRequestBody"),
                            bodies.text(body, "clientId", "UnlockBatchRequestBody"),
                            queues_of(body, "UnlockBatchRequestBody"))
        return request.response(ResponseCode.SUCCESS)

    # --- admin -----------------------------------------------------------------------------

    def create_topic(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """mqadmin updateTopic: creates the topic, or updates one that exists, as RocketMQ's
        broker does. broker_sim keeps one queue count for reads and writes: the larger of
        readQueueNums and writeQueueNums (a queue still read stays served). queue.type=BatchCQ in
        the attributes makes a BatchCQ topic; a queue type is fixed at creation, as RocketMQ's
        (an update naming another is refused, one naming none keeps it)."""
        fields = Fields(request)
        name = fields.text("topic")
        queues = max(fields.integer("writeQueueNums", 8), fields.integer("readQueueNums", 8))
        perm = _topic_perm(fields.integer("perm", PERM_READ_WRITE))
        queue_type = _queue_type(fields.text("attributes", "") or "")
        client = client_key(connection.client, request.account)
        existing = self.core.find_topic(name) if name else None
        if existing is None:
            self.core.create_topic(name, queues, queue_type or QueueType.SIMPLE_CQ, client, perm=perm)
            return request.response(ResponseCode.SUCCESS)
        if queue_type is not None and queue_type is not existing.queue_type:
            raise refused(Reason.INVALID_ARGUMENT, f"attempt to update an unchangeable attribute. key: queue.type "
                                                   f"(topic {name} is {existing.queue_type.value}: delete it and "
                                                   f"create it again to make it {queue_type.value})")
        self.core.update_topic(name, queues, perm, client)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """mqadmin deleteTopic; a group's retry and dead-letter topics too, as RocketMQ's broker
        deletes them (mqadmin deleteSubGroup -c asks for both)."""
        self.core.delete_topic(Fields(request).text("topic"), group_topics=True)
        return request.response(ResponseCode.SUCCESS)

    def delete_group(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """mqadmin deleteSubGroup: the group's settings, and with cleanOffset (mqadmin's -r true)
        its offsets, pop state and metrics too, as RocketMQ's broker forgets them (its retry and
        dead-letter topics go by DELETE_TOPIC_IN_BROKER). SUCCESS whether or not the group was
        known, as RocketMQ answers."""
        fields = Fields(request)
        self.core.delete_group(fields.text("groupName"), clean_offsets=fields.flag("cleanOffset"), topics=False)
        return request.response(ResponseCode.SUCCESS)

    def create_group(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """Groups need no creation here (as with autoCreateSubscriptionGroup); what is kept of
        the SubscriptionGroupConfig is whether the group consumes orderly."""
        config = _json_body(request, "SubscriptionGroupConfig")
        if not isinstance(config.get("groupName"), str):
            raise refused(Reason.INVALID_ARGUMENT, "the SubscriptionGroupConfig has no groupName: send one as "
                                                   "mqadmin updateSubGroup does")
        self.core.update_group(config["groupName"], config.get("consumeMessageOrderly") is True)
        return request.response(ResponseCode.SUCCESS)

    def topic_config(self, request: RemotingCommand, _connection) -> RemotingCommand:
        config = self.core.topic(Fields(request).text("topic"))
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicConfig": _topic_json(config)}))

    def all_topic_config(self, request: RemotingCommand, _connection) -> RemotingCommand:
        table = {t.name: _topic_json(t) for t in self.core.list_topics()}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(
            {"topicConfigTable": table, "dataVersion": _data_version()}))

    def data_version(self, request: RemotingCommand, _connection) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(_data_version()))

    def topic_stats(self, request: RemotingCommand, _connection) -> RemotingCommand:
        # RocketMQ's clients (and the SDK through name servers) read a topic's offsets here: read-your-writes
        config, queues = self.core.describe_topic(Fields(request).text("topic"), wait_for_index=True)
        table = [(self._queue_json(config.name, q.queue_id), {"minOffset": q.min_offset, "maxOffset": q.max_offset,
                                                              "lastUpdateTimestamp": 0}) for q in queues]
        return request.response(ResponseCode.SUCCESS, body=b'{"offsetTable":' + object_keyed_map(table) + b"}")

    def consume_stats(self, request: RemotingCommand, _connection) -> RemotingCommand:
        """mqadmin consumerProgress: per queue, the broker's max offset and the group's commit."""
        fields = Fields(request)
        group = fields.text("consumerGroup")
        wanted = [t for t in (fields.text("topic", "") or "").split(";") if t] or None
        committed = {(t, q): o for t, q, o in self.core.query_offsets(group, wanted)}
        table = []
        for topic in sorted({t for t, _q in committed}):
            config = self.core.topic(topic)
            for queue_id in range(config.queue_count):
                offset = committed.get((topic, queue_id), 0)
                table.append((self._queue_json(topic, queue_id), {
                    "brokerOffset": self.core.queue_offsets(config, queue_id)[1], "consumerOffset": offset,
                    "pullOffset": offset, "lastTimestamp": 0}))
        return request.response(ResponseCode.SUCCESS, body=b'{"consumeTps":0.0,"offsetTable":' +
                                object_keyed_map(table) + b"}")

    def _queue_json(self, topic: str, queue_id: int) -> dict:
        return {"brokerName": self.broker_name, "queueId": queue_id, "topic": topic}

    def runtime_info(self, request: RemotingCommand, _connection) -> RemotingCommand:
        stats = self.core.stats()
        table = {"brokerVersionDesc": "broker_sim", "msgPutTotalTodayNow": stats.messages_put,
                 "msgGetTotalTodayNow": stats.messages_read, "commitLogMinOffset": stats.commitlog_min_offset,
                 "commitLogMaxOffset": stats.commitlog_max_offset, "dispatchBehindBytes": stats.dispatch_lag_bytes,
                 "topics": stats.topics, "queues": stats.queues, "flushMode": stats.flush_mode,
                 "brokerName": self.broker_name, "clusterName": self.cluster_name}
        table = {name: str(value) for name, value in table.items()}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": table}))



_PULL_CODES = {
    RangeStatus.FOUND: (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),  # found, none passed the filter
    RangeStatus.NO_MESSAGE: (ResponseCode.PULL_NOT_FOUND, "NO_NEW_MESSAGE"),
    RangeStatus.OFFSET_TOO_SMALL: (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL"),
    RangeStatus.OFFSET_OVERFLOW: (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY"),
    RangeStatus.BUDGET_EXHAUSTED: (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
    RangeStatus.RECORD_CORRUPTED: (ResponseCode.PULL_RETRY_IMMEDIATELY, "the record is damaged; read on past it"),
}


class PullRequest:
    """A PULL_MESSAGE's fields, its tag filter resolved (the request's subscription, or the one
    its group registered by heartbeat)."""

    __slots__ = ("group", "topic", "queue_id", "offset", "max_messages", "commit_offset", "suspend_ms", "tags")

    @classmethod
    def read(cls, fields: Fields, clients: ClientRegistry) -> "PullRequest":
        pull = cls()
        pull.group, pull.topic = fields.text("consumerGroup"), fields.text("topic")
        pull.queue_id, pull.offset = fields.integer("queueId"), fields.integer("queueOffset")
        pull.max_messages = fields.integer("maxMsgNums", MAX_PULL_MESSAGES_DEFAULT)
        flags = fields.integer("sysFlag", 0)
        pull.commit_offset = fields.integer("commitOffset", -1) if flags & PULL_COMMIT_OFFSET else -1
        pull.suspend_ms = fields.integer("suspendTimeoutMillis", 0) if flags & PULL_SUSPEND else 0
        if flags & PULL_SUBSCRIPTION:
            expression = fields.text("subscription", "*")
        else:
            expression = clients.subscription(pull.group, pull.topic)
        pull.tags = parse_tag_filter(expression or "*")
        return pull


def born_host(connection: Connection) -> bytes:
    """The client's address as a record's BORNHOST (IPv4 and port; others as 0.0.0.0)."""
    host, port = connection.address
    try:
        return socket.inet_aton(host) + struct.pack(">i", port)
    except OSError:
        return bytes(4) + struct.pack(">i", port)


def object_keyed_map(entries: list[tuple[dict, dict]]) -> bytes:
    """A map whose keys are objects, as fastjson writes RocketMQ's Map<MessageQueue, ...>
    (``{{"topic":...}:{...}}``, not JSON proper, but what RocketMQ's clients parse)."""
    return b"{" + b",".join(orjson.dumps(key) + b":" + orjson.dumps(value) for key, value in entries) + b"}"


def _inflated(body: bytes, max_bytes: int) -> bytes:
    """A zlib-compressed batch body, inflated to at most ``max_bytes``."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as bad:
        raise refused(Reason.MESSAGE_ILLEGAL, f"the batch's body is flagged compressed but is not zlib: {bad}") \
            from None
    if len(out) > max_bytes:
        raise refused(Reason.MESSAGE_TOO_LARGE, f"the batch inflates to more than {max_bytes} bytes "
                                                "(max_message_bytes): send smaller batches")
    return out


def _json_body(request: RemotingCommand, what: str) -> dict:
    try:
        body = orjson.loads(request.body or b"{}")
    except orjson.JSONDecodeError as bad:
        raise refused(Reason.INVALID_ARGUMENT, f"the request's body is not {what} JSON: {bad}") from None
    if not isinstance(body, dict):
        raise refused(Reason.INVALID_ARGUMENT, f"the request's body is not a {what} object")
    return body


def _topic_json(config: TopicConfig) -> dict:
    attributes = {"+queue.type": "BatchCQ"} if config.queue_type is QueueType.BATCH_CQ else {}
    return {"topicName": config.name, "readQueueNums": config.queue_count, "writeQueueNums": config.queue_count,
            "perm": config.perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
            "attributes": attributes}


def _topic_perm(perm: int) -> int:
    """A topic's perm as UPDATE_AND_CREATE_TOPIC gives it: its read and write bits (PermName's
    inherit bit means nothing here); neither is refused (broker_sim keeps a topic readable,
    writable, or both)."""
    if not perm & PERM_READ_WRITE or not 0 <= perm < 8:
        raise refused(Reason.INVALID_ARGUMENT, f"perm {perm}: use 2 (write only), 4 (read only) or 6 (read and "
                                               "write), PermName's bits")
    return perm & PERM_READ_WRITE


def _queue_type(attributes: str) -> QueueType | None:
    """The queue type an updateTopic's attributes ("+queue.type=BatchCQ,+k=v") name; None: none."""
    for item in attributes.split(","):
        key, _, value = item.strip().lstrip("+").partition("=")
        if key == "queue.type":
            try:
                return QueueType.parse(value)
            except ValueError as bad:
                raise refused(Reason.INVALID_ARGUMENT, f"attribute queue.type={value}: {bad}") from None
    return None


def _data_version() -> dict:
    return {"timestamp": 0, "counter": 0, "stateVersion": 0}
