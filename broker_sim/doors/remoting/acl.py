"""What each remoting request needs of its account. Every code the door serves is listed, once:
in ``OPEN_CODES`` (served unsigned) or in ``DEMANDS`` (signed, and what the account must hold;
a few ask for an account and nothing more, said so by name). ``RemotingAdmission`` refuses to
guard a door that serves a code listed in neither, so a new handler cannot slip in unchecked; a
code the door does not serve needs no demand: it is refused as unsupported.

As RocketMQ's brokers ask it (DefaultAuthorizationContextBuilder and the request headers'
@RocketMQAction; plain_acl's Permission.ADMIN_CODE): the topic's PUB to send, the topic's and
the group's SUB to pull, pop, ack and keep offsets, the topic's SUB to read its offsets or query
its messages, the topic's PUB or SUB to read its config and stats, the group's SUB (and the
named topics') for its consume stats, an admin account to create or delete topics and groups.
Route and cluster lookups are the name server's, which RocketMQ leaves open: served unsigned.

Stricter than RocketMQ, where it leaves a hole a user would not expect:

- VIEW_MESSAGE_BY_ID: RocketMQ 5 checks the topic the request names (4.x checks nothing), so any
  account reads any message by its offset. Here the record at the offset is read first and its
  own topic's SUB demanded; a refusal does not name that topic.
- CONSUMER_SEND_MSG_BACK copies the record at an offset into the group's retry topic, where the
  group reads it: the group's SUB (as RocketMQ) and the SUB of the record's topic.
- GET_ALL_TOPIC_CONFIG, GET_BROKER_RUNTIME_INFO: RocketMQ 5's headers name no resource, so they
  are checked for nothing; here they are the broker's configuration and state, for admins (as
  our door's BrokerStats). QUERY_DATA_VERSION is RocketMQ 5's cluster GET: admin here, the ACL
  file granting nothing on the cluster.
- REGISTER_BROKER, UNREGISTER_BROKER, DELETE_TOPIC_IN_NAMESRV, DELETE_KV_CONFIG: RocketMQ's name
  server checks nothing; here they change routes (or the KV config) for every client, for admins
  (brokers sign them as one).
"""

from __future__ import annotations

from typing import Callable

import orjson

from broker_sim.acl import Demand, Guard, Perm
from broker_sim.doors.remoting.fields import SEND_V2_NAMES, Fields
from rmq_wire import signing
from rmq_wire.remoting import RemotingCommand, RequestCode

RecordTopic = Callable[[int], "str | None"]  # the topic of the record at a commitlog offset (None: no record)

OPEN_CODES = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO,
                        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_TOPICS_BY_CLUSTER,
                        RequestCode.GET_KV_CONFIG})


class RemotingAdmission:
    """Checks each request before its handler runs: the signature names an account (which
    ``request.account`` then holds) and the account may do what the request asks.
    ``served``: the codes the door answers, each of which must be open or have its demands;
    ``record_topic``: the topic of the record at a commitlog offset, for requests naming one."""

    def __init__(self, guard: Guard, served, record_topic: RecordTopic):
        unlisted = sorted(getattr(code, "name", str(code)) for code in set(served) - OPEN_CODES - DEMANDS.keys())
        if unlisted:
            raise ValueError(f"the remoting door serves {', '.join(unlisted)} with no ACL demand: list each in "
                             "broker_sim/doors/remoting/acl.py (DEMANDS, or OPEN_CODES if RocketMQ leaves it open)")
        self.guard = guard
        self.record_topic = record_topic

    def __call__(self, request: RemotingCommand) -> None:
        if request.code in OPEN_CODES:
            return
        try:
            account = self.guard.remoting_account(request.ext_fields, request.body, request.version)
            request.account = account.access_key
            if account.admin:  # every demand is met: no record is read for it
                return
            self.guard.authorize(account, demands(request, self.record_topic))
        except Exception as err:
            # The server knows the connection, not this check: the line names the account only.
            self.guard.log_refusal(err, f"remoting request {_code_name(request.code)}",
                                   account=str(request.ext_fields.get(signing.ACCESS_KEY) or ""))
            raise


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"code {code}"


