"""The same raw remoting requests, as RocketMQ's clients write them, to broker_sim's broker and
to the real RocketMQ broker (found through each one's name server): the response codes and
header fields a client acts on must agree. Differences found are fixed, or listed in
docs/remoting.md as deliberate."""

from __future__ import annotations

import itertools
import socket
import struct
import time

import pytest

from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.wire import broker_address, extra_info, pop, pull, records, send, wait_indexed

# broker_sim's answers are compared with the real broker's, kept in this module between its tests:
# all of them run in one worker, the one that has the real peers (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("jvm")

_names = itertools.count()
_results: dict[str, dict] = {}
_pop_results: dict[str, dict] = {}
POP_HEADER = {"popTime", "invisibleTime", "reviveQid", "restNum"}  # what RocketMQ's clients decode on every answer


@pytest.fixture(params=["broker_sim", "rocketmq"])
def single(request, target_kinds):
    return target_kinds(request.param)


@pytest.fixture
def target_kinds(request):
    def pick(kind):
        if kind == "rocketmq":
            from support.remoting_targets import RocketMQTarget
            return RocketMQTarget(request.getfixturevalue("rocketmq"))
        return request.getfixturevalue("broker_sim_remoting")
    return pick



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


def pop_scenario(conn, topic: str, group: str) -> dict:
    """Pop, ack, change invisible time, the revived message popped again, an empty pop."""
    out = {}
    send(conn, topic, b"a")
    send(conn, topic, b"b")
    wait_indexed(conn, topic, 0, 2)
    first = pop(conn, topic, group, poll_ms=1000)
    out["pop"] = (first.code, [(r[1], r[4]) for r in records(first.body)], POP_HEADER <= set(first.ext_fields),
                  first.ext_fields["startOffsetInfo"], first.ext_fields["msgOffsetInfo"])
    acked = {"consumerGroup": group, "topic": topic, "queueId": 0, "offset": 0, "extraInfo": extra_info(first, 0, 0)}
    out["ack"] = conn.invoke(RequestCode.ACK_MESSAGE, acked).code
    later = {"consumerGroup": group, "topic": topic, "queueId": 0, "offset": 1, "extraInfo": extra_info(first, 0, 1)}
    changed = conn.invoke(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**later, "invisibleTime": 2000})
    out["change invisible time"] = (changed.code, sorted(changed.ext_fields), changed.ext_fields["invisibleTime"])
    deadline, again = time.monotonic() + 60, None
    while time.monotonic() < deadline:  # the real broker's revive takes a few seconds more than the 2 s
        again = pop(conn, topic, group, poll_ms=1000)
        if again.code == ResponseCode.SUCCESS:
            break
    out["revived"] = (again.code, [r[4] for r in records(again.body)])
    empty = pop(conn, topic, group, poll_ms=300)
    out["empty pop"] = (empty.code, POP_HEADER <= set(empty.ext_fields))
    out["acked again"] = conn.invoke(RequestCode.ACK_MESSAGE, acked).code
    return out


def test_pop_over_remoting_answers_as_the_real_broker_does(single):
    topic = f"pop-{single.kind}-{next(_names)}-{int(time.time())}"
    group = f"{topic}-group"
    single.create_topic(topic, 1, batch_cq=False)
    single.create_group(group)
    with RemotingConnection(broker_address(single.namesrv, topic)) as conn:
        seen = pop_scenario(conn, topic, group)
    assert seen["pop"] == (ResponseCode.SUCCESS, [(0, b"a"), (1, b"b")], True, "0 0 0", "0 0 0,1")
    assert seen["revived"] == (ResponseCode.SUCCESS, [b"b"])
    assert seen["empty pop"] == (ResponseCode.POLLING_TIMEOUT, True)
    # A deliberate difference: an ack of a message no longer in flight is NO_MESSAGE here (the
    # clients' AckStatus.NO_EXIST); RocketMQ's broker answers SUCCESS and does nothing.
    assert seen.pop("acked again") == (ResponseCode.NO_MESSAGE if single.kind == "broker_sim" else ResponseCode.SUCCESS)
    _pop_results[single.kind] = seen
    if len(_pop_results) == 2:
        assert _pop_results["broker_sim"] == _pop_results["rocketmq"]


def raw_frame(header: bytes, serialize_type: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header), (serialize_type << 24) | len(header)) + header


def answer_or_close(address: str, frame: bytes) -> bytes:
    """What the broker sends back for ``frame`` before it closes the connection or 3 s pass."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=3) as raw:
        raw.sendall(frame)
        try:
            return raw.recv(65536)
        except TimeoutError:
            return b"(nothing within 3 s)"


def test_bad_requests_leave_the_broker_up_on_both(single):
    topic = f"bad-{single.kind}-{next(_names)}-{int(time.time())}"
    single.create_topic(topic, 1, batch_cq=False)
    address = broker_address(single.namesrv, topic)
    with RemotingConnection(address) as conn:
        missing = conn.invoke(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "queueId": 0})
        not_a_number = conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "x"})
    assert (missing.code, not_a_number.code) == (ResponseCode.SYSTEM_ERROR, ResponseCode.SYSTEM_ERROR)
    if single.kind == "broker_sim":  # the remark says what was wrong; RocketMQ's names a NullPointerException
        assert "topic" in missing.remark and "not a number" in not_a_number.remark
    not_json = answer_or_close(address, raw_frame(b"{not json"))
    unknown_type = answer_or_close(address, raw_frame(b'{"code":30,"opaque":7,"flag":0}', serialize_type=5))
    if single.kind == "broker_sim":  # a deliberate difference: a frame that could be cut is answered
        assert b"not valid JSON" in not_json and b"serialization type 5" in unknown_type
    else:  # RocketMQ's broker closes the connection without a word
        assert (not_json, unknown_type) == (b"", b"")
    with RemotingConnection(address) as conn:  # and serves on
        assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}).code == ResponseCode.SUCCESS
