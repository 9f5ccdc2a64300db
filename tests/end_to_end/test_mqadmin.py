"""RocketMQ's own admin tool, mqadmin (MQAdminStartup of the real RocketMQ's distribution),
against broker_sim's name server and against the real RocketMQ: the commands docs/remoting.md lists,
the same on both, each output checked for what an operator reads in it."""

from __future__ import annotations

import itertools
import re
import time

import orjson
import pytest

from peers.rocketmq import mqadmin
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.wire import broker_address, send, wait_indexed

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


def consumer_heartbeat(conn, group: str, topic: str) -> None:
    """A clustering consumer's heartbeat, as RocketMQ's clients send it: the broker makes the
    group's retry topic, which mqadmin's consumerProgress looks up."""
    data = {"clientID": f"127.0.0.1@{group}", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [],
            "subVersion": 0, "expressionType": "TAG"}]}]}
    assert conn.invoke(RequestCode.HEART_BEAT, {}, orjson.dumps(data)).code == ResponseCode.SUCCESS


def wait_for_route(namesrv: str, topic: str) -> None:
    deadline = time.monotonic() + 30
    with RemotingConnection(namesrv) as conn:
        while conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code != ResponseCode.SUCCESS:
            assert time.monotonic() < deadline, f"{topic} has no route after 30 s"
            time.sleep(0.2)


def test_mqadmin_manages_topics_and_reads_offsets_and_messages(single):
    ns = single.namesrv
    topic, group = f"adm-{single.kind}-{next(_names)}-{int(time.time())}", f"adm-group-{single.kind}-{next(_names)}"
    clusters, created = mqadmin(ns, ("clusterList",), ("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2",
                                                        "-w", "2", "-a", "+queue.type=BatchCQ"))
    assert "broker-a" in clusters
    assert "success" in created and "queue.type=BatchCQ" in created, created
    wait_for_route(ns, topic)
    single.create_group(group)
    address = broker_address(ns, topic)
    with RemotingConnection(address) as conn:
        sent = send(conn, topic, b"operator, look", keys="order-42", queue_id=0)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        wait_indexed(conn, topic, 0, 1)
        consumer_heartbeat(conn, group, topic)
        committed = conn.invoke(RequestCode.UPDATE_CONSUMER_OFFSET,
                                {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 1})
        assert committed.code == ResponseCode.SUCCESS
    wait_for_route(ns, f"%RETRY%{group}")
    listed, status, progress, by_key, by_id, broker, deleted = mqadmin(
        ns, ("topicList",), ("topicStatus", "-t", topic), ("consumerProgress", "-g", group),
        ("queryMsgByKey", "-t", topic, "-k", "order-42"), ("queryMsgById", "-t", topic, "-i", sent.ext_fields["msgId"]),
        ("brokerStatus", "-b", address), ("deleteTopic", "-c", "DefaultCluster", "-t", topic))
    assert topic in listed.split()
    rows = {tuple(line.split()[:4]) for line in status.splitlines()}
    assert {("broker-a", "0", "0", "1"), ("broker-a", "1", "0", "0")} <= rows, status  # broker, queue, min, max
    assert re.search(rf"{re.escape(topic)}\s+broker-a\s+0\s+1\s+1\b", progress), progress  # broker / group offsets
    assert "order-42" in by_key, by_key
    assert "order-42" in by_id and re.search(r"Queue ID:\s+0", by_id), by_id
    assert "brokerVersionDesc" in broker, broker
    assert "success" in deleted, deleted
    deadline = time.monotonic() + 30
    while topic in mqadmin(ns, ("topicList",))[0].split():  # gone from the name server too
        assert time.monotonic() < deadline, f"{topic} is still listed 30 s after its deletion"
        time.sleep(1)
