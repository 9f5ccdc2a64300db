"""The Spark source and sink through ``nameServer`` (RocketMQ's remoting protocol), the same
scenarios against broker_sim's remoting door (one broker), a two-broker broker_sim cluster
and the real Apache RocketMQ: every message read exactly once with its broker, limits, tag
filters, times, a restart from the checkpoint while producers write, consumer group offsets
RocketMQ's tools see, writes read back with message ids that stay the same when written again;
and, on clusters of their own, a broker killed and restarted mid-query, a broker that joins
between micro-batches and one that leaves; a checkpoint written through ``endpoint`` restarting
through ``nameServer``; RocketMQ's C++ client on both sides of Spark."""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time

import pytest

from peers.rocketmq import body, java_produce
from rmq_spark import Admin, ConfigError, Message, Producer, TransportConfig
from rmq_spark.client.remoting import RemotingTransport
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from spark_helpers import run_available_now
from support.remoting_targets import broker_sim_target, with_rocketmq4, with_rocketmq4_by_queue_type

_names = itertools.count()


@pytest.fixture(autouse=True)
def _java(require_java_peers):
    """The scenarios write with RocketMQ's Java producer (autoBatch), as the real cluster's users do."""


def unique(prefix: str, target) -> str:
    return f"{prefix}-{target.kind}-{next(_names)}-{int(time.time())}"


def source(spark, name_server: str, stream: bool = False, **options):
    reader = (spark.readStream if stream else spark.read).format("rocketmq-batch").option("nameServer", name_server)
    for name, value in options.items():
        reader = reader.option(name, str(value).lower() if isinstance(value, bool) else str(value))
    return reader.load()


def create_topic(name_server: str, topic: str, queues: int, queue_type: str = "BatchCQ") -> None:
    with Admin(name_server=name_server) as admin:
        admin.create_topic(topic, queues, queue_type)


def held(name_server: str, topic: str) -> int:
    with Admin(name_server=name_server) as admin:
        return sum(q.max_offset - q.min_offset for q in admin.offsets([topic])[topic])


