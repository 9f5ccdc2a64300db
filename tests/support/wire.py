"""Requests as RocketMQ's clients write them, for the remoting door's tests and the official
clients' (tests/broker_sim/doors/remoting/, tests/end_to_end/): a send, a batch, a pull, each a
RemotingConnection call with the header fields RocketMQ's client sends; and where a name server
says a topic's broker is."""

from __future__ import annotations

import itertools
import re
import time

import orjson

from rmq_wire import record as fmt
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode

_uniq = itertools.count(1)


def uniq_key() -> str:
    return f"0A0000010000{next(_uniq):020X}"


def properties_text(properties: dict) -> str:
    return "".join(f"{name}\x01{value}\x02" for name, value in properties.items())


def send(conn: RemotingConnection, topic: str, body: bytes, queue_id: int = 0, tags: str = "", keys: str = "",
         properties: dict | None = None, v2: bool = True, group: str = "g-producer", sys_flag: int = 0):
    props = {"UNIQ_KEY": uniq_key(), "WAIT": "true", **(properties or {})}
    if tags:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = keys
    header = {"producerGroup": group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": int(time.time() * 1000), "flag": 0,
              "properties": properties_text(props), "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}
    if v2:
        short = {v: k for k, v in (("a", "producerGroup"), ("b", "topic"), ("c", "defaultTopic"),
                                   ("d", "defaultTopicQueueNums"), ("e", "queueId"), ("f", "sysFlag"),
                                   ("g", "bornTimestamp"), ("h", "flag"), ("i", "properties"),
                                   ("j", "reconsumeTimes"), ("k", "unitMode"), ("m", "batch"))}
        header = {short[k]: v for k, v in header.items()}
        return conn.invoke(RequestCode.SEND_MESSAGE_V2, header, body)
    return conn.invoke(RequestCode.SEND_MESSAGE, header, body)


def send_batch(conn: RemotingConnection, topic: str, bodies: list, queue_id: int = 0, uniq: bool = True,
               payload: bytes | None = None, sys_flag: int = 0):
    messages = [(b, {"UNIQ_KEY": uniq_key()}, 0) for b in bodies]
    payload = fmt.encode_message_batch(messages) if payload is None else payload
    props = {"UNIQ_KEY": uniq_key(), "WAIT": "true"} if uniq else {"WAIT": "true"}
    header = {"producerGroup": "g-producer", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "queueId": queue_id, "sysFlag": sys_flag, "bornTimestamp": int(time.time() * 1000), "flag": 0,
              "properties": properties_text(props), "reconsumeTimes": 0, "unitMode": "false", "batch": "true"}
    return conn.invoke(RequestCode.SEND_BATCH_MESSAGE, header, payload)


def pull(conn: RemotingConnection, topic: str, queue_id: int, offset: int, max_messages: int = 32,
         group: str = "g-consumer", subscription: str | None = None, suspend_ms: int = 0, commit_offset: int = -1,
         timeout_s: float = 10.0):
    flags = (0x4 if subscription is not None else 0) | (0x2 if suspend_ms else 0) | (0x1 if commit_offset >= 0 else 0)
    header = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
              "maxMsgNums": max_messages, "sysFlag": flags, "commitOffset": max(commit_offset, 0),
              "suspendTimeoutMillis": suspend_ms, "subVersion": 0, "expressionType": "TAG"}
    if subscription is not None:
        header["subscription"] = subscription
    return conn.invoke(RequestCode.PULL_MESSAGE, header, timeout_s=timeout_s)


def pop(conn: RemotingConnection, topic: str, group: str, invisible_ms: int = 60_000, poll_ms: int = 3000,
        max_messages: int = 32):
    """A POP_MESSAGE of every queue of ``topic``, as RocketMQ 5's clients send it."""
    return conn.invoke(RequestCode.POP_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": max_messages,
        "invisibleTime": invisible_ms, "pollTime": poll_ms, "bornTime": int(time.time() * 1000), "initMode": 0,
        "expType": "TAG", "exp": "*", "order": "false"}, timeout_s=poll_ms / 1000 + 10)


def extra_info(answer, queue_id: int, offset: int, broker: str = "broker-a", topic_mark: str = "0") -> str:
    """The POP_CK a RocketMQ client builds for a popped message (ExtraInfoUtil.buildExtraInfo)."""
    head = answer.ext_fields
    start = dict(part.rsplit(" ", 1) for part in head["startOffsetInfo"].split(";"))[f"{topic_mark} {queue_id}"]
    return (f"{start} {head['popTime']} {head['invisibleTime']} {head['reviveQid']} {topic_mark} {broker} {queue_id} "
            f"{offset}")


def wait_indexed(conn: RemotingConnection, topic: str, queue_id: int, count: int, timeout_s: float = 10.0) -> None:
    """Wait until the queue's max offset reaches ``count``: a send returns before its message is
    indexed, as on RocketMQ's broker."""
    deadline = time.monotonic() + timeout_s
    head = {"topic": topic, "queueId": queue_id}
    while (readable := int(conn.invoke(RequestCode.GET_MAX_OFFSET, head).ext_fields.get("offset", 0))) < count:
        assert time.monotonic() < deadline, f"{topic} queue {queue_id}: {readable} of {count} messages readable"
        time.sleep(0.02)


def records(body: bytes) -> list:
    """(topic, queue offset, sys flag, properties, body) of each record of a pull's body."""
    out, pos = [], 0
    while pos < len(body):
        rec = fmt.decode_record(body, pos)
        out.append((rec.topic, rec.queue_offset, rec.sys_flag, rec.properties, bytes(rec.body)))
        pos += rec.total_size
    return out

def broker_address(namesrv: str, topic: str) -> str:
    with RemotingConnection(namesrv) as conn:
        answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # RocketMQ's name server writes brokerAddrs as fastjson does, {0:"host:port"}: not JSON proper
    route = orjson.loads(re.sub(rb'([{,])(\d+):', rb'\1"\2":', answer.body))
    return route["brokerDatas"][0]["brokerAddrs"]["0"]
