"""The SDK through name servers (RocketMQ's remoting protocol), the same scenarios against
broker_sim's remoting door, a two-broker broker_sim cluster and the real Apache RocketMQ:
topics, sends of every kind read back exactly, ranges inside stored batches, tag filters,
offsets by time, group offsets, pop; a topic's queues are (broker, queue id). On the real
RocketMQ 4.9.7 too: sends, offsets, the broker's version, and what 4.x lacks refused."""

from __future__ import annotations

import itertools
import re
import threading
import time

import pyarrow as pa
import pytest

from rmq_spark import (
    Admin,
    BrokerUnavailableError,
    ConfigError,
    Message,
    OffsetRange,
    PopConsumer,
    Producer,
    QueueNotFoundError,
    RangeReader,
    TopicConflictError,
    TopicNotFoundError,
    TransportConfig,
)
from rmq_spark.cli import main as rmq_admin
from rmq_spark.client.message_ids import UniqueKeys, deterministic_keys
from rmq_spark.client.remoting import RemotingTransport
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode, fastjson
from support.remoting_targets import with_rocketmq4, with_rocketmq4_by_queue_type

_names = itertools.count()


def unique(prefix: str, target) -> str:
    return f"{prefix}-{target.kind}-{next(_names)}-{int(time.time())}"


def all_ranges(name_server: str, *topics: str) -> list[OffsetRange]:
    with Admin(name_server=name_server) as admin:
        offsets = admin.offsets(list(topics))
    return [OffsetRange(q.topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
            for queues in offsets.values() for q in queues]


def wait_for_messages(name_server: str, topic: str, count: int, timeout_s: float = 20) -> list[OffsetRange]:
    """The topic's ranges once its queues hold ``count`` messages (a send returns before its
    message is indexed, on RocketMQ's broker as on broker_sim's): each look waits at the brokers
    for more (a long poll, suspended pulls), none polls."""
    deadline = time.monotonic() + timeout_s
    with Admin(name_server=name_server) as admin:
        offsets = admin.offsets([topic])[topic]
        while True:
            held = sum(q.max_offset - q.min_offset for q in offsets)
            left_ms = int((deadline - time.monotonic()) * 1000)
            if held >= count or left_ms <= 0:
                assert held == count, f"{topic}: {held} messages of {count}"
                return [OffsetRange(q.topic, q.queue_id, q.min_offset, q.max_offset, q.broker) for q in offsets]
            past = {(q.topic, q.broker, q.queue_id): q.max_offset for q in offsets}
            offsets = admin.offsets([topic], past=past, wait_ms=min(left_ms, 5_000))[topic]


def test_topics_are_created_described_listed_and_deleted(target):
    name = unique("sdk-topics", target)
    brokers = 2 if target.kind == "broker_sim_cluster" else 1
    with Admin(name_server=target.namesrv) as admin:
        created = admin.create_topic(name, 3, "BatchCQ")
        assert (created.queue_count, created.queue_type.value) == (3 * brokers, "BatchCQ")
        assert len(created.brokers) == brokers
        assert admin.create_topic(name, 3, "BatchCQ") == created  # the same again: itself
        with pytest.raises(TopicConflictError, match="delete it first"):
            admin.create_topic(name, 4, "BatchCQ")
        info, queues = admin.describe_topic(name)
        assert info == created
        assert sorted((q.broker, q.queue_id, q.max_offset) for q in queues) == sorted(
            (broker, q, 0) for broker, _count in created.brokers for q in range(3))
        listed = {t.name: t for t in admin.list_topics()}
        assert listed[name] == created
        assert not [t for t in listed if t.startswith(("%RETRY%", "rmq_sys_", "RMQ_SYS_")) or t == "TBW102"]
        assert admin.delete_topic(name)
        with pytest.raises(TopicNotFoundError, match=name):
            admin.describe_topic(name)


@with_rocketmq4_by_queue_type()
def test_sends_of_every_kind_are_read_back_exactly(target, queue_type):
    name = unique("sdk-sends", target)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 2, queue_type)
    with Producer(name_server=target.namesrv) as producer:
        one = producer.send(Message(name, b"single", tags="T1", keys="k-single"))
        batch = producer.send_batch([Message(name, b"batch-%d" % i) for i in range(5)])
        futures = [producer.send_async(Message(name, b"async-%d" % i, keys=f"k{i % 3}")) for i in range(200)]
        rows = producer.send_arrow(pa.table({"body": [b"arrow-%d" % i for i in range(300)],
                                             "keys": [f"r{i % 5}" for i in range(300)]}), name).wait(30)
        results = [one, *batch, *(f.result(30) for f in futures)]
    assert rows == 300
    assert all(re.fullmatch(r"[0-9A-F]{32}", r.message_id) for r in results)  # RocketMQ's UNIQ_KEY form
    assert len({r.message_id for r in results}) == len(results)
    assert {r.broker for r in results} <= {"broker-a", "broker-b"} and all(r.broker for r in results)
    assert [r.queue_offset for r in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 5))
    expected = [b"single", *(b"batch-%d" % i for i in range(5)), *(b"async-%d" % i for i in range(200)),
                *(b"arrow-%d" % i for i in range(300))]
    ranges = wait_for_messages(target.namesrv, name, len(expected))
    with RangeReader(name_server=target.namesrv) as reader:
        table = reader.read_table(ranges)
    assert sorted(table.column("body").to_pylist()) == sorted(expected)
    rows = table.to_pylist()
    single = next(r for r in rows if r["body"] == b"single")
    assert (single["tags"], single["keys"], single["broker"], single["queue_id"], single["queue_offset"]) == (
        "T1", "k-single", one.broker, one.queue_id, one.queue_offset)
    # Each queue's rows are its offsets, in order, once.
    by_queue = {}
    for row in rows:
        by_queue.setdefault((row["broker"], row["queue_id"]), []).append(row["queue_offset"])
    assert all(offsets == list(range(offsets[0], offsets[0] + len(offsets))) for offsets in by_queue.values())