def wait_held(name_server: str, topic: str, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while held(name_server, topic) < count:
        assert time.monotonic() < deadline, f"{topic}: fewer than {count} messages after {timeout_s} s"
        time.sleep(0.1)


def bodies(rows) -> list[bytes]:
    return sorted(bytes(r.body) for r in rows)


def positions(rows) -> list:
    return sorted((r.broker, r.queue_id, r.queue_offset) for r in rows)


@with_rocketmq4_by_queue_type()
def test_a_batch_read_sees_every_message_with_its_broker(spark, target, queue_type):
    topic = unique("spark-read", target)
    create_topic(target.namesrv, topic, 2, queue_type)
    sent = java_produce(target.namesrv, topic, 1000, threads=2, body_bytes=64)  # autoBatch: BatchCQ stores batches
    assert sent["failed"] == 0
    brokers = ["broker-a", "broker-b"] if target.kind == "broker_sim_cluster" else ["broker-a"]
    with Producer(name_server=target.namesrv) as producer:  # a message on each broker's queue 0 too
        for broker in brokers:
            producer.send(Message(topic, f"to-{broker}".encode(), queue_id=0, broker=broker))
    wait_held(target.namesrv, topic, 1000 + len(brokers))
    df = source(spark, target.namesrv, topic=topic)
    assert df.columns[:3] == ["topic", "broker", "queue_id"]
    rows = df.collect()
    assert bodies(rows) == sorted([body(i, 64) for i in range(1000)] + [f"to-{b}".encode() for b in brokers])
    assert len(set(positions(rows))) == len(rows)  # every (broker, queue, offset) once
    assert {r.broker for r in rows} == set(brokers)
    assert {r.broker for r in rows if r.body.startswith(b"to-")} == set(brokers)
    # endingOffsets names each queue with its broker; startingTimestamp from the future reads nothing.
    with Admin(name_server=target.namesrv) as admin:
        queues = [(q.broker, q.queue_id) for q in admin.offsets([topic])[topic]]
    first = max({(r.broker, r.queue_id) for r in rows}, key=lambda q: sum((r.broker, r.queue_id) == q for r in rows))
    ending = {topic: {f"{b}:{q}": (3 if (b, q) == first else 0) for b, q in queues}}
    some = source(spark, target.namesrv, topic=topic, endingOffsets=str(ending).replace("'", '"')).collect()
    assert positions(some) == [(first[0], first[1], offset) for offset in range(3)]
    assert source(spark, target.namesrv, topic=topic, startingTimestamp=int(time.time() * 1000) + 60_000).count() == 0
    # assign names a queue with its broker: exactly that one
    broker = brokers[-1]
    assigned = source(spark, target.namesrv, assign=f'{{"{topic}": ["{broker}:0"]}}').collect()
    assert {(r.broker, r.queue_id) for r in assigned} == {(broker, 0)}
    assert f"to-{broker}".encode() in bodies(assigned)


@with_rocketmq4()
def test_a_stream_restarted_from_its_checkpoint_while_producers_write_reads_each_message_once(
        spark, target, tmp_path):
    topic, group = unique("spark-stream", target), unique("spark-group", target)
    create_topic(target.namesrv, topic, 2, "BatchCQ" if target.batch_cq else "SimpleCQ")
    target.create_group(group)
    java_produce(target.namesrv, topic, 600, threads=1, body_bytes=32)
    checkpoint = tmp_path / "checkpoint"
    stream = source(spark, target.namesrv, stream=True, topic=topic, startingOffsets="earliest",
                    maxRecordsPerTrigger=250, consumerGroup=group)
    first, progress = run_available_now(stream, checkpoint)
    assert sum(p["numInputRows"] for p in progress) == len(first) >= 600
    assert all(p["numInputRows"] <= 250 for p in progress)
    writer = threading.Thread(target=java_produce, args=(target.namesrv, topic, 600), kwargs={"body_bytes": 32})
    writer.start()
    try:
        second, _ = run_available_now(stream, checkpoint)
    finally:
        writer.join(120)
    wait_held(target.namesrv, topic, 1200)
    third, _ = run_available_now(stream, checkpoint)
    rows = first + second + third
    assert len(set(positions(rows))) == len(rows) == 1200  # each once, none twice
    assert bodies(rows) == sorted([body(i, 32) for i in range(600)] * 2)
    with Admin(name_server=target.namesrv) as admin:  # the group's offsets: RocketMQ's, which its tools show
        committed = {(o.broker, o.queue_id): o.offset for o in admin.group_offsets(group, [topic])}
        ends = {(q.broker, q.queue_id): q.max_offset for q in admin.offsets([topic])[topic]}
    assert committed == ends
    if target.kind.startswith("rocketmq"):  # RocketMQ's own tool (of its version) sees the group caught up
        [progress] = target.mqadmin(("consumerProgress", "-g", group))
        lines = [line.split() for line in progress.splitlines() if line.startswith(topic)]
        # topic, broker, queue, broker offset, consumer offset, ...: each queue consumed to its end
        assert len(lines) == len(ends) and all(line[3] == line[4] for line in lines), progress


def test_a_tag_filter_and_a_whole_stream_through_a_pattern(spark, target, tmp_path):
    topic = unique("spark-tags", target)
    create_topic(target.namesrv, topic, 2, "SimpleCQ")
    java_produce(target.namesrv, topic, 100, threads=1, body_bytes=16, tag="TagA")
    java_produce(target.namesrv, topic, 50, threads=1, body_bytes=16, tag="TagB")
    wait_held(target.namesrv, topic, 150)
    tagged = source(spark, target.namesrv, topic=topic, tagFilter="TagB").collect()
    assert len(tagged) == 50 and {r.tags for r in tagged} == {"TagB"}
    rows, _ = run_available_now(source(spark, target.namesrv, stream=True, topicPattern=f"{topic}.*",
                                       startingOffsets="earliest"), tmp_path / "checkpoint")
    assert len(rows) == 150


def stored_unique_keys(name_server: str, topic: str) -> list[str]:
    """The UNIQ_KEY of every stored message of a SimpleCQ topic, pulled raw from each queue."""
    with Admin(name_server=name_server) as admin:
        queues = admin.offsets([topic])[topic]
    transport = RemotingTransport(name_server, TransportConfig())
    try:
        route, keys = transport.route(topic), []
        for queue in queues:
            with RemotingConnection(route.address(queue.broker)) as conn:
                offset = queue.min_offset
                while offset < queue.max_offset:
                    answer = conn.invoke(RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "ids", "topic": topic, "queueId": queue.queue_id, "queueOffset": offset,
                        "maxMsgNums": 1024, "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                        "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    keys += [k.decode() for k in re.findall(rb"UNIQ_KEY\x01([0-9A-F]{32})\x02", answer.body)]
                    offset = int(answer.ext_fields["nextBeginOffset"])
        return keys
    finally:
        transport.close()


@with_rocketmq4()
def test_writes_are_read_back_and_a_replayed_write_carries_the_same_ids(spark, target, tmp_path):
    source_topic, topic = unique("spark-write-src", target), unique("spark-write", target)
    create_topic(target.namesrv, source_topic, 2, "BatchCQ" if target.batch_cq else "SimpleCQ")
    create_topic(target.namesrv, topic, 2, "SimpleCQ")
    df = spark.range(0, 500).selectExpr("cast(concat('row-', id) as binary) as body", "cast(id % 7 as string) as keys")
    df.write.format("rocketmq-batch").mode("append").option("nameServer", target.namesrv) \
        .option("topic", source_topic).save()
    wait_held(target.namesrv, source_topic, 500)
    rows = source(spark, target.namesrv, topic=source_topic).collect()
    assert bodies(rows) == sorted(f"row-{i}".encode() for i in range(500))
    by_key = {}
    for row in rows:  # keys hash to one queue: each key's rows share (broker, queue)
        by_key.setdefault(row["keys"], set()).add((row.broker, row.queue_id))
    assert all(len(queues) == 1 for queues in by_key.values())
    # The same micro-batch written twice (a replay, at least once): the same rows, the same ids.
    for run in range(2):
        query = (source(spark, target.namesrv, stream=True, topic=source_topic, startingOffsets="earliest")
                 .select("body", "keys").writeStream.format("rocketmq-batch").option("nameServer", target.namesrv)
                 .option("topic", topic).option("sinkId", f"ids-{topic}")
                 .option("checkpointLocation", str(tmp_path / f"cp{run}")).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120) and query.exception() is None
        finally:
            query.stop()
    wait_held(target.namesrv, topic, 1000)
    assert bodies(source(spark, target.namesrv, topic=topic).collect()) == sorted(
        f"row-{i}".encode() for i in range(500) for _ in range(2))
    ids = stored_unique_keys(target.namesrv, topic)
    assert len(ids) == 1000 and len(set(ids)) == 500  # each id twice: readers can drop the repeat


def test_many_small_writer_tasks_spread_over_every_queue_of_every_broker(spark, broker_sim_cluster):
    """20 write tasks of a batch each: each task's producer starts its turns at a random queue, as
    RocketMQ's producers do (starting at the first, all 2,000 rows went to broker-a's queue 0)."""
    topic = unique("spark-spread", broker_sim_cluster)
    create_topic(broker_sim_cluster.namesrv, topic, 4)
    spark.range(0, 2000, numPartitions=20).selectExpr("cast(id as string) as body").write \
        .format("rocketmq-batch").mode("append").option("nameServer", broker_sim_cluster.namesrv) \
        .option("topic", topic).save()
    with Admin(name_server=broker_sim_cluster.namesrv) as admin:
        held_by = {(q.broker, q.queue_id): q.max_offset - q.min_offset for q in admin.offsets([topic])[topic]}
    assert sum(held_by.values()) == 2000
    used = {queue for queue, count in held_by.items() if count}
    assert {broker for broker, _ in used} == {"broker-a", "broker-b"}, held_by
    assert len(used) >= 4, held_by  # 20 random starts over 8 queues: fewer than 4 used about once in 10^7 runs


def test_exactly_once_df_write_through_name_servers_without_a_decision_directory_is_refused_at_load(
        spark, broker_sim_remoting):
    df = spark.range(1).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception, match="exactlyOnce through nameServer commits RocketMQ's transactional messages "
                                        "one at a time.*set .option\\('checkpointLocation'"):
        (df.write.format("rocketmq-batch").mode("append").option("nameServer", broker_sim_remoting.namesrv)
         .option("topic", "any").option("deliveryGuarantee", "exactlyOnce").save())
    with pytest.raises(Exception, match="codec='lz4'|compression='lz4'"):
        (df.write.format("rocketmq-batch").mode("append").option("nameServer", broker_sim_remoting.namesrv)
         .option("topic", "any").option("compression", "lz4").save())
    with pytest.raises(ConfigError, match="exactly one of the options endpoint"):
        from rmq_spark.spark.options import parse_options
        parse_options({"endpoint": "h:1", "nameServer": "h:2", "topic": "t"})


def test_a_checkpoint_written_through_endpoint_restarts_through_name_server(spark, broker_sim_remoting, tmp_path):
    target = broker_sim_remoting
    topic = unique("spark-switch", target)
    create_topic(target.namesrv, topic, 2)
    with Producer(target.endpoint) as producer:
        producer.send_batch([Message(topic, b"before-%d" % i, queue_id=0) for i in range(10)])
    wait_held(target.namesrv, topic, 10)
    checkpoint = tmp_path / "checkpoint"
    through_endpoint = (spark.readStream.format("rocketmq-batch").option("endpoint", target.endpoint)
                        .option("topic", topic).option("startingOffsets", "earliest").load())
    first, _ = run_available_now(through_endpoint, checkpoint)
    assert len(first) == 10 and {r.broker for r in first} == {None}  # through endpoint: one broker, unnamed
    with Producer(name_server=target.namesrv) as producer:
        producer.send_batch([Message(topic, b"after-%d" % i, queue_id=0) for i in range(5)])
    wait_held(target.namesrv, topic, 15)
    second, _ = run_available_now(source(spark, target.namesrv, stream=True, topic=topic), checkpoint)
    assert bodies(second) == sorted(b"after-%d" % i for i in range(5))  # nothing read twice


# --- clusters of their own: brokers that stop, come back, join, leave --------------------------

def test_a_broker_killed_and_restarted_mid_query_loses_and_repeats_nothing(spark, tmp_path):
    with broker_sim_target(tmp_path / "a") as first, broker_sim_target(
            tmp_path / "b", "--broker-name", "broker-b", "--namesrv", first.namesrv) as second:
        topic = f"spark-kill-{int(time.time())}"
        create_topic(first.namesrv, topic, 1)
        java_produce(first.namesrv, topic, 400, threads=1, body_bytes=16)
        collected, lock = [], threading.Lock()

        def keep(batch, _batch_id):
            with lock:
                collected.extend(batch.collect())

        query = (source(spark, first.namesrv, stream=True, topic=topic, startingOffsets="earliest",
                        maxRecordsPerTrigger=50).writeStream.foreachBatch(keep)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="200 milliseconds")
                 .start())
        try:
            deadline = time.monotonic() + 60
            while len(collected) < 100 and time.monotonic() < deadline:
                time.sleep(0.1)
            second.process.send_signal(signal.SIGKILL)  # broker-b dies mid-query
            second.process.wait(30)
            java_produce(first.namesrv, topic, 100, threads=1, body_bytes=16)  # broker-a alone takes them
            time.sleep(2)
            assert query.exception() is None and query.isActive
            with second.restarted():  # broker-b comes back on its data and its address
                wait_held(first.namesrv, topic, 500)
                deadline = time.monotonic() + 90
                while len(collected) < 500 and time.monotonic() < deadline and query.isActive:
                    time.sleep(0.2)
                assert query.exception() is None
        finally:
            query.stop()
    assert len(collected) == len(set(positions(collected))) == 500  # nothing lost, nothing twice
    assert bodies(collected) == sorted([body(i, 16) for i in range(400)] + [body(i, 16) for i in range(100)])


