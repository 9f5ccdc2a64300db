"""RocketMQ's official Python client (rocketmq-python-client 5.1.2, unchanged) against broker_sim's
v2 door and the real RocketMQ proxy: sends (sync, async, FIFO, delayed), transactions with a
checker, SimpleConsumer receive / ack / change invisible duration, PushConsumer with a retry;
and, on broker_sim, the same store as our SDK: what the official client sends our RangeReader
reads, and what AutoBatch sends (one inner batch on a BatchCQ topic) the official client
receives message by message."""

from __future__ import annotations

import uuid

import pytest

from rmq_spark import Message, OffsetRange, Producer, RangeReader


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_sent_messages_are_received_with_their_fields(v2_target, run_official):
    topic = name("v2-plain")
    v2_target.create_topic(topic)
    sent = run_official("send", v2_target.endpoint, topic, "--count", "5", "--tag", "TagA")
    assert len(set(sent["ids"])) == 5
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "5")
    by_id = {m["id"]: m for m in got["messages"]}
    assert set(by_id) == set(sent["ids"]) and got["acked"] == 5
    for i, message_id in enumerate(sent["ids"]):
        m = by_id[message_id]
        assert (m["body"], m["tag"], m["keys"], m["properties"], m["attempt"]) == \
            (f"m-{i}", "TagA", [f"key-{i}"], {"index": str(i)}, 1)


def test_async_sends_with_many_in_flight(v2_target, run_official):
    topic = name("v2-async")
    v2_target.create_topic(topic)
    sent = run_official("send", v2_target.endpoint, topic, "--count", "200", "--asynchronous")
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "200")
    assert sorted(m["id"] for m in got["messages"]) == sorted(sent["ids"])


def test_a_tag_filter_receives_only_its_tag(v2_target, run_official):
    topic = name("v2-tags")
    v2_target.create_topic(topic, queues=1)
    run_official("send", v2_target.endpoint, topic, "--count", "3", "--tag", "Other", "--prefix", "other")
    wanted = run_official("send", v2_target.endpoint, topic, "--count", "3", "--tag", "Wanted", "--prefix", "want")
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "3", "--filter",
                       "Wanted || Nothing", "--timeout-s", "15")
    assert sorted(m["id"] for m in got["messages"]) == sorted(wanted["ids"])


def test_a_message_group_keeps_its_order_in_one_queue(v2_target, run_official):
    topic = name("v2-fifo")
    v2_target.create_topic(topic, message_type="FIFO")
    sent = run_official("send", v2_target.endpoint, topic, "--count", "10", "--message-group", "order-42")
    assert sent["offsets"] == sorted(sent["offsets"]) and len(set(sent["offsets"])) == 10, "one queue, in order"
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "10")
    assert {m["group"] for m in got["messages"]} == {"order-42"}


def test_a_fifo_group_receives_a_message_group_in_order(v2_target, run_official):
    topic = name("v2-fifo-group")
    v2_target.create_topic(topic, queues=2, message_type="FIFO")
    group = v2_target.group(orderly=True)
    run_official("send", v2_target.endpoint, topic, "--count", "12", "--message-group", "order-7")
    got = run_official("receive", v2_target.endpoint, topic, "--group", group, "--count", "12")
    assert [m["body"] for m in got["messages"]] == [f"m-{i}" for i in range(12)]


def test_a_delayed_message_comes_at_its_time(v2_target, run_official):
    topic = name("v2-delay")
    v2_target.create_topic(topic, queues=1, message_type="DELAY")
    sent = run_official("send", v2_target.endpoint, topic, "--count", "1", "--delay-s", "8")
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "1")
    [m] = got["messages"]
    assert m["id"] == sent["ids"][0]
    late = m["received_at"] - sent["sent_at"]
    assert late >= 6.5, f"received {late:.1f} s after it was sent: not delayed"


def test_transactions_commit_roll_back_and_are_checked_back(v2_target, run_official):
    topic = name("v2-txn")
    v2_target.create_topic(topic, queues=1, message_type="TRANSACTION")
    done = run_official("transactions", v2_target.endpoint, topic, "--timeout-s", "40", timeout_s=180)
    # RocketMQ's broker may also check transactions ended meanwhile (it learns of an end late);
    # an answer for an ended one changes nothing
    assert done["ids"]["checked"] in done["checked"], "the open one was checked back"
    got = run_official("receive", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "2",
                       "--timeout-s", "20")
    assert sorted(m["body"] for m in got["messages"]) == ["checked", "committed"]


def test_changed_invisible_duration_gives_the_handle_that_acks(v2_target, run_official):
    topic = name("v2-invisible")
    v2_target.create_topic(topic, queues=1)
    run_official("send", v2_target.endpoint, topic, "--count", "2")
    group = v2_target.group()
    got = run_official("receive", v2_target.endpoint, topic, "--group", group, "--count", "2",
                       "--change-invisible-s", "30")
    assert got["acked"] == 2
    again = run_official("receive", v2_target.endpoint, topic, "--group", group, "--count", "1", "--timeout-s", "6")
    assert again["messages"] == [], "acked with the new handles: nothing comes back"


def test_push_consumer_retries_a_failed_message(v2_target, run_official):
    topic = name("v2-push")
    v2_target.create_topic(topic)
    sent = run_official("send", v2_target.endpoint, topic, "--count", "4")
    got = run_official("push", v2_target.endpoint, topic, "--group", v2_target.group(), "--count", "4", "--fail-first",
                       "--timeout-s", "60", timeout_s=180)
    assert sorted(m["id"] for m in got["messages"]) == sorted(sent["ids"])
    assert {m["attempt"] for m in got["messages"]} == {2}, "each came again after its failure"


# --- one store: our SDK and the official client ----------------------------------------------

def test_what_the_official_client_sends_our_reader_reads(broker_sim_remoting, run_official):
    endpoint = broker_sim_remoting.endpoint
    topic = name("v2-to-sdk")
    broker_sim_remoting.create_topic(topic, 2, batch_cq=False)
    sent = run_official("send", endpoint, topic, "--count", "6", "--tag", "T")
    with RangeReader(endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, q, 0) for q in range(2)])
    assert sorted(table.column("body").to_pylist()) == sorted(f"m-{i}".encode() for i in range(6))
    assert set(table.column("tags").to_pylist()) == {"T"}
    assert len(sent["ids"]) == 6


@pytest.mark.parametrize("codec", ["rmq", "arrow"])
def test_an_autobatch_inner_batch_is_received_message_by_message(broker_sim_remoting, run_official, codec):
    endpoint = broker_sim_remoting.endpoint
    topic = name("v2-from-sdk")
    broker_sim_remoting.create_topic(topic, 1, batch_cq=True)
    with Producer(endpoint, codec=codec, compression="lz4") as producer:
        for i in range(50):
            producer.send_async(Message(topic, f"auto-{i}".encode(), tags="B", properties={"i": str(i)}))
        producer.flush()
    group = name("g")
    got = run_official("receive", endpoint, topic, "--group", group, "--count", "50")
    assert sorted(m["body"] for m in got["messages"]) == sorted(f"auto-{i}" for i in range(50))
    assert len({m["id"] for m in got["messages"]}) == 50 and {m["tag"] for m in got["messages"]} == {"B"}
    again = run_official("receive", endpoint, topic, "--group", group, "--count", "1", "--timeout-s", "6")
    assert again["messages"] == [], "every message of the batch acked: the batch is done"