def test_a_range_may_start_and_end_inside_a_stored_batch(target):
    name = unique("sdk-cut", target)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 1, "BatchCQ")
    with Producer(name_server=target.namesrv) as producer:
        sent = producer.send_batch([Message(name, b"m%d" % i) for i in range(10)])  # ONE inner batch
    wait_for_messages(target.namesrv, name, 10)
    base, broker = sent[0].queue_offset, sent[0].broker
    with RangeReader(name_server=target.namesrv) as reader:
        table = reader.read_table([OffsetRange(name, 0, base + 3, base + 7, broker)])
    assert table.column("body").to_pylist() == [b"m3", b"m4", b"m5", b"m6"]
    assert table.column("queue_offset").to_pylist() == list(range(base + 3, base + 7))


def test_a_tag_filter_reads_only_those_tags(target):
    name = unique("sdk-tags", target)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 1, "SimpleCQ")
    with Producer(name_server=target.namesrv, auto_batch=False) as producer:
        for i in range(12):
            producer.send(Message(name, b"%d" % i, tags="A" if i % 3 else "B"))
    ranges = wait_for_messages(target.namesrv, name, 12)
    with RangeReader(name_server=target.namesrv, tag_filter="B") as reader:
        table = reader.read_table(ranges)
    assert sorted(table.column("body").to_pylist()) == [b"0", b"3", b"6", b"9"]
    assert set(table.column("tags").to_pylist()) == {"B"}
    last_b: dict = {}  # (broker, queue id): the last offset of a B message
    for b, q, o in zip(*(table.column(c).to_pylist() for c in ("broker", "queue_id", "queue_offset"))):
        last_b[b, q] = max(o, last_b.get((b, q), o))
    tails = [OffsetRange(name, r.queue_id, last_b[r.broker, r.queue_id] + 1, r.end, r.broker) for r in ranges
             if r.end and last_b.get((r.broker, r.queue_id), r.end) + 1 < r.end]
    assert tails  # only A messages there: the broker's pull steps over them, which is no loss
    with RangeReader(name_server=target.namesrv, tag_filter="B") as reader:
        assert reader.read_table(tails).num_rows == 0


@with_rocketmq4()
def test_a_long_poll_of_offsets_is_answered_when_a_message_lands(target):
    """Offsets that wait (suspended PULL_MESSAGEs, one per queue, as RocketMQ's consumers wait):
    answered once a send lands, long before the 20 s asked for; with nothing sent, after the wait."""
    name = unique("sdk-long-poll", target)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 2, "SimpleCQ")
        queues = admin.offsets([name])[name]
        past = {(q.topic, q.broker, q.queue_id): q.max_offset for q in queues}
        started = time.monotonic()
        assert sum(q.max_offset for q in admin.offsets([name], past=past, wait_ms=300)[name]) == 0
        assert time.monotonic() - started >= 0.3
        with Producer(name_server=target.namesrv) as producer:
            sender = threading.Thread(target=producer.send, args=(Message(name, b"m"),))
            sender.start()
            started = time.monotonic()
            offsets = admin.offsets([name], past=past, wait_ms=20_000)[name]
            waited_s = time.monotonic() - started
            sender.join()
    assert sum(q.max_offset for q in offsets) == 1 and waited_s < 15


