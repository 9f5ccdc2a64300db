"""ACLs on the real RocketMQ 5.5.0 (ACL 2.0: authenticationEnabled and authorizationEnabled, a user
and its ACL made as mqadmin's createUser and createAcl make them; peers/rocketmq.py, ``acl=True``):
through ``nameServer``, the connector's batch read and write, the SDK's sends, reads and offsets,
and rmq-admin, signed with the account's keys, are served; a wrong secret, an unknown access key,
no keys, and an account without permission on the topic are refused with our sentence (what was
refused, and what to do), the class of rmq_spark.errors that says which, and nothing is stored."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from rmq_spark import (
    Admin,
    AuthenticationError,
    Credentials,
    Message,
    OffsetRange,
    PermissionDeniedError,
    Producer,
    RangeReader,
    TransportConfig,
)
from rmq_spark.client.remoting import RemotingTransport

# All on one worker (the Spark session's): one broker with ACLs is started, not one per worker.
pytestmark = [pytest.mark.peers, pytest.mark.xdist_group("spark")]

TOPIC, DENIED_TOPIC, GROUP, EO_TOPIC = "acl-orders", "acl-audit", "acl-readers", "acl-exactly-once"
ACCESS_KEY, SECRET_KEY = "acl-alice", "alice-secret-1"  # may use TOPIC and its groups, not DENIED_TOPIC
# Reads pull as a consumer group (the query's consumer group, or this one): the account subscribes with it.
READER_GROUP = "rocketmq-batch-reader"
_unique = itertools.count()

# (keys, topic, class, what our sentence says): the refusals, each a sentence of ours.
WRONG = {
    "a wrong secret": ((ACCESS_KEY, "not-her-secret"), TOPIC, AuthenticationError,
                       "the signature does not match the secret key the broker holds for "),
    "an unknown access key": (("acl-nobody", "nobody-secret"), TOPIC, AuthenticationError,
                              "access key 'acl-nobody' is not an account of the broker: check accessKey"),
    "no keys": (None, TOPIC, AuthenticationError,
                "the broker checks ACLs and the request was not signed: give the account's accessKey and secretKey"),
    "no permission on the topic": ((ACCESS_KEY, SECRET_KEY), DENIED_TOPIC, PermissionDeniedError,
                                   f"may not use topic '{DENIED_TOPIC}': ask the broker's admin to grant it"),
}


@pytest.fixture(scope="module", params=["rocketmq_acl", "rocketmq4_acl"])
def acl(request):
    """Each real version with ACLs, its topics and the account made (the peers, by version)."""
    rocketmq_acl = request.getfixturevalue(request.param)
    rocketmq_acl.create_topic(TOPIC, queues=4, batch_cq=False)
    rocketmq_acl.create_topic(DENIED_TOPIC, queues=2, batch_cq=False)
    rocketmq_acl.create_topic(EO_TOPIC, queues=2, batch_cq=False)
    rocketmq_acl.add_account(ACCESS_KEY, SECRET_KEY, topics=(TOPIC, EO_TOPIC), groups=(GROUP, READER_GROUP))
    with Producer(name_server=rocketmq_acl.namesrv_addr, auto_batch=False,
                  transport=TransportConfig(credentials=rocketmq_acl.credentials)) as producer:
        for topic in (TOPIC, DENIED_TOPIC):  # something to read in each, sent by the admin
            producer.send(Message(topic, b"by the admin"))
    for topic in (TOPIC, DENIED_TOPIC):
        wait_stored(rocketmq_acl, topic, 1)
    return rocketmq_acl


def transport(keys) -> TransportConfig:
    return TransportConfig(credentials=Credentials(*keys) if keys else None, retries=0)


def admin_of(cluster) -> Admin:
    return Admin(name_server=cluster.namesrv_addr, transport=TransportConfig(credentials=cluster.credentials))


def ranges(cluster, topic: str) -> list[OffsetRange]:
    with admin_of(cluster) as admin:
        return [OffsetRange(q.topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                for q in admin.offsets([topic])[topic]]


def stored(cluster, topic: str) -> int:
    return sum(r.end - r.start for r in ranges(cluster, topic))


def wait_stored(cluster, topic: str, count: int, timeout_s: float = 20) -> None:
    """A send returns before its message is indexed: wait until the queues hold ``count``."""
    deadline = time.monotonic() + timeout_s
    while stored(cluster, topic) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stored(cluster, topic) == count


def assert_ours(error: Exception, cls: type, says: str) -> None:
    """Our sentence, of the class that says which refusal, with no Java in it."""
    assert isinstance(error, cls), repr(error)
    assert says in str(error) and "org.apache" not in str(error) and "Exception" not in str(error), str(error)


def test_the_sdk_sends_reads_and_keeps_offsets_with_the_account(acl):
    keys = transport((ACCESS_KEY, SECRET_KEY))
    before = stored(acl, TOPIC)
    bodies = [f"sdk-{uuid.uuid4().hex[:8]}-{i}".encode() for i in range(20)]
    with Producer(name_server=acl.namesrv_addr, transport=keys, auto_batch=False) as producer:
        sent = [producer.send(Message(TOPIC, body, tags="T")) for body in bodies]
    assert all(r.broker == "broker-a" for r in sent)
    wait_stored(acl, TOPIC, before + len(bodies))

    with Admin(name_server=acl.namesrv_addr, transport=keys) as admin:  # offsets, as the account sees them
        queues = admin.offsets([TOPIC])[TOPIC]
        assert sum(q.max_offset - q.min_offset for q in queues) == before + len(bodies)
        first = sent[0]
        admin.commit_group_offsets(GROUP, {(TOPIC, first.broker, first.queue_id): first.queue_offset + 1})
        committed = [(o.queue_id, o.offset) for o in admin.group_offsets(GROUP, [TOPIC]) if o.offset]
        assert committed == [(first.queue_id, first.queue_offset + 1)]

    with RangeReader(name_server=acl.namesrv_addr, transport=keys) as reader:
        table = reader.read_table([OffsetRange(q.topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                                   for q in queues])
    assert set(bodies) <= set(table.column("body").to_pylist())


def test_a_query_by_unique_key_is_signed_as_the_broker_checks_it(acl):
    """QUERY_MESSAGE with _UNIQUE_KEY_QUERY (how exactly-once finds a committed half message):
    the broker leaves that field out of what it checks for a request of our version
    (rmq_wire/signing.py); signed with it, the broker refused it as a wrong secret."""
    keys = transport((ACCESS_KEY, SECRET_KEY))
    with Producer(name_server=acl.namesrv_addr, transport=keys, auto_batch=False) as producer:
        sent = producer.send(Message(TOPIC, b"looked up"))
    transport_ = RemotingTransport(acl.namesrv_addr, keys)
    try:
        deadline = time.monotonic() + 20  # the index of keys is built after the send returns
        while not transport_.message_exists(TOPIC, sent.broker, sent.message_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert transport_.message_exists(TOPIC, sent.broker, sent.message_id)
        assert not transport_.message_exists(TOPIC, sent.broker, "0" * 32)
    finally:
        transport_.close()


@pytest.mark.parametrize("case", list(WRONG))
def test_wrong_keys_are_refused_with_our_sentence_and_nothing_is_stored(acl, case):
    keys, topic, cls, says = WRONG[case]
    before = stored(acl, topic)
    with pytest.raises(cls) as sending:
        with Producer(name_server=acl.namesrv_addr, transport=transport(keys), auto_batch=False) as producer:
            producer.send(Message(topic, b"refused"))
    assert_ours(sending.value, cls, says)
    with pytest.raises(cls) as reading:
        with RangeReader(name_server=acl.namesrv_addr, transport=transport(keys)) as reader:
            reader.read_table(ranges(acl, topic))
    assert_ours(reading.value, cls, says)
    if topic == TOPIC:  # an account's offsets of a topic it may use are its own to read (Topic Get)
        with pytest.raises(cls) as offsets:
            with Admin(name_server=acl.namesrv_addr, transport=transport(keys)) as admin:
                admin.offsets([topic])
        assert_ours(offsets.value, cls, says)
    assert stored(acl, topic) == before


def rmq_admin(cluster, *args: str, secret: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RMQ_SECRET_KEY"}
    if secret is not None:
        env["RMQ_SECRET_KEY"] = secret
    return subprocess.run([sys.executable, "-m", "rmq_spark.cli", "--name-server", cluster.namesrv_addr, *args],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_rmq_admin_with_the_account(acl):
    described = rmq_admin(acl, "--access-key", ACCESS_KEY, "--json", "topic", "describe", TOPIC, secret=SECRET_KEY)
    assert described.returncode == 0, described.stderr
    assert sum(queue["messages"] for queue in json.loads(described.stdout)) == stored(acl, TOPIC)
    listed = rmq_admin(acl, "--access-key", ACCESS_KEY, "--json", "topic", "list", secret=SECRET_KEY)
    assert listed.returncode == 0 and f'"{TOPIC}"' in listed.stdout, listed.stderr
    for case in ("a wrong secret", "an unknown access key"):
        (access_key, secret), _topic, _cls, says = WRONG[case]
        refused = rmq_admin(acl, "--access-key", access_key, "topic", "describe", TOPIC, secret=secret)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.startswith("rmq-admin: ") and says in refused.stderr
        assert refused.stderr.count("\n") == 1 and "org.apache" not in refused.stderr, refused.stderr


def spark_write(spark, cluster, topic: str, keys, rows: list[str]) -> None:
    writer = (spark.createDataFrame([(row,) for row in rows], "body string").write.format("rocketmq-batch")
              .option("nameServer", cluster.namesrv_addr).option("topic", topic))
    if keys:
        writer = writer.option("accessKey", keys[0]).option("secretKey", keys[1])
    writer.mode("append").save()


def spark_read(spark, cluster, topic: str, keys) -> list[bytes]:
    reader = spark.read.format("rocketmq-batch").option("nameServer", cluster.namesrv_addr).option("topic", topic)
    if keys:
        reader = reader.option("accessKey", keys[0]).option("secretKey", keys[1])
    return [bytes(r.body) for r in reader.load().select("body").collect()]


def test_spark_reads_and_writes_with_the_account(spark, acl):
    rows = [f"spark-{next(_unique)}-{uuid.uuid4().hex[:8]}-{i}" for i in range(50)]
    before = stored(acl, TOPIC)
    spark_write(spark, acl, TOPIC, (ACCESS_KEY, SECRET_KEY), rows)
    wait_stored(acl, TOPIC, before + len(rows))
    read = spark_read(spark, acl, TOPIC, (ACCESS_KEY, SECRET_KEY))
    assert {row.encode() for row in rows} <= set(read)


@pytest.mark.parametrize("case", ["a wrong secret", "an unknown access key", "no permission on the topic"])
def test_spark_with_wrong_keys_fails_saying_so(spark, acl, case):
    keys, topic, _cls, says = WRONG[case]
    before = stored(acl, topic)
    with pytest.raises(Exception) as reading:
        spark_read(spark, acl, topic, keys)
    assert says in str(reading.value)
    if acl.major == 4 and topic == DENIED_TOPIC:
        # RocketMQ 4.9's ACL 1.0 checks a batch send's signature but not its topic: its
        # PlainAccessValidator parses SEND_MESSAGE and SEND_MESSAGE_V2, not SEND_BATCH_MESSAGE, the
        # writers' request. The batch is stored (docs/rocketmq-clusters.md says so); a single send
        # is refused (test_wrong_keys_are_refused_with_our_sentence_and_nothing_is_stored).
        spark_write(spark, acl, topic, keys, ["stored by RocketMQ 4"])
        wait_stored(acl, topic, before + 1)
        return
    with pytest.raises(Exception) as writing:
        spark_write(spark, acl, topic, keys, ["refused"])
    assert says in str(writing.value)
    assert stored(acl, topic) == before


def test_a_stream_is_written_exactly_once_with_the_account(spark, acl, tmp_path):
    """deliveryGuarantee=exactlyOnce (RocketMQ's transactional messages: half messages, then
    END_TRANSACTION) with the account's keys, the last micro-batch replayed as after a driver
    that died before Spark recorded its commit: each row once."""
    keys = {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}
    before = stored(acl, TOPIC)
    rows = [b"eo-%05d" % i for i in range(300)]
    (spark.createDataFrame([(row,) for row in rows], "body binary").write.format("rocketmq-batch")
     .option("nameServer", acl.namesrv_addr).option("topic", TOPIC).options(**keys).mode("append").save())
    wait_stored(acl, TOPIC, before + len(rows))
    checkpoint = tmp_path / "checkpoint"

    def run() -> int:
        query = (spark.readStream.format("rocketmq-batch").option("nameServer", acl.namesrv_addr)
                 .option("topic", TOPIC).options(**keys).option("startingOffsets", "earliest")
                 .option("maxRecordsPerTrigger", 2_000).load().select("body")
                 .writeStream.format("rocketmq-batch").option("nameServer", acl.namesrv_addr)
                 .option("topic", EO_TOPIC).options(**keys).option("deliveryGuarantee", "exactlyOnce")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(180) and query.exception() is None
            return max(p["batchId"] for p in query.recentProgress)
        finally:
            query.stop()

    last = run()
    (checkpoint / "commits" / str(last)).unlink()  # the driver died before Spark recorded the commit
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run()
    wait_stored(acl, EO_TOPIC, stored(acl, TOPIC))
    read = spark_read(spark, acl, EO_TOPIC, (ACCESS_KEY, SECRET_KEY))
    assert len(read) == len(set(read)) == stored(acl, TOPIC) and set(rows) <= set(read)
