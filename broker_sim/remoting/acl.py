"""What each remoting request needs of its account, as RocketMQ's brokers ask it
(DefaultAuthorizationContextBuilder): the topic's PUB to send, the topic's and the group's SUB to
pull, pop, ack and keep offsets, an admin account to create or delete topics and groups or to
register brokers. Route and cluster lookups are the name server's, which RocketMQ leaves open:
they are served unsigned."""

from __future__ import annotations

import orjson

from broker_sim.acl import Demand, Guard, Perm
from rmq_spark.protocol.remoting import RemotingCommand, RequestCode

from .fields import SEND_V2_NAMES, Fields

OPEN_CODES = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO,
                        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_TOPICS_BY_CLUSTER,
                        RequestCode.GET_KV_CONFIG})
_ADMIN = {RequestCode.UPDATE_AND_CREATE_TOPIC: "create or change topics",
          RequestCode.DELETE_TOPIC_IN_BROKER: "delete topics", RequestCode.DELETE_TOPIC_IN_NAMESRV: "delete topics",
          RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "create or change groups",
          RequestCode.REGISTER_BROKER: "register brokers", RequestCode.UNREGISTER_BROKER: "unregister brokers"}
_TOPIC_SUB = (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
              RequestCode.GET_EARLIEST_MSG_STORETIME, RequestCode.QUERY_MESSAGE)
_TOPIC_AND_GROUP_SUB = (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET,
                        RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
                        RequestCode.CHANGE_MESSAGE_INVISIBLETIME)
_GROUP_SUB = (RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
              RequestCode.UNREGISTER_CLIENT)


class RemotingAdmission:
    """Checks each request before its handler runs: the signature names an account (which
    ``request.account`` then holds) and the account may do what the request asks."""

    def __init__(self, guard: Guard):
        self.guard = guard

    def __call__(self, request: RemotingCommand) -> None:
        if request.code in OPEN_CODES:
            return
        account = self.guard.remoting_account(request.ext_fields, request.body)
        request.account = account.access_key
        self.guard.authorize(account, demands(request))


def demands(request: RemotingCommand) -> list[Demand]:
    """What ``request`` needs (none: any account may)."""
    code = request.code
    if code in _ADMIN:
        return [Demand.admin(_ADMIN[code])]
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        names = SEND_V2_NAMES if "b" in request.ext_fields else None
        return _send(Fields(request, names))
    if code == RequestCode.SEND_MESSAGE:
        return _send(Fields(request))
    fields = Fields(request)
    if code in _TOPIC_SUB:
        return [Demand.topic(fields.text("topic"), Perm.SUB)]
    if code in _TOPIC_AND_GROUP_SUB:
        return [Demand.topic(fields.text("topic"), Perm.SUB), Demand.group(fields.text("consumerGroup"))]
    if code in _GROUP_SUB:
        group = _group(fields)
        return [Demand.group(group)] if group else []
    if code == RequestCode.END_TRANSACTION:  # and the transaction must be this account's (the core checks)
        topic = fields.text("topic", "")
        return [Demand.topic(topic, Perm.PUB)] if topic else []
    if code == RequestCode.HEART_BEAT:
        return _heartbeat(request.body)
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        return _locks(request.body)
    return []


def _send(fields: Fields) -> list[Demand]:
    return [Demand.topic(fields.text("topic"), Perm.PUB)]  # a retry topic's: its group's SUB


def _group(fields: Fields) -> str:
    """The request's consumer group ("" when it names none): consumerGroup, or group as
    CONSUMER_SEND_MSG_BACK names it."""
    return fields.text("consumerGroup", "") or fields.text("group", "")


def _json(body: bytes) -> dict:
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        return {}  # the handler answers a malformed body
    return data if isinstance(data, dict) else {}


def _heartbeat(body: bytes) -> list[Demand]:
    """Each consumer's group and subscribed topics (SUB), as RocketMQ checks a heartbeat."""
    found = []
    for consumer in _json(body).get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        found.append(Demand.group(str(consumer.get("groupName", ""))))
        for subscription in consumer.get("subscriptionDataSet") or []:
            if isinstance(subscription, dict):
                found.append(Demand.topic(str(subscription.get("topic", "")), Perm.SUB))
    return found


def _locks(body: bytes) -> list[Demand]:
    data = _json(body)
    found = [Demand.group(str(data.get("consumerGroup", "")))]
    for queue in data.get("mqSet") or []:
        if isinstance(queue, dict):
            found.append(Demand.topic(str(queue.get("topic", "")), Perm.SUB))
    return found
