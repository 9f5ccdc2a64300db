"""rmq-admin against a real broker: tables for people, JSON for machines, errors on stderr."""

import datetime
import io
import json
import sys
import time
from importlib import metadata

import orjson
import pytest

from rmq_spark import Admin, Message, PopConsumer, Producer
from rmq_spark.cli import main
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from support.sdk import wait_indexed


def run(capsys, endpoint, *args):
    code = main(["--endpoint", endpoint, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_topic_commands(capsys, endpoint, topic_name):
    code, out, _ = run(capsys, endpoint, "topic", "create", topic_name, "--queues", "3", "--type", "SimpleCQ")
    assert code == 0 and topic_name in out and "SimpleCQ" in out
    code, out, _ = run(capsys, endpoint, "topic", "list")
    assert code == 0 and out.splitlines()[0].split() == ["name", "queues", "type"]
    assert any(line.split() == [topic_name, "3", "SimpleCQ"] for line in out.splitlines())
    with Producer(endpoint) as producer:
        producer.send_batch([Message(topic_name, b"m", queue_id=2)] * 4)
    wait_indexed(endpoint, topic_name, 4)
    code, out, _ = run(capsys, endpoint, "--json", "topic", "describe", topic_name)
    assert json.loads(out)[2] == {"queue_id": 2, "min_offset": 0, "max_offset": 4, "messages": 4}
    code, out, _ = run(capsys, endpoint, "topic", "delete", topic_name)
    assert code == 0 and "True" in out


def test_group_offsets_show_lag(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "1")
    with Producer(endpoint) as producer:
        producer.send_batch([Message(topic_name, b"m")] * 10)
    wait_indexed(endpoint, topic_name, 10)
    from rmq_spark import Admin

    with Admin(endpoint) as admin:
        admin.commit_group_offsets("readers", {(topic_name, 0): 4})
    code, out, _ = run(capsys, endpoint, "--json", "group", "offsets", "readers")
    assert code == 0
    assert [r for r in json.loads(out) if r["topic"] == topic_name] == [
        {"group": "readers", "topic": topic_name, "queue_id": 0, "offset": 4, "max_offset": 10, "lag": 6}]


def test_errors_go_to_stderr_with_exit_code_1(capsys, endpoint):
    code, out, err = run(capsys, endpoint, "topic", "describe", "no-such-topic")
    assert code == 1 and out == "" and "'no-such-topic' does not exist" in err


def test_json_is_taken_before_and_after_the_command(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "2")
    _, before, _ = run(capsys, endpoint, "--json", "topic", "describe", topic_name)
    code, after, _ = run(capsys, endpoint, "topic", "describe", topic_name, "--json")
    assert code == 0 and json.loads(after) == json.loads(before) == [
        {"queue_id": q, "min_offset": 0, "max_offset": 0, "messages": 0} for q in (0, 1)]
    _, table, _ = run(capsys, endpoint, "topic", "describe", topic_name)
    assert table.split()[:2] == ["queue_id", "min_offset"]  # without --json in either place: a table


# --- what people expect of an admin CLI (kafka-topics, kafka-consumer-groups, mqadmin) ------------

def test_version_is_the_package_s(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"rmq-admin {metadata.version('rocketmq-batch-spark')}"


@pytest.mark.parametrize("argv, suggestion", [
    (["topic", "lst"], "'list'"), (["tpic", "list"], "'topic'"), (["group", "ofsets", "g"], "'offsets'"),
    (["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--dryrun"], "--dry-run")])
def test_misspelled_commands_get_a_suggestion_in_one_line(capsys, argv, suggestion):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"did you mean {suggestion}?" in err and len(err.strip().splitlines()) == 1


def test_deleting_a_missing_topic_fails_with_a_sentence(capsys, endpoint):
    code, out, err = run(capsys, endpoint, "topic", "delete", "nosuch")
    assert code == 1 and out == "" and "topic 'nosuch' does not exist, so nothing was deleted" in err


def test_group_list_names_the_groups_and_their_live_consumers(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "1")
    with Admin(endpoint) as admin:
        admin.commit_group_offsets(f"{topic_name}-committed", {(topic_name, 0): 0})
    with PopConsumer(endpoint, f"{topic_name}-popping", topic_name, poll_ms=0) as consumer:
        consumer.receive()
        code, out, _ = run(capsys, endpoint, "--json", "group", "list")
    groups = {row["group"]: row for row in json.loads(out)}
    assert code == 0 and groups[f"{topic_name}-committed"]["consumers"] == 0
    assert groups[f"{topic_name}-popping"]["consumers"] == 1


def _stored(endpoint, topic_name, count):
    with Producer(endpoint) as producer:
        sent = [producer.send_batch([Message(topic_name, b"m", queue_id=q)] * count) for q in (0, 1)]
    wait_indexed(endpoint, topic_name, 2 * count)
    return [result for results in sent for result in results]


def test_reset_offsets_to_earliest_latest_offset_and_datetime(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "2")
    first = _stored(endpoint, topic_name, 3)
    second = _stored(endpoint, topic_name, 2)  # offsets 3 and 4 of each queue, stored after the first
    group = f"{topic_name}-readers"

    def offsets():
        _, out, _ = run(capsys, endpoint, "--json", "group", "offsets", group)
        return [r["offset"] for r in json.loads(out)]

    code, out, _ = run(capsys, endpoint, "--json", "group", "reset-offsets", group, "--topic", topic_name,
                       "--to-latest", "--execute")
    assert code == 0 and [(r["queue_id"], r["offset"], r["new_offset"]) for r in json.loads(out)] == [
        (0, None, 5), (1, None, 5)]
    assert offsets() == [5, 5]
    run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute")
    assert offsets() == [0, 0]
    run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "99", "--execute")
    assert offsets() == [5, 5]  # kept within the stored offsets
    after_ms = min(r.store_timestamp_ms for r in second)
    moment = datetime.datetime.fromtimestamp(after_ms / 1000, datetime.timezone.utc)
    if max(r.store_timestamp_ms for r in first) < after_ms:  # the same millisecond: no time between them
        run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name, "--to-datetime",
            moment.isoformat(), "--execute")
        assert offsets() == [3, 3]
    code, out, _ = run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name, "--to-offset",
                       "1", "--dry-run")
    assert code == 0 and "new_offset" in out.splitlines()[0] and offsets() != [1, 1]  # nothing committed
    code, out, err = run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name, "--to-offset", "1")
    assert code == 0 and offsets() != [1, 1] and "add --execute" in err  # without --execute: the plan alone
    _, out, _ = run(capsys, endpoint, "group", "reset-offsets", f"{group}-new", "--topic", topic_name,
                    "--to-offset", "1", "--dry-run")
    assert out.splitlines()[2].split() == [f"{group}-new", topic_name, "0", "-", "1", "False"]  # never committed


