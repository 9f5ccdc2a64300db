"""The connector through a restarting RocketMQ (issue 45): the real RocketMQ 5.5.0's broker and
name server SIGKILLed and started again, in a micro-batch (after Spark planned it, while its
tasks read and write) and between micro-batches, under a streaming query with each writer; every
row comes out once. Below Spark, the SDK: a read planned before its broker died waits for it, a
send waits for a broker, reads and writes go on with the last known route while the name server
is down, and each wait is said once per broker, not per queue per retry.

The cluster is this module's own (its processes are killed); its broker registers every 10 s
(RocketMQ's shortest period), so that a restarted name server knows it again within seconds.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import os
import signal
import sys
import time

import pytest
from pyspark import cloudpickle

import peers
from rmq_spark import Admin, Message, OffsetRange, Producer, RangeReader, TransportConfig
from rmq_spark.client.remoting import RemotingTransport
from rmq_spark.errors import BrokerUnavailableError
from rmq_spark.spark import RocketMQBatchDataSource

_names = itertools.count()
ROWS_PER_BATCH = 100


@pytest.fixture(autouse=True)
def _jvm(require_java_peers):
    """Every test here runs the real RocketMQ: marked so (tests/conftest.py)."""


@pytest.fixture(scope="module")
def cluster():
    try:
        peers.jars("rocketmq")
    except peers.PeersMissing as missing:
        pytest.skip(str(missing))
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster(heap_mb=384, broker_settings={"registerNameServerPeriod": "10000"}) as restarting:
        yield restarting


def restart_when_dead(cluster, what: str, timeout_s: float = 180) -> None:
    """Start ``what`` ("broker" or "name server") again once it is seen dead (killed by the test,
    or by Spark's planning in a process of its own), and wait until the broker is routed again.
    Started from the test's own thread: a peer dies with the thread that started it."""
    deadline = time.monotonic() + timeout_s
    while cluster.running()[what]:
        assert time.monotonic() < deadline, f"the {what} was not killed within {timeout_s:.0f} s"
        time.sleep(0.1)
    cluster.start_broker() if what == "broker" else cluster.start_name_server()
    wait_routed(cluster)


@pytest.fixture
def restarted(cluster):
    """Whatever a failed test left down is started again, for the next test."""
    yield
    running = cluster.running()
    if not running["name server"]:
        cluster.start_name_server()
    if not running["broker"]:
        cluster.start_broker()
    wait_routed(cluster)


def wait_routed(cluster, timeout_s: float = 60) -> None:
    """The broker registered (again) at the name server."""
    deadline = time.monotonic() + timeout_s
    while not cluster.broker_registered():
        assert time.monotonic() < deadline, f"the broker did not register at the name server within {timeout_s:.0f} s"
        time.sleep(0.2)


def new_topic(cluster, prefix: str) -> str:
    name = f"{prefix}-{next(_names)}-{int(time.time())}"
    cluster.create_topic(name, 2, batch_cq=False)
    return name


def produce(cluster, topic: str, start: int, count: int, **batching) -> None:
    with Producer(name_server=cluster.namesrv_addr, **batching) as producer:
        for i in range(start, start + count):
            producer.send_async(Message(topic, b"row-%05d" % i))
        producer.flush()


def indexed(cluster, topic: str, count: int, timeout_s: float = 30) -> list[OffsetRange]:
    """The topic's queues as ranges, once they hold ``count`` (RocketMQ answers a send once it is
    in the commit log, and indexes it in the consume queue a moment later), or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        with Admin(name_server=cluster.namesrv_addr) as admin:
            ranges = [OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                      for q in admin.offsets([topic])[topic]]
        if sum(r.end - r.start for r in ranges) >= count or time.monotonic() > deadline:
            return ranges
        time.sleep(0.1)


def bodies(cluster, topic: str, count: int) -> list[bytes]:
    with RangeReader(name_server=cluster.namesrv_addr) as reader:
        return sorted(reader.read_table(indexed(cluster, topic, count)).column("body").to_pylist())


def expected(count: int) -> list[bytes]:
    return [b"row-%05d" % i for i in range(count)]


# --- the SDK ------------------------------------------------------------------------------------


def test_a_read_and_a_send_wait_for_a_killed_broker_and_say_so_once(cluster, restarted, caplog):
    """The read was planned (its offsets known) before the broker died, as a Spark task's is;
    the send is made while it is down. Before: the read failed at once with 'topic ... is not
    served by any broker: create it', the send with 'topic does not exist: create it first', and
    each waiting queue logged a line every 0.5 s."""
    topic, sent = new_topic(cluster, "wait-read"), new_topic(cluster, "wait-send")
    produce(cluster, topic, 0, 400)
    ranges = indexed(cluster, topic, 400)
    cluster.kill_broker()
    caplog.set_level(logging.WARNING, logger="rmq_spark")
    patient = TransportConfig(timeout_ms=180_000)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        read = pool.submit(lambda: RangeReader(name_server=cluster.namesrv_addr, transport=patient).read_table(ranges))
        # as patient as the read: a RocketMQ broker restarting on a busy machine registers again in 60 s or more
        produced = pool.submit(produce, cluster, sent, 0, 300, send_timeout_ms=180_000, delivery_timeout_ms=180_000)
        restart_when_dead(cluster, "broker")
        assert sorted(read.result(180).column("body").to_pylist()) == expected(400)
        produced.result(180)
    assert bodies(cluster, sent, 300) == expected(300)
    waits = [r.getMessage() for r in caplog.records if r.name.startswith("rmq_spark")]
    assert 1 <= len(waits) <= 4, waits  # a line per broker and topic waited for, not per queue per retry
    assert not any("create it" in line for line in waits), waits


def test_reads_and_sends_go_on_while_the_name_server_is_down(cluster, restarted, caplog):
    """Before: both failed within 1 s with 'cannot connect to 127.0.0.1:PORT' (a port not named as
    the name server's) and went on failing until the broker registered again."""
    topic = new_topic(cluster, "ns-down")
    produce(cluster, topic, 0, 200)  # the route is known in this process
    cluster.kill_name_server()
    caplog.set_level(logging.WARNING, logger="rmq_spark")
    try:
        produce(cluster, topic, 200, 200)
        ranges = indexed(cluster, topic, 400)
        with RangeReader(name_server=cluster.namesrv_addr) as reader:
            assert reader.read_table(ranges).num_rows == 400
        transport = RemotingTransport(cluster.namesrv_addr, TransportConfig())
        try:  # a topic never routed in this process: the sentence names the name server refused
            with pytest.raises(BrokerUnavailableError, match=f"no name server answers \\({cluster.namesrv_addr}\\)"):
                transport.route(f"never-routed-{time.time_ns()}", last_known=True)
        finally:
            transport.close()
    finally:
        cluster.start_name_server()
    said = [r.getMessage() for r in caplog.records if "last known" in r.getMessage()]
    assert len(said) == 1 and topic in said[0], said  # once per topic, not per send or pull
    wait_routed(cluster)
    assert bodies(cluster, topic, 400) == expected(400)


# --- a streaming query ----------------------------------------------------------------------------


class _Faulty(RocketMQBatchDataSource):
    """rocketmq-batch whose planning kills a process (option ``killAt``: ``N:PID``) just after it
    planned the Nth micro-batch with rows: that batch's tasks then read and write with it dead.
    Pickled by value into Spark's planning process (it is not installed there)."""

    def __init__(self, options):
        self.kill_at = next(v for k, v in options.items() if k.lower() == "killat")
        super().__init__({k: v for k, v in options.items() if k.lower() != "killat"})

    @classmethod
    def name(cls) -> str:
        return "rocketmq-batch-faulty"

    def streamReader(self, schema):
        reader = super().streamReader(schema)
        at, pid = (int(part) for part in self.kill_at.split(":"))
        latest, planned = reader.latestOffset, []

        def latest_offset(*args):
            end = latest(*args)
            start = args[0] if args else None
            if end != start and end not in planned:
                planned.append(end)
                if len(planned) == at:
                    os.killpg(pid, signal.SIGKILL)
            return end

        reader.latestOffset = latest_offset
        return reader


@pytest.mark.parametrize("guarantee, in_batch, between", [("exactlyOnce", "broker", "name server"),
                                                          ("atLeastOnce", "name server", "broker")])
def test_a_stream_rides_through_kills_in_and_between_micro_batches(spark, cluster, restarted, tmp_path, guarantee,
                                                                    in_batch, between):
    """Three micro-batches of 100 rows; Spark's planning of the second kills ``in_batch``, so its
    tasks read and write while it is down; once the query caught up, the test kills ``between``
    and, while it is down or restarting, 100 more rows come. Every row is written once."""
    source, sink = new_topic(cluster, "rs-src"), new_topic(cluster, "rs-out")
    produce(cluster, source, 0, 3 * ROWS_PER_BATCH)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(_Faulty)
    victim = cluster.broker_pid if in_batch == "broker" else cluster.name_server_pid
    query = (spark.readStream.format("rocketmq-batch-faulty").option("nameServer", cluster.namesrv_addr)
             .option("topic", source).option("startingOffsets", "earliest").option("fetchTimeout", "3m")
             .option("maxRecordsPerTrigger", ROWS_PER_BATCH).option("killAt", f"2:{victim}").load().select("body")
             .writeStream.format("rocketmq-batch").option("nameServer", cluster.namesrv_addr).option("topic", sink)
             .option("deliveryGuarantee", guarantee).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .start())
    try:
        restart_when_dead(cluster, in_batch)
        written_once(cluster, query, sink, 3 * ROWS_PER_BATCH)
        if between == "broker":
            cluster.kill_broker()
            restart_when_dead(cluster, "broker")
            produce(cluster, source, 300, ROWS_PER_BATCH)
        else:
            cluster.kill_name_server()
            produce(cluster, source, 300, ROWS_PER_BATCH)  # on the route this process knows
            restart_when_dead(cluster, "name server")
        written_once(cluster, query, sink, 4 * ROWS_PER_BATCH)
    finally:
        query.stop()
    assert query.exception() is None


def written_once(cluster, query, topic: str, count: int, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(r.end - r.start for r in indexed(cluster, topic, count, timeout_s=0)) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"{count} rows were not written within {timeout_s:.0f} s"
        time.sleep(0.5)
    assert bodies(cluster, topic, count) == expected(count)