def test_a_broker_that_joins_is_read_from_its_first_offset_and_one_that_leaves_is_named(spark, tmp_path):
    with broker_sim_target(tmp_path / "a") as first:
        topic = f"spark-join-{int(time.time())}"
        create_topic(first.namesrv, topic, 1)
        with Producer(name_server=first.namesrv) as producer:
            producer.send_batch([Message(topic, b"a-%d" % i) for i in range(5)])
        wait_held(first.namesrv, topic, 5)
        checkpoint = tmp_path / "checkpoint"
        stream = lambda **more: source(spark, first.namesrv, stream=True, topic=topic,  # noqa: E731
                                       startingOffsets="earliest", **more)
        rows, _ = run_available_now(stream(), checkpoint)
        assert bodies(rows) == sorted(b"a-%d" % i for i in range(5))
        with broker_sim_target(tmp_path / "b", "--broker-name", "broker-b", "--namesrv", first.namesrv) as second:
            with Admin(second.endpoint) as admin:  # broker-b serves the topic too, from now on
                admin.create_topic(topic, 1, "BatchCQ")
            with Producer(second.endpoint) as producer:
                producer.send_batch([Message(topic, b"b-%d" % i) for i in range(4)])
            wait_held(first.namesrv, topic, 9)
            rows, _ = run_available_now(stream(), checkpoint)
            assert positions(rows) == [("broker-b", 0, offset) for offset in range(4)]  # from its first offset
        # broker-b stopped (it unregisters): its queue is gone, and what it might still have held is
        # data loss, named; with failOnDataLoss false the query goes on without it.
        with pytest.raises(Exception, match="broker broker-b no longer serves the topic"):
            run_available_now(stream(), checkpoint)
        with Producer(name_server=first.namesrv) as producer:
            producer.send_batch([Message(topic, b"a-late")])
        rows, _ = run_available_now(stream(failOnDataLoss=False), checkpoint)
        assert bodies(rows) == [b"a-late"]