def test_reset_offsets_is_refused_while_the_group_has_live_consumers(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "2")
    _stored(endpoint, topic_name, 1)
    group = f"{topic_name}-busy"
    with Admin(endpoint) as admin, PopConsumer(endpoint, group, topic_name, poll_ms=0) as consumer:
        consumer.receive()
        before = admin.group_offsets(group, [topic_name])
        code, out, err = run(capsys, endpoint, "group", "reset-offsets", group, "--topic", topic_name,
                             "--to-latest", "--execute")
        assert admin.group_offsets(group, [topic_name]) == before  # nothing was committed
    assert code == 1 and out == "" and f"group '{group}' has live consumers" in err
    assert "stop them and try again" in err


def test_message_send_from_stdin_or_a_file_and_peek(capsys, monkeypatch, endpoint, topic_name, tmp_path):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "1")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\n")))
    code, out, _ = run(capsys, endpoint, "--json", "message", "send", topic_name, "--tags", "TagA", "--keys", "k0")
    assert code == 0 and json.loads(out) == [{"topic": topic_name, "queue_id": 0, "messages": 2, "first_offset": 0,
                                              "last_offset": 1}]
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"k2|three\n" + b"x" * 100 + b"\n")
    code, _, _ = run(capsys, endpoint, "message", "send", topic_name, "--file", str(lines), "--key-separator", "|")
    assert code == 0
    wait_indexed(endpoint, topic_name, 4)
    code, out, _ = run(capsys, endpoint, "--json", "message", "peek", topic_name)
    rows = json.loads(out)
    assert code == 0 and [(r["offset"], r["keys"], r["tags"], r["body"]) for r in rows] == [
        (0, "k0", "TagA", "one"), (1, "k0", "TagA", "two"), (2, "k2", "", "three"), (3, "", "", "x" * 100)]
    assert rows[0]["time"].endswith("+00:00") and rows[0]["bytes"] == 3
    code, out, _ = run(capsys, endpoint, "message", "peek", topic_name, "--queue", "0", "--offset", "2", "--count",
                       "2")
    table = out.splitlines()
    assert code == 0 and table[0].split() == ["queue_id", "offset", "keys", "tags", "time", "bytes", "body"]
    assert len(table) == 4 and table[2].split()[-1] == "three" and table[3].endswith("x" * 57 + "...")