def demands(request: RemotingCommand, record_topic: RecordTopic) -> list[Demand]:
    """What ``request`` needs: nothing for a code the door does not serve (it is refused)."""
    demand = DEMANDS.get(request.code)
    return demand(request, record_topic) if demand else []


# --- one per code ---------------------------------------------------------------------------

def _admin(action: str) -> Callable:
    return lambda _request, _record_topic: [Demand.admin(action)]


def _send(request, _record_topic) -> list[Demand]:  # a retry topic's: its group's SUB
    return [Demand.topic(Fields(request).text("topic"), Perm.PUB)]


def _send_v2(request, _record_topic) -> list[Demand]:
    names = SEND_V2_NAMES if "b" in request.ext_fields else None
    return [Demand.topic(Fields(request, names).text("topic"), Perm.PUB)]


def _topic(perm: Perm) -> Callable:
    return lambda request, _record_topic: [Demand.topic(Fields(request).text("topic"), perm)]


def _topic_and_group(request, _record_topic) -> list[Demand]:
    fields = Fields(request)
    return [Demand.topic(fields.text("topic"), Perm.SUB), Demand.group(fields.text("consumerGroup"))]


def _group(request, _record_topic) -> list[Demand]:
    return [Demand.group(Fields(request).text("consumerGroup"))]


def _producer_or_consumer(request, _record_topic) -> list[Demand]:
    """A consumer's group's SUB; a producer (no consumerGroup) needs an account only."""
    group = Fields(request).text("consumerGroup", "")
    return [Demand.group(group)] if group else []


def _consume_stats(request, _record_topic) -> list[Demand]:
    fields = Fields(request)
    topics = [t for t in (fields.text("topic", "") or "").split(";") if t]
    return [Demand.group(fields.text("consumerGroup")), *(Demand.topic(t, Perm.SUB) for t in topics)]


def _end_transaction(request, _record_topic) -> list[Demand]:
    """The topic's PUB when named; and the transaction must be this account's (the core checks)."""
    topic = Fields(request).text("topic", "")
    return [Demand.topic(topic, Perm.PUB)] if topic else []


def _record(offset: int, record_topic: RecordTopic) -> list[Demand]:
    """The SUB of the topic of the record at ``offset``, named in a refusal by its offset only.
    No record there: nothing (the handler answers that no message starts there)."""
    topic = record_topic(offset)
    if topic is None:
        return []
    return [Demand.topic(topic, Perm.SUB, f"the topic of the message at commitlog offset {offset}")]


def _view_message(request, record_topic: RecordTopic) -> list[Demand]:
    return _record(Fields(request).integer("offset"), record_topic)


def _send_back(request, record_topic: RecordTopic) -> list[Demand]:
    fields = Fields(request)
    return [Demand.group(fields.text("group")), *_record(fields.integer("offset"), record_topic)]


def _json(body: bytes) -> dict:
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        return {}  # the handler answers a malformed body
    return data if isinstance(data, dict) else {}


def _heartbeat(request, _record_topic) -> list[Demand]:
    """Each consumer's group and subscribed topics (SUB), as RocketMQ checks a heartbeat; a
    producer's heartbeat needs an account only."""
    found = []
    for consumer in _json(request.body).get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        found.append(Demand.group(str(consumer.get("groupName", ""))))
        for subscription in consumer.get("subscriptionDataSet") or []:
            if isinstance(subscription, dict):
                found.append(Demand.topic(str(subscription.get("topic", "")), Perm.SUB))
    return found