@with_rocketmq4()
def test_offsets_by_time_and_group_offsets(target):
    name, group = unique("sdk-offsets", target), unique("sdk-group", target)
    target.create_group(group)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 2, "SimpleCQ")
        before = int(time.time() * 1000) - 1
        with Producer(name_server=target.namesrv) as producer:
            producer.send_batch([Message(name, b"x")] * 4)
        ranges = wait_for_messages(target.namesrv, name, 4)
        [full] = [r for r in ranges if r.end]
        by_time = admin.offsets_for_timestamp(name, before, broker=full.broker)
        assert by_time[full.queue_id] == 0
        later = admin.offsets_for_timestamp(name, int(time.time() * 1000) + 60_000, broker=full.broker)
        assert later[full.queue_id] == 4
        admin.commit_group_offsets(group, {(name, full.broker, full.queue_id): 3})
        committed = [o for o in admin.group_offsets(group, [name]) if o.offset]
        assert [(o.topic, o.broker, o.queue_id, o.offset) for o in committed] == [
            (name, full.broker, full.queue_id, 3)]


def test_pop_receives_every_message_once_and_acks(target, caplog):
    """Each round's deliveries acked by the next receive (a batch ack before the pop): none fails."""
    name, group = unique("sdk-pop", target), unique("sdk-pop-group", target)
    target.create_group(group)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 2, "SimpleCQ")
    with Producer(name_server=target.namesrv, auto_batch=False) as producer:
        for i in range(20):
            producer.send(Message(name, b"p%d" % i))
    wait_for_messages(target.namesrv, name, 20)
    seen, deliveries = [], []
    with PopConsumer(name_server=target.namesrv, group=group, topics=name, poll_ms=1000) as consumer:
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            deliveries = consumer.receive(ack=deliveries)
            for delivery in deliveries:
                seen += [m.body for m in delivery.messages()]
                assert delivery.broker in ("broker-a", "broker-b")
        consumer.ack(deliveries)
    assert sorted(seen) == sorted(b"p%d" % i for i in range(20))
    assert "not acked" not in caplog.text


def test_an_ack_of_many_deliveries_is_one_batch_ack_and_what_was_not_acked_comes_back(target):
    """RocketMQ 5.1.3's BATCH_ACK_MESSAGE: a pop's deliveries are acked in one request a broker
    (not a request a message); the broker acks each named message and no other."""
    name, group = unique("sdk-batch-ack", target), unique("sdk-batch-ack-group", target)
    target.create_group(group)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 1, "SimpleCQ")
    bodies = [b"b%d" % i for i in range(40)]
    with Producer(name_server=target.namesrv) as producer:
        for body in bodies:
            producer.send_async(Message(name, body))
    wait_for_messages(target.namesrv, name, len(bodies))
    kept = {b"b3", b"b17", b"b31"}  # popped, never acked: they come back after their invisible time
    with PopConsumer(name_server=target.namesrv, group=group, topics=name, poll_ms=1000, invisible_ms=3000,
                     max_messages=32) as consumer:
        transport, codes = consumer._transport, []
        calls = transport.calls
        invoke = calls.invoke
        calls.invoke = lambda address, code, *args, **kw: codes.append(code) or invoke(address, code, *args, **kw)
        seen, deadline = [], time.monotonic() + 60
        while len(seen) < len(bodies) and time.monotonic() < deadline:
            deliveries = consumer.receive()
            seen += [d.messages()[0].body for d in deliveries]
            acked = [d for d in deliveries if d.messages()[0].body not in kept]
            codes.clear()
            consumer.ack(acked)
            if len(acked) > 1:
                assert codes == [RequestCode.BATCH_ACK_MESSAGE]
        assert sorted(seen) == sorted(bodies)
        again, deadline = [], time.monotonic() + 60
        while len(again) < len(kept) and time.monotonic() < deadline:  # the real broker revives within seconds
            deliveries = consumer.receive()
            again += [d.messages()[0].body for d in deliveries]
            consumer.ack(deliveries)
    assert sorted(again) == sorted(kept)