# --- RocketMQ's C++ client on both sides of Spark ------------------------------------------

def test_the_cpp_client_s_messages_are_read_and_spark_s_are_pulled_back_by_it(spark, target):
    """Written by Apache RocketMQ's C++ client (PyPI rocketmq), a body over 4 KiB compressed by
    it (zlib), read by Spark; written by Spark, pulled by the C++ client with their ids."""
    client = pytest.importorskip("rocketmq.client", reason="the C++ client (PyPI rocketmq) is not installed")
    topic, written = unique("spark-cpp-in", target), unique("spark-cpp-out", target)
    create_topic(target.namesrv, topic, 2, "SimpleCQ")
    create_topic(target.namesrv, written, 2, "SimpleCQ")
    producer = client.Producer(unique("cpp-producer", target))
    producer.set_namesrv_addr(target.namesrv)
    producer.start()
    try:
        sent = [b"cpp-%d" % i for i in range(20)] + [b"large-" + b"z" * 10_000]  # compressed by the client
        for body_bytes in sent:
            message = client.Message(topic)
            message.set_tags("Cpp")
            message.set_keys("k")
            message.set_body(body_bytes)
            assert producer.send_sync(message).status == client.SendStatus.OK
    finally:
        producer.shutdown()
    wait_held(target.namesrv, topic, len(sent))
    rows = source(spark, target.namesrv, topic=topic).collect()
    assert bodies(rows) == sorted(sent) and {r.tags for r in rows} == {"Cpp"}

    (spark.createDataFrame([(f"from-spark-{i}",) for i in range(30)], "body string").write.format("rocketmq-batch")
     .mode("append").option("nameServer", target.namesrv).option("topic", written).save())
    wait_held(target.namesrv, written, 30)
    consumer = queue_pull_consumer(client, unique("cpp-pull", target))
    consumer.set_namesrv_addr(target.namesrv)
    consumer.start()
    pulled, deadline = [], time.monotonic() + 60
    try:
        while len(pulled) < 30 and time.monotonic() < deadline:
            pulled += [(m.body, m.id) for m in consumer.pull(written)]
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    assert sorted(b for b, _id in pulled) == sorted(f"from-spark-{i}".encode() for i in range(30))
    assert len({i for _b, i in pulled}) == 30 and all(re.fullmatch(r"[0-9A-F]{32}", i) for _b, i in pulled)