def _batch_ack(request, _record_topic) -> list[Demand]:
    """Each ack's group and topic (SUB), as its ACK_MESSAGE would need them."""
    found = []
    for ack in _json(request.body).get("acks") or []:
        if isinstance(ack, dict):
            found.append(Demand.group(str(ack.get("c", ack.get("consumerGroup", "")))))
            found.append(Demand.topic(str(ack.get("t", ack.get("topic", ""))), Perm.SUB))
    return found


def _locks(request, _record_topic) -> list[Demand]:
    data = _json(request.body)
    found = [Demand.group(str(data.get("consumerGroup", "")))]
    for queue in data.get("mqSet") or []:
        if isinstance(queue, dict):
            found.append(Demand.topic(str(queue.get("topic", "")), Perm.SUB))
    return found


_C = RequestCode
DEMANDS: dict[int, Callable[[RemotingCommand, RecordTopic], list[Demand]]] = {
    # sends
    _C.SEND_MESSAGE: _send, _C.SEND_MESSAGE_V2: _send_v2, _C.SEND_BATCH_MESSAGE: _send_v2,
    _C.END_TRANSACTION: _end_transaction,
    # consumption
    _C.PULL_MESSAGE: _topic_and_group, _C.LITE_PULL_MESSAGE: _topic_and_group,
    _C.POP_MESSAGE: _topic_and_group, _C.ACK_MESSAGE: _topic_and_group, _C.BATCH_ACK_MESSAGE: _batch_ack,
    _C.CHANGE_MESSAGE_INVISIBLETIME: _topic_and_group,
    _C.QUERY_CONSUMER_OFFSET: _topic_and_group, _C.UPDATE_CONSUMER_OFFSET: _topic_and_group,
    _C.CONSUMER_SEND_MSG_BACK: _send_back,
    # a topic's messages and offsets
    _C.GET_MAX_OFFSET: _topic(Perm.SUB), _C.GET_MIN_OFFSET: _topic(Perm.SUB),
    _C.SEARCH_OFFSET_BY_TIMESTAMP: _topic(Perm.SUB), _C.GET_EARLIEST_MSG_STORETIME: _topic(Perm.SUB),
    _C.QUERY_MESSAGE: _topic(Perm.SUB), _C.VIEW_MESSAGE_BY_ID: _view_message,
    # a topic's or a group's own config and stats
    _C.GET_TOPIC_CONFIG: _topic(Perm.PUB | Perm.SUB), _C.GET_TOPIC_STATS_INFO: _topic(Perm.PUB | Perm.SUB),
    _C.GET_CONSUME_STATS: _consume_stats,
    # clients
    _C.HEART_BEAT: _heartbeat, _C.UNREGISTER_CLIENT: _producer_or_consumer, _C.GET_CONSUMER_LIST_BY_GROUP: _group,
    _C.GET_CONSUMER_CONNECTION_LIST: _group,  # RocketMQ 5: GET on the group
    _C.LOCK_BATCH_MQ: _locks, _C.UNLOCK_BATCH_MQ: _locks,
    # the broker's and the cluster's: admins
    _C.UPDATE_AND_CREATE_TOPIC: _admin("create or change topics"),
    _C.DELETE_TOPIC_IN_BROKER: _admin("delete topics"), _C.DELETE_TOPIC_IN_NAMESRV: _admin("delete topics"),
    _C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _admin("create or change groups"),
    _C.DELETE_SUBSCRIPTIONGROUP: _admin("delete groups"),
    _C.GET_ALL_TOPIC_CONFIG: _admin("read every topic's config"),
    _C.GET_BROKER_RUNTIME_INFO: _admin("read the broker's runtime info"),
    _C.QUERY_DATA_VERSION: _admin("read the broker's data version"),
    _C.REGISTER_BROKER: _admin("register brokers"), _C.UNREGISTER_BROKER: _admin("unregister brokers"),
    _C.DELETE_KV_CONFIG: _admin("delete the name server's KV config"),
}
