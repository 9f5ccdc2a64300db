"""`rmq-broker-sim --log-format`: the broker's log lines as sentences (text, the default) or one
JSON object a line (json, from the flag or the --config file), a refused topic creation's line
carrying its subject (the topic, the client) in either; past 5 refusals, one line counts the
rest (said at the exit here: the stop comes before the 10 s window is over)."""

from __future__ import annotations

import json
import re

import grpc
import pytest

from support.grpc_client import Client
from test_lifecycle import BrokerProcess

ISO_UTC_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.-]+: .*")
REFUSAL = ("topic creation refused: client 127.0.0.1 has created 1 topics, its limit "
           "(--max-topics-created-per-client): topic 'second' was not created.")


def refuse_topics(endpoint: str, names=("second", "3", "4", "5", "6", "7", "8")) -> None:
    """Create a topic, then ``names``, each past the client's limit of one."""
    client = Client(endpoint)
    try:
        client.create("first")
        for name in names:
            with pytest.raises(grpc.RpcError) as refused:
                client.create(name)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    finally:
        client.close()


@pytest.mark.parametrize("where", ["flag", "config"])
def test_json_lines_carry_their_fields_and_the_subject(tmp_path, processes, where):
    if where == "flag":
        args = ["--log-format", "json"]
    else:
        (tmp_path / "broker.conf").write_text("log-format=json\n")
        args = ["--config", str(tmp_path / "broker.conf")]
    process = BrokerProcess(tmp_path, tmp_path / "data", *args, "--max-topics-created-per-client", "1")
    processes.append(process)
    refuse_topics(process.wait_listening())
    assert process.stop() == 0

    lines = [json.loads(line) for line in process.stderr().splitlines()]  # every line an object
    for line in lines:
        assert ISO_UTC_MS.fullmatch(line["time"]), line
        assert line["level"] in ("INFO", "WARNING") and line["logger"].startswith(("broker_sim", "rmq-broker-sim"))
        assert isinstance(line["message"], str) and "exception" not in line, line
    messages = [line["message"] for line in lines]
    assert any(m.startswith("broker listening on 127.0.0.1:") for m in messages), messages
    assert "SIGTERM received: stopping" in messages
    refused = [line for line in lines if line.get("topic") == "second"]
    assert len(refused) == 1, lines
    assert refused[0]["message"].startswith(REFUSAL)
    assert {k: refused[0][k] for k in ("level", "logger", "topic", "client", "queues")} == {
        "level": "WARNING", "logger": "broker_sim.core.limits", "topic": "second", "client": "127.0.0.1", "queues": 1}
    assert [line["topic"] for line in lines if line["message"].startswith("topic creation refused")] == [
        "second", "3", "4", "5", "6"]
    counted = [line for line in lines if "left out" in line["message"]]
    assert len(counted) == 1 and counted[0]["message"].startswith(
        '2 more lines like "topic creation refused: %s" were left out in the last '), counted
    assert {k: counted[0].get(k) for k in ("level", "client", "queues", "dropped", "topic")} == {
        "level": "WARNING", "client": "127.0.0.1", "queues": 1, "dropped": 2, "topic": None}, "their shared subject"


def test_text_lines_are_sentences_without_the_fields(tmp_path, processes):
    process = BrokerProcess(tmp_path, tmp_path / "data", "--max-topics-created-per-client", "1")
    processes.append(process)
    refuse_topics(process.wait_listening())
    assert process.stop() == 0

    lines = process.stderr().splitlines()
    assert lines and all(TEXT_LINE.fullmatch(line) for line in lines), lines
    assert any(re.fullmatch(r".* INFO broker_sim\.broker: broker listening on 127\.0\.0\.1:\d+, data in .*", line)
               for line in lines), lines
    refused = [line for line in lines if "topic creation refused: client" in line]
    assert len(refused) == 5 and f"WARNING broker_sim.core.limits: {REFUSAL}" in refused[0], lines
    assert "second" not in refused[0].split(REFUSAL)[1], "the subject's fields stay out of the sentence"
    counted = [line.split(": ", 1)[1] for line in lines if "left out" in line]
    assert len(counted) == 1 and re.fullmatch(
        r'2 more lines like "topic creation refused: %s" were left out in the last \d+ s', counted[0]), lines


def test_a_wrong_log_format_is_refused_in_one_line(tmp_path):
    from broker_sim.cli import arguments, parser

    with pytest.raises(SystemExit) as exited:
        arguments(parser(), ["--log-format", "xml"])
    assert exited.value.code == 2


def test_no_input_can_forge_a_text_line_or_steer_a_terminal(tmp_path, processes):
    """Issue 44: a oneway END_TRANSACTION's transactionId holding a newline and ANSI escapes was
    written raw: a forged ERROR line, and an escape that clears the terminal of whoever tails
    the log. Every string of a line is escaped in one place, the text formatter."""
    from peers.process import free_port
    from rmq_wire.remoting import RemotingConnection, RequestCode

    port = free_port()
    process = BrokerProcess(tmp_path, tmp_path / "data", "--remoting-port", str(port))
    processes.append(process)
    process.wait_listening()
    forged = "x\n2026-12-02 00:00:00,000 ERROR broker_sim.core: INJECTED disk failed\x1b[2J\x1b]0;owned\x07\u2028y"
    with RemotingConnection(f"127.0.0.1:{port}") as connection:
        connection.oneway(RequestCode.END_TRANSACTION, {"transactionId": forged, "msgId": forged,
                                                        "commitOrRollback": "8", "producerGroup": "g",
                                                        "tranStateTableOffset": "0", "commitLogOffset": "0",
                                                        "fromTransactionCheck": "false"})
        connection.invoke(RequestCode.GET_BROKER_CLUSTER_INFO, {})  # the oneway was served before this
    assert process.stop() == 0
    text = process.stderr()
    lines = text.splitlines()
    assert all(TEXT_LINE.fullmatch(line) for line in lines), lines
    assert not any("INJECTED" in line.split(": ", 1)[0] for line in lines)
    assert "\x1b" not in text and "\x07" not in text and "\u2028" not in text
    assert any("x\\n2026-12-02 00:00:00,000 ERROR broker_sim.core: INJECTED disk failed\\x1b[2J\\x1b]0;owned\\x07"
               "\\u2028y" in line for line in lines), lines


def test_a_traceback_follows_its_line_indented_with_its_characters_escaped():
    import logging

    from broker_sim.common.logs import formatter

    record = logging.LogRecord("broker_sim.x", logging.ERROR, "", 0, "failed %s", ("a\rb",), None)
    try:
        raise ValueError("bad\n2026-01-01 00:00:00,000 ERROR forged\x1b[31m")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    first, *rest = formatter("text").format(record).splitlines()
    assert first.endswith("ERROR broker_sim.x: failed a\\rb")
    assert rest and all(line.startswith("    ") for line in rest) and "\x1b" not in "".join(rest)
