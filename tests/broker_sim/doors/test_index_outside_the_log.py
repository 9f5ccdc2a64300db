"""An index unit that points outside the commitlog (a log truncated under its index, or a
damaged unit) is a status the store returns, answered on each door with a sentence saying what
happened and what to do, never INTERNAL "a broker bug"; the offsets around it are read."""

from __future__ import annotations

import logging
import struct

import grpc
import pytest

from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.store import QueueType
from broker_sim.store.paths import StorePaths
from rmq_spark import Admin, CorruptedRecordError, Message, OffsetRange, Producer, RangeReader
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2
from rmq_wire.rocketmq_v2 import messaging_pb2_grpc as v2_grpc

TOPIC = "probe"
LOST = 5  # the offset whose unit points past the log's end
SIMPLE_UNIT = struct.Struct(">qiq")  # commitlog offset, size, tags code


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("outside")
    with Broker(data, "127.0.0.1", 0, remoting=RemotingOptions(0)) as first:
        endpoint = f"127.0.0.1:{first.port}"
        with Admin(endpoint) as admin:
            admin.create_topic(TOPIC, 1, "SimpleCQ")
        with Producer(endpoint, auto_batch=False) as producer:
            for i in range(10):
                producer.send(Message(TOPIC, b"m%d" % i, queue_id=0))
        assert first.core.store.wait_dispatched(10)
    [index] = StorePaths(data).queue_index(QueueType.SIMPLE_CQ, TOPIC, 0).iterdir()
    units = bytearray(index.read_bytes())
    struct.pack_into(">q", units, LOST * SIMPLE_UNIT.size, 1 << 40)  # far past the log's end
    index.write_bytes(units)
    with Broker(data, "127.0.0.1", 0, remoting=RemotingOptions(0)) as restarted:
        yield restarted


def test_our_door_names_the_offsets_and_what_happened(broker):
    with RangeReader(f"127.0.0.1:{broker.port}") as reader:
        with pytest.raises(CorruptedRecordError, match=f"offsets {LOST} to {LOST}.*commitlog holds offsets 0 to "
                                                       r"\d+ only: the log was truncated.*on_data_loss='skip'"):
            reader.read_table([OffsetRange(TOPIC, 0, 0, 10)])
    with RangeReader(f"127.0.0.1:{broker.port}", on_data_loss="skip") as reader:
        offsets = reader.read_table([OffsetRange(TOPIC, 0, 0, 10)]).column("queue_offset").to_pylist()
    assert offsets == [o for o in range(10) if o != LOST]


def test_reads_through_name_servers_fail_on_the_skipped_offsets_or_skip_them_saying_so(broker, caplog):
    """A pull answered "read on from offset 6" is data loss: with on_data_loss='fail' (Spark's
    failOnDataLoss) the read fails naming the offsets, as through our door; with 'skip' it reads
    on past exactly those, with a warning."""
    name_server = broker.remoting.address
    for start in (0, LOST):  # the damaged unit after records read by the same pulls, and first
        with RangeReader(name_server=name_server) as reader:
            with pytest.raises(CorruptedRecordError, match=f"offsets {LOST} to {LOST}.*the log was truncated.*"
                                                           "on_data_loss='skip'") as failed:
                reader.read_table([OffsetRange(TOPIC, 0, start, 10)])
        assert (failed.value.first_offset, failed.value.end_offset) == (LOST, LOST + 1)
    with caplog.at_level(logging.WARNING, "rmq_spark.consumer.range_reader"):
        with RangeReader(name_server=name_server, on_data_loss="skip") as reader:
            offsets = reader.read_table([OffsetRange(TOPIC, 0, 0, None)]).column("queue_offset").to_pylist()
    assert offsets == [o for o in range(10) if o != LOST]
    assert f"offsets {LOST} to {LOST} skipped" in caplog.text


def test_the_remoting_door_answers_a_pull_with_where_to_read_on(broker):
    with RemotingConnection(f"127.0.0.1:{broker.remoting.server.port}", timeout_s=5) as connection:
        pulled = connection.invoke(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g", "topic": TOPIC, "queueId": 0, "queueOffset": LOST, "maxMsgNums": 32, "sysFlag": 0,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}, timeout_s=5)
        assert pulled.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert pulled.ext_fields["nextBeginOffset"] == str(LOST + 1)
        assert "the log was truncated" in pulled.remark and f"read on from offset {LOST + 1}" in pulled.remark
        for timestamp in (0, 2**62):  # a search by time steps over the unit
            found = connection.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": TOPIC, "queueId": 0,
                                                                               "timestamp": timestamp}, timeout_s=5)
            assert found.code == ResponseCode.SUCCESS, found.remark
    with Admin(f"127.0.0.1:{broker.port}") as admin:
        assert admin.offsets_for_timestamp(TOPIC, 2**62) == {0: 10}


def test_the_v2_door_answers_a_pull_with_where_to_read_on(broker):
    channel = grpc.insecure_channel(f"127.0.0.1:{broker.port}")
    try:
        stub = v2_grpc.MessagingServiceStub(channel)
        queue = v2.MessageQueue(topic=v2.Resource(name=TOPIC), id=0)
        frames = list(stub.PullMessage(v2.PullMessageRequest(group=v2.Resource(name="g"), message_queue=queue,
                                                             offset=LOST, batch_size=32), timeout=10))
    finally:
        channel.close()
    assert frames[0].status.code == v2.OK and "the log was truncated" in frames[0].status.message
    assert frames[-1].next_offset == LOST + 1
