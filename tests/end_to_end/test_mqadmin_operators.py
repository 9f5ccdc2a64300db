"""RocketMQ's mqadmin as an operator runs it (issue 48), against broker_sim and the real RocketMQ:
updateTopic changing a topic that exists (its perm with -p, its queue count by mqadmin's
defaults), consumerConnection listing a group's consumers, deleteSubGroup -c with -r true
forgetting the group and deleting its %RETRY% and %DLQ% topics."""

from __future__ import annotations

import itertools
import time

import orjson
import pytest

from peers.rocketmq import mqadmin
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode, fastjson
from support.wire import broker_address

_names = itertools.count()


@pytest.fixture(autouse=True)
def _java(require_java_peers):
    """mqadmin is a Java program of the real RocketMQ's distribution."""


@pytest.fixture(params=["broker_sim", "rocketmq"])
def single(request):
    if request.param == "rocketmq":
        from support.remoting_targets import RocketMQTarget
        return RocketMQTarget(request.getfixturevalue("rocketmq"))
    return request.getfixturevalue("broker_sim_remoting")


def unique(single, what: str) -> str:
    return f"{what}-{single.kind}-{next(_names)}-{int(time.time())}"


def route(namesrv: str, topic: str, wanted=lambda route: True, timeout_s: float = 30) -> dict | None:
    """The topic's route once ``wanted(route)``; None if it has none then."""
    deadline = time.monotonic() + timeout_s
    with RemotingConnection(namesrv) as conn:
        while True:
            answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            found = fastjson.loads(answer.body) if answer.code == ResponseCode.SUCCESS else None
            if (found is not None and wanted(found)) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def test_update_topic_changes_the_perm_and_count_of_a_topic_that_exists(single):
    ns, topic = single.namesrv, unique(single, "perm")
    [created] = mqadmin(ns, ("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2"))
    assert "success" in created, created
    assert route(ns, topic)["queueDatas"][0]["writeQueueNums"] == 2
    [updated] = mqadmin(ns, ("updateTopic", "-c", "DefaultCluster", "-t", topic, "-p", "4"))  # -r / -w: 8
    assert "success" in updated and "Exception" not in updated, updated
    [queue_data] = route(ns, topic, lambda r: r["queueDatas"][0]["perm"] == 4)["queueDatas"]
    assert (queue_data["perm"], queue_data["readQueueNums"], queue_data["writeQueueNums"]) == (4, 8, 8)
    [shown] = mqadmin(ns, ("topicRoute", "-t", topic))
    assert '"perm":4' in shown.replace(" ", ""), shown
    with RemotingConnection(broker_address(ns, topic)) as conn:
        body = fastjson.loads(conn.invoke(RequestCode.GET_TOPIC_CONFIG, {"topic": topic}).body)
    config = body.get("topicConfig", body)  # RocketMQ's is the config itself, with its mappingDetail
    assert (config["perm"], config["readQueueNums"]) == (4, 8)


def gone(namesrv: str, topic: str, timeout_s: float = 30) -> bool:
    """Whether the topic's route is gone within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    with RemotingConnection(namesrv) as conn:
        while conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == ResponseCode.SUCCESS:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
    return True


def consumer_heartbeat(conn, group: str, topic: str) -> dict:
    consumer = {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
                    "topic": topic, "subString": "TagA || TagB", "classFilterMode": False, "tagsSet": ["TagA", "TagB"],
                    "codeSet": [2598919, 2598920], "subVersion": int(time.time() * 1000), "expressionType": "TAG"}]}
    data = {"clientID": f"127.0.0.1@{group}", "producerDataSet": [], "consumerDataSet": [consumer]}
    assert conn.invoke(RequestCode.HEART_BEAT, {}, orjson.dumps(data)).code == ResponseCode.SUCCESS
    return data


def test_consumer_connection_lists_a_groups_consumers(single):
    ns, topic, group = single.namesrv, unique(single, "conn"), unique(single, "conn-group")
    mqadmin(ns, ("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    single.create_group(group)
    route(ns, topic)
    with RemotingConnection(broker_address(ns, topic), language="JAVA") as conn:
        consumer_heartbeat(conn, group, topic)
        assert route(ns, f"%RETRY%{group}") is not None
        [listed] = mqadmin(ns, ("consumerConnection", "-g", group))
        host, port = conn._socket.getsockname()[:2]
    assert "Exception" not in listed, listed
    [client_line] = [line for line in listed.splitlines() if line.startswith(f"127.0.0.1@{group}")]
    assert client_line.split()[1:3] == [f"{host}:{port}", "JAVA"], listed
    assert any(line.split() == [topic, "TagA", "||", "TagB"] for line in listed.splitlines()), listed
    for line in ("ConsumeType: CONSUME_PASSIVELY", "MessageModel: CLUSTERING",
                 "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET"):
        assert line in listed, listed


def test_delete_sub_group_forgets_the_group_and_its_retry_and_dead_letter_topics(single):
    ns, topic, group = single.namesrv, unique(single, "del"), unique(single, "del-group")
    mqadmin(ns, ("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "1", "-w", "1"))
    single.create_group(group)
    route(ns, topic)
    address = broker_address(ns, topic)
    with RemotingConnection(address) as conn:
        consumer_heartbeat(conn, group, topic)  # its retry topic
        conn.invoke(RequestCode.UNREGISTER_CLIENT, {"clientID": f"127.0.0.1@{group}", "consumerGroup": group})
    assert route(ns, f"%RETRY%{group}") is not None
    [deleted] = mqadmin(ns, ("deleteSubGroup", "-c", "DefaultCluster", "-g", group, "-r", "true"))
    assert f"delete subscription group [{group}] from broker [{address}] in cluster [DefaultCluster] success" \
        in deleted, deleted
    assert "Exception" not in deleted, deleted  # the retry and dead-letter topics' deletions too
    assert gone(ns, f"%RETRY%{group}"), "the retry topic is still routed"
    [listed] = mqadmin(ns, ("topicList",))
    assert f"%RETRY%{group}" not in listed.split(), listed