@with_rocketmq4()
def test_a_broker_s_version_is_read_from_its_answers(target):
    """The real brokers say their RocketMQ version in every answer; broker_sim's door says none."""
    transport = RemotingTransport(target.namesrv, TransportConfig())
    try:
        masters = transport.names.masters()
        versions = {transport.calls.broker_version(address).name for address in masters.values()}
    finally:
        transport.close()
    assert versions == ({target.cluster.version} if target.kind.startswith("rocketmq") else {None})


def test_what_rocketmq4_lacks_is_refused_naming_its_version(rocketmq4, capsys):
    """4.9.7 has no BatchCQ (its broker would make a SimpleCQ topic of one, silently) and no pop:
    each is refused with a sentence that names the version the broker gave, and nothing is made."""
    ns, version = rocketmq4.namesrv_addr, rocketmq4.version
    name, group = f"sdk-v4-{int(time.time())}", f"sdk-v4-group-{int(time.time())}"
    refused = rf"broker broker-a \(127\.0\.0\.1:\d+\) runs RocketMQ {re.escape(version)}, which has no"
    with Admin(name_server=ns) as admin:
        with pytest.raises(ConfigError, match=refused + " BatchCQ topics .*create the topic as SimpleCQ"):
            admin.create_topic(name, 2, "BatchCQ")
        with pytest.raises(TopicNotFoundError):
            admin.describe_topic(name)
        assert rmq_admin(["--name-server", ns, "topic", "create", name, "--queues", "2", "--type", "BatchCQ"]) != 0
        assert re.search(refused + " BatchCQ", capsys.readouterr().err)
        with pytest.raises(TopicNotFoundError):
            admin.describe_topic(name)
        created = admin.create_topic(name, 2, "SimpleCQ")
        assert (created.queue_count, created.queue_type.value) == (2, "SimpleCQ")
        assert admin.describe_topic(name)[0] == created
    with Producer(name_server=ns) as producer:
        producer.send(Message(name, b"p"))
    with PopConsumer(name_server=ns, group=group, topics=name, poll_ms=100) as consumer:
        with pytest.raises(ConfigError, match=refused + " pop consumption .*read by offset instead"):
            consumer.receive()


def test_two_brokers_each_have_a_queue_0(broker_sim_cluster):
    target = broker_sim_cluster
    name = unique("sdk-two", target)
    with Admin(name_server=target.namesrv) as admin:
        admin.create_topic(name, 1, "BatchCQ")
    with Producer(name_server=target.namesrv) as producer:
        a = producer.send(Message(name, b"to a", queue_id=0, broker="broker-a"))
        b = producer.send(Message(name, b"to b", queue_id=0, broker="broker-b"))
        with pytest.raises(QueueNotFoundError, match="broker-a, broker-b"):
            producer.send(Message(name, b"where?", queue_id=0))
        with pytest.raises(QueueNotFoundError, match="broker-c"):
            producer.send(Message(name, b"nowhere", queue_id=0, broker="broker-c"))
    assert ((a.broker, a.queue_id, a.queue_offset), (b.broker, b.queue_id, b.queue_offset)) == (
        ("broker-a", 0, 0), ("broker-b", 0, 0))
    wait_for_messages(target.namesrv, name, 2)
    with RangeReader(name_server=target.namesrv) as reader:
        only_b = reader.read_table([OffsetRange(name, 0, 0, 1, "broker-b")])
    assert only_b.select(["broker", "queue_id", "body"]).to_pylist() == [
        {"broker": "broker-b", "queue_id": 0, "body": b"to b"}]


def test_a_long_poll_over_more_queues_than_suspended_pulls_answers_at_once(broker_sim_remoting):
    """Past MAX_SUSPENDED_PULLS queues no pull is held for each (that would load the brokers more
    than polling): the offsets come at once, not after the 20 s asked for."""
    from rmq_spark.client.remoting.offsets import MAX_SUSPENDED_PULLS

    name = unique("sdk-long-poll-many", broker_sim_remoting)
    with Admin(name_server=broker_sim_remoting.namesrv) as admin:
        admin.create_topic(name, MAX_SUSPENDED_PULLS + 1, "SimpleCQ")
        past = {(q.topic, q.broker, q.queue_id): q.max_offset for q in admin.offsets([name])[name]}
        started = time.monotonic()
        assert len(admin.offsets([name], past=past, wait_ms=20_000)[name]) == MAX_SUSPENDED_PULLS + 1
        assert time.monotonic() - started < 15