def queue_pull_consumer(client, group: str):
    """The binding's PullConsumer keeps its pull offsets in one table keyed by topic and queue id
    only (two brokers' queue 0 would share one): keyed by broker too."""
    class QueuePullConsumer(client.PullConsumer):
        def __init__(self, name: str):
            super().__init__(name)
            self.offset_table = {}

        def _get_mq_key(self, mq):
            return f"{mq.topic}@{mq.brokerName}@{mq.queueId}"

    return QueuePullConsumer(group)


def test_a_write_to_a_missing_topic_of_a_cluster_that_makes_topics_makes_it(spark, rocketmq, rocketmq_auto_create):
    """RocketMQ's own autoCreateTopicEnable is honoured: the writer sends a new topic's first rows by
    TBW102's route and the broker makes the topic (with the 4 queues RocketMQ's producers ask); a
    cluster that makes none refuses the write before a row is written, in one sentence."""
    topic = f"made-on-write-{int(time.time() * 1000)}"
    rows = spark.range(0, 40, 1, 2).selectExpr("cast(concat('row-', id) as binary) as body")
    making = rocketmq_auto_create.namesrv_addr
    rows.write.format("rocketmq-batch").mode("append").option("nameServer", making).option("topic", topic).save()
    info, _queues = Admin(name_server=making).describe_topic(topic)
    assert info.queue_count == 4
    back = spark.read.format("rocketmq-batch").option("nameServer", making).option("topic", topic).load()
    assert sorted(bytes(r.body) for r in back.collect()) == sorted(b"row-%d" % i for i in range(40))
    with Producer(name_server=making) as producer:  # the SDK's own sends alike
        producer.send(Message(f"{topic}-sdk", b"x"))
    assert Admin(name_server=making).describe_topic(f"{topic}-sdk")[0].queue_count == 4
    strict = rocketmq.namesrv_addr
    with pytest.raises(Exception) as refused:
        rows.write.format("rocketmq-batch").mode("append").option("nameServer", strict).option("topic", topic).save()
    sentence = (f"topic '{topic}' does not exist on the name servers {strict}, whose brokers create no topic on a "
                "first send (autoCreateTopicEnable=false): create it first (mqadmin updateTopic")
    assert str(refused.value).count(sentence) == 1, str(refused.value)[-3000:]
