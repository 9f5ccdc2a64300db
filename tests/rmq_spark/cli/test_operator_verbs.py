"""rmq-admin as an operator's mqadmin, through name servers, on every remoting target: broker_sim
(one broker and a two-broker cluster) and the real RocketMQ 5.5.0 and 4.9.7 (their own brokers
answer each request; tests/support/remoting_targets.py). Each verb is what an operator of a
RocketMQ cluster reaches for first (docs/operations.md maps them to mqadmin's and Kafka's)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import orjson
import pytest

from rmq_spark import Admin, Message, Producer
from rmq_spark.cli import main
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.remoting_targets import with_rocketmq4
from support.waits import wait_until


def run_ns(capsys, target, *args):
    code = main(["--name-server", target.namesrv, *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(capsys, target, *args) -> list[dict]:
    code, out, err = run_ns(capsys, target, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def unique(name: str) -> str:
    return f"ops-{name}-{time.time_ns()}"


def sent_count(target, topic: str) -> int:
    with Admin(name_server=target.namesrv) as admin:
        return sum(q.max_offset - q.min_offset for q in admin.offsets([topic])[topic])


@with_rocketmq4()
def test_cluster_list_and_broker_status(capsys, target):
    brokers = rows(capsys, target, "cluster", "list")
    with Admin(name_server=target.namesrv) as admin:
        masters = {b.name: b.address for b in admin.brokers()}
    assert {(r["name"], r["address"]) for r in brokers} == set(masters.items())
    assert all(r["cluster"] for r in brokers)
    status = {r["name"]: r["value"] for r in rows(capsys, target, "broker", "status", brokers[0]["name"])}
    assert status  # the broker's own figures, as it reports them
    if target.kind.startswith("rocketmq"):
        assert "brokerVersionDesc" in status and "msgPutTotalTodayNow" in status
    code, _, err = run_ns(capsys, target, "broker", "status", "no-such-broker")
    assert code == 1 and "no broker 'no-such-broker'" in err


@with_rocketmq4()
def test_topic_route_update_and_permission(capsys, target, monkeypatch):
    topic = unique("update")
    target.create_topic(topic, 2, batch_cq=False)
    route = rows(capsys, target, "topic", "route", topic)
    assert {(r["read_queues"], r["write_queues"], r["perm"]) for r in route} == {(2, 2, "rw")}
    [updated] = rows(capsys, target, "topic", "update", topic, "--queues", "3")
    assert updated["queues"] == 3 * len(route) and updated["perm"] == "rw"
    assert {(r["read_queues"], r["write_queues"]) for r in rows(capsys, target, "topic", "route", topic)} == {(3, 3)}
    [read_only] = rows(capsys, target, "topic", "update", topic, "--perm", "r")
    assert read_only["perm"] == "r"
    assert {r["perm"] for r in rows(capsys, target, "topic", "route", topic)} == {"r"}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"refused\n")))
    code, _, err = run_ns(capsys, target, "message", "send", topic)
    assert code == 1 and err.startswith("rmq-admin: ") and len(err.strip().splitlines()) == 1  # refused, one line
    rows(capsys, target, "topic", "update", topic, "--perm", "rw")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"taken\n")))
    assert [r["messages"] for r in rows(capsys, target, "message", "send", topic)] == [1]
    code, _, err = run_ns(capsys, target, "topic", "update", topic)
    assert code == 1 and "nothing to change" in err


@with_rocketmq4()
def test_send_to_a_queue(capsys, target, monkeypatch):
    topic = unique("queue")
    target.create_topic(topic, 4, batch_cq=False)
    broker = rows(capsys, target, "topic", "route", topic)[-1]["broker"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\nc\n")))
    sent = rows(capsys, target, "message", "send", topic, "--queue", "2", "--broker", broker)
    assert [(r.get("broker", broker), r["queue_id"], r["messages"]) for r in sent] == [(broker, 2, 3)]


def _heartbeat(group: str, topic: str, client_id: str) -> bytes:
    return orjson.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [],
            "subVersion": 0, "expressionType": "TAG"}]}]})


@with_rocketmq4()
def test_group_connections_and_delete(capsys, target):
    topic, group = unique("groups"), unique("group")
    target.create_topic(topic, 1, batch_cq=False)
    with Admin(name_server=target.namesrv) as admin:
        admin.commit_group_offsets(group, {(topic, admin.topic_route(topic)[0].broker, 0): 0})
        address = admin.topic_route(topic)[0].address
    with RemotingConnection(address) as consumer:  # a consumer of the group, as RocketMQ's clients say so
        answer = consumer.invoke(RequestCode.HEART_BEAT, body=_heartbeat(group, topic, "ops-consumer@1"))
        assert answer.code == ResponseCode.SUCCESS
        connected = rows(capsys, target, "group", "connections", group)
        assert [r["client_id"] for r in connected] == ["ops-consumer@1"]
        assert connected[0]["subscriptions"] == f"{topic}:*"
        code, _, err = run_ns(capsys, target, "group", "delete", group)
        assert code == 1 and f"group '{group}' has live consumers" in err  # as Kafka refuses a group not empty
    wait_until(lambda: not rows(capsys, target, "group", "connections", group), "the consumer gone")
    assert rows(capsys, target, "group", "delete", group) == [{"group": group, "deleted": True}]
    assert rows(capsys, target, "group", "offsets", group) == []


@with_rocketmq4()
def test_reset_offsets_is_a_plan_unless_executed_by_shift_and_duration(capsys, target, monkeypatch):
    topic, group = unique("reset"), unique("resetg")
    target.create_topic(topic, 1, batch_cq=False)
    broker = rows(capsys, target, "topic", "route", topic)[0]["broker"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"".join(b"m%d\n" % i for i in range(6)))))
    rows(capsys, target, "message", "send", topic, "--queue", "0", "--broker", broker)  # all to one queue
    wait_until(lambda: sent_count(target, topic) == 6, "6 messages readable")

    def of(found: list[dict], column: str) -> list:  # the queue sent to (a cluster's other broker's is empty)
        return [r[column] for r in found if r.get("broker", broker) == broker]

    code, out, err = run_ns(capsys, target, "--json", "group", "reset-offsets", group, "--topic", topic,
                            "--to-latest")
    assert code == 0 and of(json.loads(out), "new_offset") == [6] and "add --execute" in err
    assert rows(capsys, target, "group", "offsets", group) == []  # a plan: nothing committed
    rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    assert of(rows(capsys, target, "group", "offsets", group), "offset") == [6]
    plan = rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--shift-by", "-4")
    assert list(zip(of(plan, "offset"), of(plan, "new_offset"), of(plan, "committed"))) == [(6, 2, False)]
    rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--shift-by", "-4", "--execute")
    assert of(rows(capsys, target, "group", "offsets", group), "offset") == [2]
    rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--shift-by", "-40", "--execute")
    assert of(rows(capsys, target, "group", "offsets", group), "offset") == [0]  # kept within the queue
    rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--by-duration", "1d", "--execute")
    assert of(rows(capsys, target, "group", "offsets", group), "offset") == [0]  # all stored in the day
    rows(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--by-duration", "PT0S", "--execute")
    assert of(rows(capsys, target, "group", "offsets", group), "offset") == [6]  # none stored from now on


@with_rocketmq4()
def test_find_messages_by_key_and_get_them_by_id(capsys, target, monkeypatch):
    topic = unique("find")
    target.create_topic(topic, 2, batch_cq=False)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"order-1|first\norder-2|second\norder-1|third\n")))
    rows(capsys, target, "message", "send", topic, "--key-separator", "|")
    found = wait_until(lambda: (lambda r: len(r) == 2 and r)(rows(capsys, target, "message", "find", topic, "--key",
                                                                  "order-1")),
                       "both messages of key order-1 found (the broker indexes keys as it stores)")
    assert sorted(r["body"] for r in found) == ["first", "third"] and {r["keys"] for r in found} == {"order-1"}
    [by_offset_id] = rows(capsys, target, "message", "get", found[0]["message_id"])
    assert (by_offset_id["body"], by_offset_id["unique_key"]) == (found[0]["body"], found[0]["unique_key"])
    assert "UNIQ_KEY" in by_offset_id["properties"]
    [by_unique_key] = rows(capsys, target, "message", "get", found[1]["unique_key"], "--topic", topic)
    assert by_unique_key["body"] == found[1]["body"]
    assert rows(capsys, target, "message", "find", topic, "--key", "order-9") == []
    code, _, err = run_ns(capsys, target, "message", "get", "not-an-id")
    assert code == 1 and "32 hex characters" in err
    code, _, err = run_ns(capsys, target, "message", "get", "0" * 32 + "", "--topic", topic)
    assert code == 1 and "holds no message with id" in err


@with_rocketmq4()
def test_tail_prints_what_is_stored_and_then_what_arrives(target):
    topic = unique("tail")
    target.create_topic(topic, 2, batch_cq=False)
    with Producer(name_server=target.namesrv) as producer:
        for body in (b"before-1", b"before-2"):
            producer.send(Message(topic, body))
    tail = subprocess.Popen([sys.executable, "-m", "rmq_spark.cli", "--name-server", target.namesrv, "message",
                             "tail", topic, "--from-beginning", "--max-messages", "4", "--idle-timeout-ms", "60000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = [tail.stdout.readline().strip() for _ in range(2)]  # what was stored before, read at once
        with Producer(name_server=target.namesrv) as producer:
            for body in (b"after-1", b"after-2"):
                producer.send(Message(topic, body))
        out, err = tail.communicate(timeout=60)  # the long poll wakes for the new ones, and the tail ends at 4
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert sorted(first) == ["before-1", "before-2"] and sorted(out.split()) == ["after-1", "after-2"]


def test_json_into_a_pipe_its_reader_closed_ends_quietly(broker_sim_remoting):
    """`rmq-admin ... --json | head`: the reader goes, and rmq-admin ends with no traceback."""
    target = broker_sim_remoting
    topic = unique("pipe")
    target.create_topic(topic, 1, batch_cq=False)
    with Producer(name_server=target.namesrv) as producer:
        producer.send_batch([Message(topic, b"x" * 2000)] * 300)
    wait_until(lambda: sent_count(target, topic) == 300, "300 messages readable")
    reader = subprocess.Popen([sys.executable, "-m", "rmq_spark.cli", "--name-server", target.namesrv, "--json",
                               "message", "peek", topic, "--count", "300"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert reader.stdout.read(10)  # 600 KB to print, far past a pipe's buffer: the writer is still at it
        reader.stdout.close()  # as head does once it has its lines
        _, err = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert reader.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err


@pytest.mark.parametrize("duration, ms", [("PT1H30M", 5_400_000), ("P1DT2H", 93_600_000), ("90s", 90_000),
                                          ("15m", 900_000), ("2d", 172_800_000), ("PT0.5S", 500)])
def test_durations_read_as_kafka_s_and_short(duration, ms):
    from rmq_spark.cli.arguments import duration_ms

    assert duration_ms(duration) == ms


def test_a_duration_that_is_none_fails_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["group", "reset-offsets", "g", "--topic", "t", "--by-duration", "an hour"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "is not a duration" in err and len(err.strip().splitlines()) == 1


# --- the same verbs through broker_sim's own door (--endpoint) -------------------------------------

def run_ep(capsys, endpoint, *args):
    code = main(["--endpoint", endpoint, *args])
    out, err = capsys.readouterr()
    return code, out, err


def ep_rows(capsys, endpoint, *args) -> list[dict]:
    code, out, err = run_ep(capsys, endpoint, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_cluster_and_status_through_our_door(capsys, endpoint):
    [broker] = ep_rows(capsys, endpoint, "cluster", "list")
    assert broker["address"] == endpoint and broker["name"] == "broker-a"  # the broker's name, as routes say it
    status = {r["name"]: r["value"] for r in ep_rows(capsys, endpoint, "broker", "status")}
    assert {"topics", "commitlog_max_offset", "dispatch_lag_bytes"} <= set(status)


def test_topic_update_route_and_permission_through_our_door(capsys, endpoint, topic_name, monkeypatch):
    ep_rows(capsys, endpoint, "topic", "create", topic_name, "--queues", "2", "--type", "SimpleCQ")
    assert [(r["read_queues"], r["perm"]) for r in ep_rows(capsys, endpoint, "topic", "route", topic_name)] == [
        (2, "rw")]
    [updated] = ep_rows(capsys, endpoint, "topic", "update", topic_name, "--queues", "4", "--perm", "r")
    assert (updated["queues"], updated["perm"]) == (4, "r")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"refused\n")))
    code, _, err = run_ep(capsys, endpoint, "message", "send", topic_name)
    assert code == 1 and "takes no sends" in err and "--perm rw" in err
    ep_rows(capsys, endpoint, "topic", "update", topic_name, "--perm", "rw")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"taken\n")))
    assert [r["queue_id"] for r in ep_rows(capsys, endpoint, "message", "send", topic_name, "--queue", "3")] == [3]


def test_group_delete_and_connections_through_our_door(capsys, endpoint, topic_name):
    from rmq_spark import PopConsumer

    ep_rows(capsys, endpoint, "topic", "create", topic_name, "--queues", "1")
    group = f"{topic_name}-group"
    with Admin(endpoint) as admin:
        admin.commit_group_offsets(group, {(topic_name, 0): 0})
    with PopConsumer(endpoint, group, topic_name, poll_ms=0) as consumer:
        consumer.receive()
        assert len(ep_rows(capsys, endpoint, "group", "connections", group)) == 1
        code, _, err = run_ep(capsys, endpoint, "group", "delete", group)
        assert code == 1 and "has live consumers" in err
    other = f"{topic_name}-idle"
    with Admin(endpoint) as admin:
        admin.commit_group_offsets(other, {(topic_name, 0): 0})
    assert ep_rows(capsys, endpoint, "group", "delete", other) == [{"group": other, "deleted": True}]
    assert ep_rows(capsys, endpoint, "group", "offsets", other) == []
    code, _, err = run_ep(capsys, endpoint, "group", "delete", other)
    assert code == 1 and "no broker knows group" in err


def test_find_and_get_through_our_door(capsys, endpoint, topic_name, monkeypatch):
    ep_rows(capsys, endpoint, "topic", "create", topic_name, "--queues", "2", "--type", "SimpleCQ")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"k1|one\nk2|two\nk1|three\n")))
    ep_rows(capsys, endpoint, "message", "send", topic_name, "--key-separator", "|")
    found = wait_until(lambda: (lambda r: len(r) == 2 and r)(ep_rows(capsys, endpoint, "message", "find", topic_name,
                                                                     "--key", "k1")), "both k1 messages found")
    assert sorted(r["body"] for r in found) == ["one", "three"]
    [again] = ep_rows(capsys, endpoint, "message", "get", found[0]["message_id"])  # as a send's answer names it
    assert again["body"] == found[0]["body"]


def test_a_message_sent_through_a_rocketmq_door_is_found_by_its_producer_s_id_through_ours(capsys,
                                                                                         broker_sim_remoting):
    target = broker_sim_remoting
    topic = unique("uniq")
    target.create_topic(topic, 1, batch_cq=False)
    with Producer(name_server=target.namesrv) as producer:  # RocketMQ's sends: each message carries its UNIQ_KEY
        producer.send(Message(topic, b"given", keys="k"))
    [sent] = wait_until(lambda: rows(capsys, target, "message", "find", topic, "--key", "k"), "the message found")
    [by_id] = ep_rows(capsys, target.endpoint, "message", "get", sent["unique_key"], "--topic", topic)
    assert by_id["body"] == "given" and by_id["unique_key"] == sent["unique_key"] != ""