def test_what_rocketmq_cannot_do_is_refused_saying_why(broker_sim_remoting):
    ns = broker_sim_remoting.namesrv
    with pytest.raises(ConfigError, match="are broker_sim's"):
        Producer(name_server=ns, transaction_id="tx-1")
    with pytest.raises(ConfigError, match="codec='rmq' and compression='none'"):
        Producer(name_server=ns, codec="arrow")
    with pytest.raises(ConfigError, match="exactly one of endpoint"):
        Producer("127.0.0.1:1", name_server=ns)
    with pytest.raises(ConfigError, match="not HOST:PORT"):
        Admin(name_server="nowhere")
    with Producer(name_server=ns) as producer:
        with pytest.raises(TopicNotFoundError, match="no-such-topic"):
            producer.send(Message("no-such-topic", b"x"))
    with Admin(name_server="127.0.0.1:1", transport=None) as admin:
        with pytest.raises(BrokerUnavailableError, match="127.0.0.1:1"):
            admin.list_topics()


def test_arrow_rows_carry_the_message_ids_given(broker_sim_remoting):
    """What the Spark sink relies on: rows written twice carry the same UNIQ_KEYs."""
    ns = broker_sim_remoting.namesrv
    name = unique("sdk-ids", broker_sim_remoting)
    with Admin(name_server=ns) as admin:
        admin.create_topic(name, 1, "BatchCQ")
    ids = deterministic_keys("sink.b7.p0", 0, 3)
    with Producer(name_server=ns) as producer:
        producer.send_arrow(pa.table({"body": [b"a", b"b", b"c"], "message_id": ids}), name).wait(10)
    wait_for_messages(ns, name, 3)
    with RemotingConnection(ns) as conn:
        answer = conn.invoke(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g", "topic": name, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0})
    assert answer.code == ResponseCode.SUCCESS
    stored = [bytes(uid).decode() for uid in re.findall(rb"UNIQ_KEY\x01([0-9A-F]{32})\x02", answer.body)]
    assert stored[:3] == ids.to_pylist()  # each message's, in the batch's payload; then the batch's own
    assert len(stored) == 4 and stored[3] not in stored[:3]


def test_message_ids_are_rocketmq_s_form():
    keys = UniqueKeys(now_ms=lambda: 1_795_000_000_000)
    made = keys.many(70_000)  # more than a counter holds: the time field moves on instead of repeating
    assert len(set(made)) == len(made) and all(re.fullmatch(r"[0-9A-F]{32}", k) for k in made[:10])
    assert deterministic_keys("s.b1.p2", 5, 2).to_pylist() == deterministic_keys("s.b1.p2", 5, 2).to_pylist()
    assert deterministic_keys("s.b1.p2", 5, 1)[0] == deterministic_keys("s.b1.p2", 0, 6)[5]
    assert deterministic_keys("s.b1.p2", 0, 1)[0] != deterministic_keys("s.b1.p3", 0, 1)[0]


def test_fastjson_bodies_are_read():
    route = b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10912"},"brokerName":"b"}]}'
    assert fastjson.loads(route)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:10912"}
    stats = (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5,"minOffset":0},'
             b'{"brokerName":"b","queueId":1,"topic":"t"}:{"maxOffset":7,"minOffset":1}}}')
    table = fastjson.loads(stats)["offsetTable"]
    assert {dict(key)["queueId"]: value["maxOffset"] for key, value in table.items()} == {0: 5, 1: 7}
    assert fastjson.loads(b'{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(ValueError, match="ends where a value should start"):
        fastjson.loads(b'{{"a":1}:')
    with pytest.raises(ValueError, match="expected ':' at character 9"):
        fastjson.loads(b'{{"a":1} 2}')


def test_fastjson_refuses_what_it_cannot_hold_with_value_error():
    """Found by tests/fuzz: a peer's body nested past Python's stack, and an object key holding an array."""
    with pytest.raises(ValueError, match="deeper than 100 levels"):
        fastjson.loads(b"[" * 5000)
    with pytest.raises(ValueError, match="deeper than 100 levels"):
        fastjson.loads(b'{{"a":1}:' * 5000)
    key = next(iter(fastjson.loads(b'{{"a":[{"b":2}]}:1}')))
    assert dict(key) == {"a": ((("b", 2),),)}


def test_fastjson_reads_an_object_key_whose_names_mix_strings_and_objects():
    """Found by tests/fuzz: the names "0" and {} (a tuple) were compared while sorting (TypeError)."""
    key = next(iter(fastjson.loads(b'{{0:null,{}:null}:null}')))
    assert dict(key) == {"0": None, (): None}
