"""rmq-admin against a real broker: tables for people, JSON for machines, errors on stderr."""

import json

from rmq_spark import Message, Producer
from rmq_spark.client.cli import main
from sdk_helpers import wait_indexed


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
