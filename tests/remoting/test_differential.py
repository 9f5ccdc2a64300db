"""The same raw remoting requests, as RocketMQ's clients write them, to broker_sim's broker and
to the real RocketMQ broker (found through each one's name server): the response codes and
header fields a client acts on must agree. Differences found are fixed, or listed in the
README as deliberate."""

from __future__ import annotations

import itertools
import re
import time

import orjson
import pytest

from rmq_spark.protocol.remoting import RemotingConnection, RequestCode, ResponseCode
from wire import pull, records, send, wait_indexed

_names = itertools.count()
_results: dict[str, dict] = {}


@pytest.fixture(params=["broker_sim", "rocketmq"])
def single(request, target_kinds):
    return target_kinds(request.param)


@pytest.fixture
def target_kinds(request):
    def pick(kind):
        if kind == "rocketmq":
            from remoting_targets import RocketMQTarget
            return RocketMQTarget(request.getfixturevalue("rocketmq"))
        return request.getfixturevalue("broker_sim_remoting")
    return pick


def broker_address(namesrv: str, topic: str) -> str:
    with RemotingConnection(namesrv) as conn:
        answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # RocketMQ's name server writes brokerAddrs as fastjson does, {0:"host:port"}: not JSON proper
    route = orjson.loads(re.sub(rb'([{,])(\d+):', rb'\1"\2":', answer.body))
    return route["brokerDatas"][0]["brokerAddrs"]["0"]


def scenario(conn, topic: str, group: str) -> dict:
    """Requests whose answers a client acts on; what came back, by step."""
    out = {}
    out["unknown topic send"] = send(conn, f"{topic}-missing", b"x").code
    for i in range(3):
        send(conn, topic, b"m%d" % i, tags="A" if i != 1 else "B")
    wait_indexed(conn, topic, 0, 3)
    found = pull(conn, topic, 0, 0, subscription="*")
    out["pull from 0"] = (found.code, found.ext_fields["nextBeginOffset"], found.ext_fields["minOffset"],
                          found.ext_fields["maxOffset"], [r[4] for r in records(found.body)])
    at_end = pull(conn, topic, 0, 3, subscription="*")
    out["pull at the end"] = (at_end.code, at_end.ext_fields["nextBeginOffset"])
    past = pull(conn, topic, 0, 10, subscription="*")
    out["pull past the end"] = (past.code, past.ext_fields["nextBeginOffset"])
    filtered = pull(conn, topic, 0, 1, subscription="B")
    out["pull by tag"] = (filtered.code, [r[4] for r in records(filtered.body)])
    head = {"topic": topic, "queueId": 0}
    out["min / max"] = (conn.invoke(RequestCode.GET_MIN_OFFSET, head).ext_fields["offset"],
                        conn.invoke(RequestCode.GET_MAX_OFFSET, head).ext_fields["offset"])
    later = conn.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**head, "timestamp": int(time.time() * 1000) + 60_000})
    out["offset after the last message's time"] = later.ext_fields["offset"]
    query = {"consumerGroup": group, "topic": topic, "queueId": 1, "setZeroIfNotFound": "false"}
    out["group offset never committed"] = conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, query).code
    updated = conn.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {**head, "consumerGroup": group, "commitOffset": 2})
    out["group offset update"] = (updated.code, updated.remark)
    committed = conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {**head, "consumerGroup": group})
    out["group offset committed"] = (committed.code, committed.ext_fields.get("offset"))
    out["unsupported request code"] = conn.invoke(9999, {}).code
    return out


def test_raw_requests_answer_as_the_real_broker_does(single):
    topic = f"raw-{single.kind}-{next(_names)}-{int(time.time())}"
    group = f"{topic}-group"
    single.create_topic(topic, 2, batch_cq=False)
    single.create_group(group)  # RocketMQ refuses offsets of a group it does not know; broker_sim needs none
    with RemotingConnection(broker_address(single.namesrv, topic)) as conn:
        seen = scenario(conn, topic, group)
    assert seen["unknown topic send"] == ResponseCode.TOPIC_NOT_EXIST
    assert seen["pull from 0"] == (ResponseCode.SUCCESS, "3", "0", "3", [b"m0", b"m1", b"m2"])
    assert seen["pull at the end"] == (ResponseCode.PULL_NOT_FOUND, "3")
    assert seen["unsupported request code"] == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    _results[single.kind] = seen
    if len(_results) == 2:
        assert _results["broker_sim"] == _results["rocketmq"]
