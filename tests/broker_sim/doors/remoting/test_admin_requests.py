"""The remoting door's operator requests (issue 48), as RocketMQ's mqadmin sends them: updateTopic
on a topic that exists (queue count and perm, in routes and topic configs, enforced on sends,
pulls and pops), deleteSubGroup (DELETE_SUBSCRIPTIONGROUP with and without cleanOffset, then
DELETE_TOPIC_IN_BROKER of the group's %RETRY% and %DLQ% topics), consumerConnection
(GET_CONSUMER_CONNECTION_LIST); and what they demand of an account under ACLs."""

from __future__ import annotations

import orjson
import pytest

from broker_sim.acl import Guard
from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.store import QueueType
from rmq_spark import Credentials
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.acl import ACL_FILE, SECRETS
from support.wire import pop, pull, send, wait_indexed


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with Broker(tmp_path_factory.mktemp("remoting-admin"), "127.0.0.1", 0, remoting=RemotingOptions(port=0),
                auto_create_topics=None) as started:
        yield started


@pytest.fixture
def conn(broker):
    with RemotingConnection(broker.remoting.address, language="JAVA") as connection:
        yield connection


def update_topic(conn, topic: str, read: int = 8, write: int = 8, perm: int = 6, attributes: str | None = None):
    """UPDATE_AND_CREATE_TOPIC with mqadmin updateTopic's fields (its defaults: 8 and 8 queues, perm 6)."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read, "writeQueueNums": write,
              "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
    if attributes is not None:
        fields["attributes"] = attributes
    return conn.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


def route(conn, topic: str) -> dict:
    answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    [queue_data] = orjson.loads(answer.body)["queueDatas"]
    return queue_data


def topic_config(conn, topic: str) -> dict:
    return orjson.loads(conn.invoke(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}).body)["topicConfig"]


# --- updateTopic -------------------------------------------------------------------------------------

def test_update_topic_with_mqadmins_defaults_changes_a_topic_that_exists(broker, conn):
    broker.core.create_topic("upd", 8, QueueType.BATCH_CQ)
    answer = update_topic(conn, "upd", perm=4)  # mqadmin updateTopic -t upd -p 4 (no -a: the type stays)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    config = broker.core.topic("upd")
    assert (config.queue_count, config.perm, config.queue_type) == (8, 4, QueueType.BATCH_CQ)
    assert route(conn, "upd") == {"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 8, "perm": 4,
                                  "topicSysFlag": 0}
    shown = topic_config(conn, "upd")
    assert (shown["readQueueNums"], shown["writeQueueNums"], shown["perm"]) == (8, 8, 4)
    table = orjson.loads(conn.invoke(RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert table["upd"]["perm"] == 4
    assert update_topic(conn, "upd", read=4, write=2, perm=6).code == ResponseCode.SUCCESS
    assert (broker.core.topic("upd").queue_count, route(conn, "upd")["perm"]) == (4, 6)  # the larger count
    assert route(conn, "upd")["readQueueNums"] == 4


def test_update_topic_creates_a_topic_with_its_perm_and_refuses_what_broker_sim_cannot_keep(broker, conn):
    assert update_topic(conn, "made-wo", read=2, write=2, perm=2).code == ResponseCode.SUCCESS
    made = broker.core.topic("made-wo")
    assert (made.queue_count, made.perm, made.queue_type) == (2, 2, QueueType.SIMPLE_CQ)
    retyped = update_topic(conn, "made-wo", 2, 2, 6, attributes="+queue.type=BatchCQ")
    assert retyped.code == ResponseCode.INVALID_PARAMETER
    assert "attempt to update an unchangeable attribute. key: queue.type" in retyped.remark
    for perm in (0, 1, 8):
        refused = update_topic(conn, "made-wo", 2, 2, perm)
        assert refused.code == ResponseCode.INVALID_PARAMETER and f"perm {perm}" in refused.remark
    assert update_topic(conn, "made-wo", 2, 2, 7).code == ResponseCode.SUCCESS  # PermName's inherit bit: ignored
    assert broker.core.topic("made-wo").perm == 6
    system = update_topic(conn, broker.core.ensure_retry_topic("g-upd"), 1, 1, 4)
    assert system.code == ResponseCode.INVALID_PARAMETER and "cannot update topic '%RETRY%g-upd'" in system.remark
    assert "cannot create topic" in update_topic(conn, "%DLQ%g-upd", 1, 1, 4).remark


def test_perm_refusals_are_rocketmqs_no_permission(broker, conn):
    broker.core.create_topic("ro", 1, QueueType.SIMPLE_CQ)
    assert send(conn, "ro", b"before").code == ResponseCode.SUCCESS
    update_topic(conn, "ro", 1, 1, perm=4)
    refused = send(conn, "ro", b"after")
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark.startswith("the topic[ro] sending message is forbidden")
    wait_indexed(conn, "ro", 0, 1)
    assert pull(conn, "ro", 0, 0).code == ResponseCode.SUCCESS
    update_topic(conn, "ro", 1, 1, perm=2)
    assert send(conn, "ro", b"after").code == ResponseCode.SUCCESS
    pulled = pull(conn, "ro", 0, 0)
    assert pulled.code == ResponseCode.NO_PERMISSION and pulled.remark.startswith(
        "the topic[ro] pulling message is forbidden")
    popped = pop(conn, "ro", "pop-group", poll_ms=0)
    assert popped.code == ResponseCode.NO_PERMISSION and popped.remark.startswith(
        "the topic[ro] peeking message is forbidden")


def test_fewer_queues_leave_routes_and_requests(broker, conn):
    broker.core.create_topic("shrink", 4, QueueType.SIMPLE_CQ)
    assert send(conn, "shrink", b"q3", queue_id=3).code == ResponseCode.SUCCESS
    assert update_topic(conn, "shrink", 2, 2).code == ResponseCode.SUCCESS
    assert (route(conn, "shrink")["writeQueueNums"], topic_config(conn, "shrink")["readQueueNums"]) == (2, 2)
    hidden = conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "shrink", "queueId": 3})
    assert hidden.code == ResponseCode.SYSTEM_ERROR and "queueId[3] is illegal" in hidden.remark
    assert send(conn, "shrink", b"x", queue_id=3).code == ResponseCode.SYSTEM_ERROR
    assert update_topic(conn, "shrink", 4, 4).code == ResponseCode.SUCCESS
    assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "shrink", "queueId": 3}).ext_fields["offset"] == "1"


# --- deleteSubGroup ----------------------------------------------------------------------------------

def committed(conn, group: str, topic: str) -> int | None:
    answer = conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0,
                                                             "setZeroIfNotFound": "false"})
    return int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else None


def test_delete_subscription_group_forgets_settings_and_with_clean_offset_the_offsets(broker, conn):
    topic = "sub-topic"
    broker.core.create_topic(topic, 1, QueueType.SIMPLE_CQ)
    send(conn, topic, b"m")
    wait_indexed(conn, topic, 0, 1)
    for group in ("keeps", "cleans"):
        conn.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(
            {"groupName": group, "consumeMessageOrderly": True}))
        assert conn.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": 0,
                                                                "commitOffset": 1}).code == ResponseCode.SUCCESS
        assert broker.core.group_orderly(group) and committed(conn, group, topic) == 1

    kept = conn.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "keeps"})  # mqadmin deleteSubGroup -g
    assert kept.code == ResponseCode.SUCCESS
    assert not broker.core.group_orderly("keeps") and committed(conn, "keeps", topic) == 1
    cleaned = conn.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "cleans", "cleanOffset": "true"})
    assert cleaned.code == ResponseCode.SUCCESS
    assert not broker.core.group_orderly("cleans") and committed(conn, "cleans", topic) is None
    unknown = conn.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "never-was", "cleanOffset": "true"})
    assert unknown.code == ResponseCode.SUCCESS  # as RocketMQ's broker answers


def test_the_groups_retry_and_dead_letter_topics_are_deleted_as_mqadmin_asks(broker, conn):
    """mqadmin deleteSubGroup -c: DELETE_TOPIC_IN_BROKER of %RETRY%group and %DLQ%group."""
    broker.core.ensure_retry_topic("gone")
    broker.core.create_topic("dlq-source", 1, QueueType.SIMPLE_CQ)
    sent = send(conn, "dlq-source", b"dead")
    offset = int(sent.ext_fields["msgId"][-16:], 16)
    assert broker.core.send_back("gone", offset, -1, None) == "%DLQ%gone"  # a send-back past the maximum
    for name in ("%RETRY%gone", "%DLQ%gone"):
        assert conn.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name}).code == ResponseCode.SUCCESS
        assert broker.core.find_topic(name) is None
        assert conn.invoke(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name}).code == ResponseCode.SUCCESS


# --- consumerConnection ------------------------------------------------------------------------------

HEARTBEAT_CONSUMER = {"groupName": "conn-group", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                      "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                      "subscriptionDataSet": [{"classFilterMode": False, "topic": "sub-topic", "subString": "TagA",
                                               "tagsSet": ["TagA"], "codeSet": [2598919], "subVersion": 1700000000000,
                                               "expressionType": "TAG"}]}


def connections(conn, group: str = "conn-group"):
    return conn.invoke(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})


def test_consumer_connections_of_a_group_as_rocketmq_lists_them(broker, conn):
    offline = connections(conn)
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == "the consumer group[conn-group] not online"
    heartbeat = {"clientID": "10.0.0.1@1234", "producerDataSet": [], "consumerDataSet": [HEARTBEAT_CONSUMER]}
    assert conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)).code == ResponseCode.SUCCESS
    with RemotingConnection(broker.remoting.address, language="CPP") as other:
        other.invoke(RequestCode.HEART_BEAT, body=orjson.dumps({**heartbeat, "clientID": "10.0.0.2@99"}))
        answer = connections(conn)
        assert answer.code == ResponseCode.SUCCESS
        body = orjson.loads(answer.body)
        host, port = conn._socket.getsockname()[:2]
        assert body["connectionSet"][0] == {"clientId": "10.0.0.1@1234", "clientAddr": f"{host}:{port}",
                                            "language": "JAVA", "version": 0}
        assert [(c["clientId"], c["language"]) for c in body["connectionSet"]] == [("10.0.0.1@1234", "JAVA"),
                                                                                   ("10.0.0.2@99", "CPP")]
        assert body["subscriptionTable"] == {"sub-topic": HEARTBEAT_CONSUMER["subscriptionDataSet"][0]}
        assert (body["consumeType"], body["messageModel"], body["consumeFromWhere"]) == (
            "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    conn.invoke(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.1@1234", "consumerGroup": "conn-group"})
    assert connections(conn).code == ResponseCode.CONSUMER_NOT_ONLINE  # the other left with its connection


# --- ACLs --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("acl-remoting-admin")
    (home / "plain_acl.yml").write_text(ACL_FILE)
    with Broker(home / "data", "127.0.0.1", 0, remoting=RemotingOptions(port=0), auto_create_topics=None,
                acl=Guard(home / "plain_acl.yml")) as started:
        started.core.create_topic("orders", 1, QueueType.SIMPLE_CQ)
        yield started


def signed(broker, access_key: str) -> RemotingConnection:
    return RemotingConnection(broker.remoting.address, credentials=Credentials(access_key, SECRETS[access_key]))


def test_deleting_groups_is_for_admins_and_a_groups_connections_for_its_subscribers(acl_broker):
    with signed(acl_broker, "reader") as reader:  # SUB on group billing
        refused = reader.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "billing"})
        assert refused.code == ResponseCode.NO_PERMISSION and "admin" in refused.remark
        assert connections(reader, "billing").code == ResponseCode.CONSUMER_NOT_ONLINE
        other = connections(reader, "payroll")
        assert other.code == ResponseCode.NO_PERMISSION and "group 'payroll'" in other.remark
        refused = update_topic(reader, "orders", 1, 1, 4)
        assert refused.code == ResponseCode.NO_PERMISSION
    with signed(acl_broker, "ops") as ops:
        assert ops.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "billing"}).code == ResponseCode.SUCCESS
        assert update_topic(ops, "orders", 1, 1, 4).code == ResponseCode.SUCCESS
    assert acl_broker.core.topic("orders").perm == 4