def test_peek_mistakes_fail_with_a_sentence(capsys, endpoint, topic_name):
    run(capsys, endpoint, "topic", "create", topic_name, "--queues", "1")
    code, _, err = run(capsys, endpoint, "message", "peek", topic_name, "--offset", "3")
    assert code == 1 and "give --queue too" in err
    code, _, err = run(capsys, endpoint, "message", "peek", topic_name, "--queue", "7")
    assert code == 1 and "has no queue 7" in err
    code, _, err = run(capsys, endpoint, "message", "peek", topic_name, "--queue", "0", "--offset", "-1")
    assert code == 1 and "give --offset 0 or more" in err
    code, _, err = run(capsys, endpoint, "message", "send", topic_name, "--file", "/nonexistent/lines.txt")
    assert code == 1 and "/nonexistent/lines.txt" in err and len(err.strip().splitlines()) == 1


def test_groups_through_name_servers_list_reset_and_refuse_while_consumed(capsys, broker_sim_remoting, topic_name):
    target = broker_sim_remoting
    topic, group = f"cli-{topic_name}-{time.time_ns()}", f"cli-{topic_name}-{time.time_ns()}-g"
    target.create_topic(topic, 2)
    _stored(target.endpoint, topic, 2)
    code, out, _ = run_ns(capsys, target, "--json", "group", "reset-offsets", group, "--topic", topic, "--to-latest",
                          "--execute")
    assert code == 0 and [(r["queue_id"], r["new_offset"]) for r in json.loads(out)] == [(0, 2), (1, 2)]
    _, out, _ = run_ns(capsys, target, "--json", "group", "offsets", group)
    assert [r["offset"] for r in json.loads(out)] == [2, 2]
    _, out, _ = run_ns(capsys, target, "--json", "group", "list")
    assert {"group": group, "consumers": 0, "consumer_ids": ""} in json.loads(out)  # found by its retry topic
    heartbeat = {"clientID": "cli-test-consumer", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}]}
    with RemotingConnection(target.namesrv) as consumer:
        assert consumer.invoke(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)).code == ResponseCode.SUCCESS
        _, out, _ = run_ns(capsys, target, "--json", "group", "list")
        assert {"group": group, "consumers": 1, "consumer_ids": "cli-test-consumer"} in json.loads(out)
        code, out, err = run_ns(capsys, target, "group", "reset-offsets", group, "--topic", topic, "--to-earliest",
                                "--execute")
    assert code == 1 and f"group '{group}' has live consumers (cli-test-consumer)" in err
    _, out, _ = run_ns(capsys, target, "--json", "group", "offsets", group)
    assert [r["offset"] for r in json.loads(out)] == [2, 2]


def test_a_pop_through_the_remoting_door_is_a_live_consumer_by_its_address(capsys, broker_sim_remoting, topic_name):
    target = broker_sim_remoting
    topic, group = f"cli-{topic_name}-{time.time_ns()}", f"cli-{topic_name}-{time.time_ns()}-popper"
    target.create_topic(topic, 1)
    with PopConsumer(name_server=target.namesrv, group=group, topics=topic, poll_ms=0) as consumer:
        consumer.receive()
    with Admin(target.endpoint) as admin:  # our door lists every door's consumers
        [info] = admin.groups([group])
    assert len(info.consumers) == 1 and info.consumers[0].startswith("127.0.0.1:")


def test_messages_through_name_servers(capsys, monkeypatch, broker_sim_remoting, topic_name):
    target = broker_sim_remoting
    topic = f"cli-{topic_name}-{time.time_ns()}"
    target.create_topic(topic, 1)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"k1 one\nk2 two\n")))
    code, out, _ = run_ns(capsys, target, "--json", "message", "send", topic, "--key-separator", " ", "--tags", "T")
    assert code == 0 and [(r["queue_id"], r["messages"]) for r in json.loads(out)] == [(0, 2)]
    wait_indexed(target.endpoint, topic, 2)
    code, out, _ = run_ns(capsys, target, "--json", "message", "peek", topic)
    assert code == 0 and [(r["broker"], r["offset"], r["keys"], r["tags"], r["body"]) for r in json.loads(out)] == [
        ("broker-a", 0, "k1", "T", "one"), ("broker-a", 1, "k2", "T", "two")]


def run_ns(capsys, target, *args):
    code = main(["--name-server", target.namesrv, *args])
    out, err = capsys.readouterr()
    return code, out, err
