"""broker_sim's remoting door, request by request, over a real TCP connection to an in-process
broker: the name server's answers, sends of every kind, pulls, offsets, transactions, and bad
input that gets an answer (or a closed connection) while the broker stays up."""

from __future__ import annotations

import base64
import select
import socket
import struct
import threading
import time
import zlib

import orjson
import pytest

from broker_sim.broker import Broker
from broker_sim.doors.checks import CheckSettings
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.store import QueueType
from rmq_spark import Message, OffsetRange, Producer, RangeReader
from rmq_wire import record as fmt
from rmq_wire.remoting import (
    FLAG_ONEWAY,
    RemotingCommand,
    RemotingConnection,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode,
)
from support.wire import extra_info, pop, properties_text, pull, records, send, send_batch, uniq_key, wait_indexed


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with Broker(tmp_path_factory.mktemp("remoting"), "127.0.0.1", 0, remoting=RemotingOptions(port=0),
                transaction_checks=CheckSettings(interval_ms=300), auto_create_topics=None) as started:
        started.core.create_topic("batch-topic", 4, QueueType.BATCH_CQ)
        started.core.create_topic("simple-topic", 4, QueueType.SIMPLE_CQ)
        yield started


@pytest.fixture
def conn(broker):
    with RemotingConnection(broker.remoting.address) as connection:
        yield connection


def fetch(conn, topic: str, queue_id: int, offset: int, ready: int | None = None, **options):
    """A pull once the queue holds ``ready`` messages (default: the one at ``offset``). Waiting by
    a suspended pull alone would not do: a pull past the queue's end answers OFFSET_MOVED at once."""
    wait_indexed(conn, topic, queue_id, offset + 1 if ready is None else ready)
    return pull(conn, topic, queue_id, offset, **options)


def new_topic(broker, name: str, queues: int = 1, queue_type=QueueType.SIMPLE_CQ) -> str:
    broker.core.create_topic(name, queues, queue_type)
    return name


# --- name server ---------------------------------------------------------------------------

def test_routes_name_this_broker_and_its_queues(broker, conn):
    answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "batch-topic"})
    assert answer.code == ResponseCode.SUCCESS
    route = orjson.loads(answer.body)
    assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                    "topicSysFlag": 0}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.remoting.address}
    assert route["brokerDatas"][0]["cluster"] == "DefaultCluster"


def test_an_unknown_topic_has_no_route(conn):
    answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nowhere"})
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert "nowhere" in answer.remark


def test_cluster_info_and_topic_list(broker, conn):
    info = orjson.loads(conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"] == broker.remoting.address
    topics = orjson.loads(conn.invoke(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert {"batch-topic", "simple-topic"} <= set(topics)


# --- sends and pulls -----------------------------------------------------------------------

@pytest.mark.parametrize("v2", [True, False])
def test_a_send_is_stored_with_its_properties_and_pulled_as_stored(broker, conn, v2):
    topic = new_topic(broker, f"one-send-{v2}")
    answer = send(conn, topic, b"hello", tags="TagA", keys="k1 k2", properties={"color": "red"}, v2=v2)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert (answer.ext_fields["queueId"], answer.ext_fields["queueOffset"]) == ("0", "0")
    assert len(answer.ext_fields["msgId"]) == 32  # the offsetMsgId: store host and position
    got = fetch(conn, topic, 0, 0)
    assert got.code == ResponseCode.SUCCESS
    assert got.ext_fields["nextBeginOffset"] == "1"
    [(stored_topic, offset, _flag, props, body)] = records(got.body)
    assert (stored_topic, offset, body) == (topic, 0, b"hello")
    assert (props["TAGS"], props["KEYS"], props["color"]) == ("TagA", "k1 k2", "red")


def test_a_batch_into_a_batchcq_topic_is_one_inner_batch(broker, conn):
    topic = new_topic(broker, "inner", 1, QueueType.BATCH_CQ)
    answer = send_batch(conn, topic, [b"a", b"b", b"c"])
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert answer.ext_fields["batchUniqId"]  # the client then reads msgId as the batch's one id
    assert "," not in answer.ext_fields["msgId"]
    got = fetch(conn, topic, 0, 0)
    [(_t, offset, sys_flag, props, _payload)] = records(got.body)
    assert (offset, props["INNER_NUM"]) == (0, "3")
    assert sys_flag & 0x80  # INNER_BATCH
    assert got.ext_fields["nextBeginOffset"] == "3"


def test_a_batch_into_a_simplecq_topic_is_unpacked(broker, conn):
    topic = new_topic(broker, "unpacked")
    answer = send_batch(conn, topic, [b"a", b"b", b"c"])
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert len(answer.ext_fields["msgId"].split(",")) == 3
    got = records(fetch(conn, topic, 0, 0, ready=3).body)
    assert [(o, b) for _t, o, _f, _p, b in got] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_a_compressed_batch_is_inflated_and_unpacked(broker, conn):
    topic = new_topic(broker, "inflated")
    payload = zlib.compress(fmt.encode_message_batch([(b"x" * 3000, {}, 0), (b"y" * 3000, {}, 0)]))
    answer = send_batch(conn, topic, [], payload=payload, sys_flag=0x1)  # as the C++ client sends batches
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert [b for *_x, b in records(fetch(conn, topic, 0, 0, ready=2).body)] == [b"x" * 3000, b"y" * 3000]
    garbage = send_batch(conn, topic, [], payload=b"not zlib at all", sys_flag=0x1)
    assert garbage.code == ResponseCode.MESSAGE_ILLEGAL


def test_a_pull_stops_at_its_message_count_on_whole_records(broker, conn):
    topic = new_topic(broker, "counted")
    for i in range(10):
        send(conn, topic, b"m%d" % i)
    got = fetch(conn, topic, 0, 2, ready=10, max_messages=4)
    assert [o for _t, o, *_ in records(got.body)] == [2, 3, 4, 5]
    assert got.ext_fields["nextBeginOffset"] == "6"
    assert (got.ext_fields["minOffset"], got.ext_fields["maxOffset"]) == ("0", "10")


def test_pull_answers_at_the_end_and_past_it(broker, conn):
    topic = new_topic(broker, "ends")
    send(conn, topic, b"x")
    fetch(conn, topic, 0, 0)
    at_end = pull(conn, topic, 0, 1)
    assert at_end.code == ResponseCode.PULL_NOT_FOUND
    assert at_end.ext_fields["nextBeginOffset"] == "1"
    past = pull(conn, topic, 0, 50)
    assert past.code == ResponseCode.PULL_OFFSET_MOVED
    assert past.ext_fields["nextBeginOffset"] == "1"


def test_the_subscription_filters_by_tag(broker, conn):
    topic = new_topic(broker, "tagged")
    for tag in ("A", "B", "A", "C"):
        send(conn, topic, tag.encode(), tags=tag)
    got = fetch(conn, topic, 0, 0, ready=4, subscription="A || C")
    assert [b for *_x, b in records(got.body)] == [b"A", b"A", b"C"]
    only_b_later = pull(conn, topic, 0, 3, subscription="B")
    assert only_b_later.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # read, none matched: go on from next
    assert only_b_later.ext_fields["nextBeginOffset"] == "4"


def test_a_suspended_pull_answers_when_a_message_arrives(broker, conn):
    topic = new_topic(broker, "long-poll")
    waiting = conn.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0x2,
        "commitOffset": 0, "suspendTimeoutMillis": 20_000, "subVersion": 0})
    time.sleep(0.3)
    assert not waiting.done()
    with RemotingConnection(broker.remoting.address) as other:
        send(other, topic, b"wake up")
    answer = waiting.result(10)
    assert answer.code == ResponseCode.SUCCESS
    assert records(answer.body)[0][4] == b"wake up"


def test_a_suspended_pull_gives_up_after_its_timeout(broker, conn):
    topic = new_topic(broker, "long-poll-empty")
    answer = conn.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g", "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0x2,
        "commitOffset": 0, "suspendTimeoutMillis": 300, "subVersion": 0}).result(10)
    assert answer.code == ResponseCode.PULL_NOT_FOUND


def test_both_doors_share_one_store(broker, conn):
    topic = new_topic(broker, "shared", 1, QueueType.BATCH_CQ)
    send(conn, topic, b"through remoting")
    with Producer(broker.endpoint) as producer:
        producer.send(Message(topic, b"through grpc", queue_id=0))
    with RangeReader(broker.endpoint) as reader:
        bodies = reader.read_table([OffsetRange(topic, 0, 0, 2)]).column("body").to_pylist()
    assert bodies == [b"through remoting", b"through grpc"]
    _t, offset, _f, props, payload = records(fetch(conn, topic, 0, 0).body)[-1]
    assert (offset, props["INNER_NUM"]) == (1, "1")  # our producer's inner batch, as RocketMQ's 5.x clients unpack it
    [(_flag, body, _props)] = fmt.iter_message_batch(payload, 1)
    assert bytes(body) == b"through grpc"


# --- offsets -------------------------------------------------------------------------------

def test_queue_offsets_and_offsets_by_time(broker, conn):
    topic = new_topic(broker, "offsets")
    before = int(time.time() * 1000) - 1
    for i in range(3):
        send(conn, topic, b"%d" % i)
    wait_indexed(conn, topic, 0, 3)
    head = {"topic": topic, "queueId": 0}
    assert conn.invoke(RequestCode.GET_MIN_OFFSET, head).ext_fields["offset"] == "0"
    assert conn.invoke(RequestCode.GET_MAX_OFFSET, head).ext_fields["offset"] == "3"
    def by_time(ms):
        return conn.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**head, "timestamp": ms}).ext_fields["offset"]
    assert by_time(before) == "0"
    assert by_time(int(time.time() * 1000) + 60_000) == "3"
    earliest = int(conn.invoke(RequestCode.GET_EARLIEST_MSG_STORETIME, head).ext_fields["timestamp"])
    assert before <= earliest <= time.time() * 1000


def test_consumer_offsets_committed_and_queried(broker, conn):
    topic = new_topic(broker, "group-offsets", 2)
    send(conn, topic, b"x", queue_id=0)
    fetch(conn, topic, 0, 0)
    query = {"consumerGroup": "g1", "topic": topic, "queueId": 0}
    first = conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, query)  # none committed: the queue's first message
    assert first.ext_fields["offset"] == "0"
    empty = conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, {**query, "queueId": 1})
    assert empty.code == ResponseCode.QUERY_NOT_FOUND
    assert conn.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": 1}).code == ResponseCode.SUCCESS
    assert conn.invoke(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "1"
    fetch(conn, topic, 0, 0)
    pull(conn, topic, 0, 1, group="g2", commit_offset=1)  # the pull's piggyback commit
    assert broker.core.query_offsets("g2", [topic]) == [(topic, 0, 1)]


# --- transactions --------------------------------------------------------------------------

def half_send(conn, topic: str, body: bytes, **properties):
    answer = send(conn, topic, body, properties={"TRAN_MSG": "true", "PGROUP": "tx-group", **properties},
                  group="tx-group", sys_flag=0x4)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer.ext_fields["transactionId"]


def end(conn, transaction_id: str, decision: int, from_check: bool = False) -> None:
    conn.oneway(RequestCode.END_TRANSACTION, {"producerGroup": "tx-group", "tranStateTableOffset": 0,
                                               "commitLogOffset": 0, "commitOrRollback": decision,
                                               "fromTransactionCheck": str(from_check).lower(),
                                               "msgId": transaction_id, "transactionId": transaction_id})


def wait_for(condition, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("the condition did not hold in time")


def test_a_half_message_is_visible_at_its_commit_and_never_after_a_rollback(broker, conn):
    topic = new_topic(broker, "tx")
    committed, rolled_back = half_send(conn, topic, b"commit me"), half_send(conn, topic, b"roll me back")
    assert pull(conn, topic, 0, 0).code == ResponseCode.PULL_NOT_FOUND
    end(conn, committed, 0x8)
    end(conn, rolled_back, 0xC)
    got = wait_for(lambda: records(pull(conn, topic, 0, 0).body))
    assert [b for *_x, b in got] == [b"commit me"]


def test_an_unknown_transaction_is_checked_back_with_its_producer(broker, conn):
    topic = new_topic(broker, "tx-check")
    checks = []
    conn.on_request = checks.append
    conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps({"clientID": "c1", "producerDataSet": [
        {"groupName": "tx-group"}], "consumerDataSet": []}))
    transaction_id = half_send(conn, topic, b"ask me")
    end(conn, transaction_id, 0)  # unknown yet
    check = wait_for(lambda: checks and checks[0])
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE
    assert check.ext_fields["transactionId"] == transaction_id
    [(check_topic, _o, _f, props, body)] = records(check.body)
    assert (check_topic, body, props["PGROUP"]) == (topic, b"ask me", "tx-group")
    end(conn, transaction_id, 0x8, from_check=True)
    assert [b for *_x, b in wait_for(lambda: records(pull(conn, topic, 0, 0).body))] == [b"ask me"]


def test_a_half_message_is_not_checked_before_its_check_immunity_time(broker, conn):
    """CHECK_IMMUNITY_TIME_IN_SECONDS, as RocketMQ's broker honours it: no check before (the
    door checks every 300 ms here), then checks as any other."""
    topic = new_topic(broker, "tx-immune")
    checks = []
    conn.on_request = checks.append
    conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps({"clientID": "c1", "producerDataSet": [
        {"groupName": "tx-group"}], "consumerDataSet": []}))
    sent = time.monotonic()
    immune = half_send(conn, topic, b"not yet", CHECK_IMMUNITY_TIME_IN_SECONDS="2")
    check = wait_for(lambda: checks and checks[0])
    assert time.monotonic() - sent >= 2 and check.ext_fields["transactionId"] == immune
    end(conn, immune, 0xC, from_check=True)


# --- clients -------------------------------------------------------------------------------

def test_heartbeats_list_consumers_and_make_the_retry_topic(broker, conn):
    heartbeat = {"clientID": "client-1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "push-group", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [{"topic": "simple-topic", "subString": "*"}]}]}
    assert conn.invoke(RequestCode.HEART_BEAT, body=orjson.dumps(heartbeat)).code == ResponseCode.SUCCESS
    listed = conn.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "push-group"})
    assert orjson.loads(listed.body) == {"consumerIdList": ["client-1"]}
    assert broker.core.store.find_topic("%RETRY%push-group") is not None
    queues = [{"topic": "simple-topic", "brokerName": "broker-a", "queueId": q} for q in range(2)]
    lock = {"consumerGroup": "push-group", "clientId": "client-1", "mqSet": queues}
    locked = orjson.loads(conn.invoke(RequestCode.LOCK_BATCH_MQ, body=orjson.dumps(lock)).body)
    assert locked["lockOKMQSet"] == queues
    other = orjson.loads(conn.invoke(RequestCode.LOCK_BATCH_MQ, body=orjson.dumps(
        {**lock, "clientId": "client-2"})).body)
    assert other["lockOKMQSet"] == []



@pytest.mark.parametrize("code, body, says", [
    (RequestCode.HEART_BEAT, [], "not a HeartbeatData object"),
    (RequestCode.HEART_BEAT, {"producerDataSet": ["x"]}, "producerDataSet is not an array of objects"),
    (RequestCode.HEART_BEAT, {"consumerDataSet": [{"groupName": ["g"]}]}, "groupName is an array, not a string"),
    (RequestCode.HEART_BEAT, {"clientID": {"a": 1}}, "clientID is an object, not a string"),
    (RequestCode.LOCK_BATCH_MQ, {"mqSet": [1]}, "mqSet is not an array of objects"),
    (RequestCode.LOCK_BATCH_MQ, {"mqSet": [{"queueId": "0"}]}, "queueId is a string, not an integer"),
    (RequestCode.UNLOCK_BATCH_MQ, {"consumerGroup": [1]}, "consumerGroup is an array, not a string"),
])
def test_a_body_field_of_the_wrong_type_is_refused_naming_it(conn, code, body, says):
    """Found by tests/fuzz: these failed inside the door (AttributeError, TypeError), answered as
    a broker bug."""
    answer = conn.invoke(code, body=orjson.dumps(body))
    assert answer.code != ResponseCode.SUCCESS and says in answer.remark
    assert "broker bug" not in answer.remark


# --- bad input -----------------------------------------------------------------------------

def raw_frame(header: bytes, kind: int = 0, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), kind << 24 | len(header)) + header + body


def test_unreadable_headers_are_answered_and_the_connection_goes_on(conn):
    answers = []
    conn.on_request = answers.append
    for bad in (raw_frame(b"{not json"), raw_frame(b'{"code":10,"opaque":"x"}'), raw_frame(b"{}", kind=7)):
        conn.send_raw(bad)
    assert conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_a_header_missing_a_required_field_is_refused_naming_it(conn):
    answer = conn.invoke(RequestCode.GET_MAX_OFFSET, {"queueId": 0})
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "GET_MAX_OFFSET header has no topic" in answer.remark


def test_an_unsupported_code_is_answered_and_the_connection_stays(conn):
    answer = conn.invoke(9999, {})
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in answer.remark
    assert conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_absurd_counts_are_refused_or_bounded(broker, conn):
    """Counts no client sends get an answer saying what is accepted, or a bounded one."""
    topic = new_topic(broker, "absurd")
    for _ in range(300):
        send(conn, topic, b"x" * 1000)
    wait_indexed(conn, topic, 0, 300)
    everything = pull(conn, topic, 0, 0, max_messages=2**31 - 1)
    assert everything.code == ResponseCode.SUCCESS and len(everything.body) <= 256 * 1024 + 1100  # one pull's bytes
    assert pull(conn, topic, 0, 0, max_messages=0).remark == "max messages 0: ask for 1 or more"
    assert pull(conn, topic, 0, 2**62).code == ResponseCode.PULL_OFFSET_MOVED
    refused = pop(conn, topic, "absurd-group", max_messages=10**9, poll_ms=100)
    assert refused.code == ResponseCode.INVALID_PARAMETER and "1 to 1024" in refused.remark
    forever = pop(conn, topic, "absurd-group", invisible_ms=10**15, poll_ms=100)
    assert forever.code == ResponseCode.INVALID_PARAMETER and "43200000" in forever.remark
    waits_too_long = pop(conn, topic, "absurd-group", poll_ms=10**12)
    assert waits_too_long.code == ResponseCode.INVALID_PARAMETER and "60000" in waits_too_long.remark
    huge_topic = conn.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "absurd-big", "readQueueNums": 10**9,
                                                                   "writeQueueNums": 10**9, "perm": 6})
    assert "use 1 to 65536" in huge_topic.remark
    assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 2**40}).code == ResponseCode.SYSTEM_ERROR
    assert conn.invoke(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}).ext_fields["offset"] == "300"


def test_a_malformed_batch_stores_nothing(broker, conn):
    topic = new_topic(broker, "bad-batch")
    answer = send_batch(conn, topic, [], payload=struct.pack(">i", 10_000) + b"x" * 20)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "MessageBatch" in answer.remark
    assert broker.core.queue_offsets(broker.core.topic(topic), 0) == (0, 0)


def test_a_send_to_an_unknown_topic_or_queue_is_refused(conn):
    assert send(conn, "nowhere", b"x").code == ResponseCode.TOPIC_NOT_EXIST
    refused = send(conn, "simple-topic", b"x", queue_id=99)
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert "no queue 99" in refused.remark


@pytest.mark.parametrize("cut", ["length", "oversized"])
def test_frames_that_cannot_be_read_close_only_their_connection(broker, conn, cut):
    host, port = broker.remoting.address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        if cut == "length":
            raw.sendall(raw_frame(b'{"code":34,"opaque":1}')[:-5])
            raw.shutdown(socket.SHUT_WR)
        else:
            raw.sendall(struct.pack(">i", 64 << 20) + b"x" * 64)
        assert raw.recv(100) == b""  # closed by the broker (or after our half-close)
    assert conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_binary_serialized_requests_are_answered_in_kind(broker):
    with RemotingConnection(broker.remoting.address, serialize_type=SerializeType.ROCKETMQ) as binary:
        answer = binary.invoke(RequestCode.GET_MAX_OFFSET, {"topic": "simple-topic", "queueId": 0})
    assert answer.code == ResponseCode.SUCCESS
    assert answer.serialize_type is SerializeType.ROCKETMQ


def test_oneway_requests_get_no_answer(broker, conn):
    topic = new_topic(broker, "oneway")
    props = properties_text({"UNIQ_KEY": uniq_key()})
    conn.oneway(RequestCode.SEND_MESSAGE, {"producerGroup": "p", "topic": topic, "defaultTopic": "TBW102",
                                           "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                                           "bornTimestamp": 0, "flag": 0, "properties": props})
    wait_for(lambda: broker.core.queue_offsets(broker.core.topic(topic), 0)[1] == 1)
    assert FLAG_ONEWAY == 2


def test_many_requests_in_flight_on_one_connection(broker, conn):
    futures = [conn.request(RequestCode.GET_MAX_OFFSET, {"topic": "simple-topic", "queueId": i % 4})
               for i in range(500)]
    assert all(f.result(10).code == ResponseCode.SUCCESS for f in futures)


def test_two_brokers_serve_one_topic_through_one_name_server(broker, tmp_path):
    new_topic(broker, "spread", 2)
    options = RemotingOptions(port=0, name_servers=(broker.remoting.address,), register_interval_ms=200)
    before = set(threading.enumerate())
    with Broker(tmp_path, "127.0.0.1", 0, remoting=options, broker_name="broker-b") as second:
        second.core.create_topic("spread", 3, QueueType.SIMPLE_CQ)
        with RemotingConnection(broker.remoting.address) as conn:
            def route():
                answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "spread"})
                return orjson.loads(answer.body)
            both = wait_for(lambda: len(route()["queueDatas"]) == 2 and route())
            assert {q["brokerName"]: q["writeQueueNums"] for q in both["queueDatas"]} == {"broker-a": 2, "broker-b": 3}
            addresses = {b["brokerName"]: b["brokerAddrs"]["0"] for b in both["brokerDatas"]}
            assert addresses == {"broker-a": broker.remoting.address, "broker-b": second.remoting.address}
    with RemotingConnection(broker.remoting.address) as conn:  # the stopped broker unregistered
        answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "spread"})
        assert [q["brokerName"] for q in orjson.loads(answer.body)["queueDatas"]] == ["broker-a"]
    loops = [t.name for t in threading.enumerate()
             if t not in before and t.name in ("rmq-remoting-register", "rmq-remoting-txn-check")]
    assert loops == [], "the stopped broker's registration and transaction checks still run"


# --- pop -----------------------------------------------------------------------------------

def test_pop_ack_and_change_invisible_time_over_remoting(broker, conn):
    topic = new_topic(broker, "popped", 2)
    for i in range(4):
        send(conn, topic, b"p%d" % i, queue_id=i % 2)
    answer = pop(conn, topic, "pop-group")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    popped = records(answer.body)
    while len(popped) < 4:  # a pop may find some queues before the others are indexed
        more = pop(conn, topic, "pop-group")
        assert more.code == ResponseCode.SUCCESS, more.remark
        popped += records(more.body)
    assert sorted(b for *_x, b in popped) == [b"p0", b"p1", b"p2", b"p3"]
    assert int(answer.ext_fields["popTime"]) + 60_000 > time.time() * 1000
    assert answer.ext_fields["msgOffsetInfo"]
    queue_of = {b: q for q in (0, 1) for b in (b"p%d" % q, b"p%d" % (q + 2))}
    _t, offset, _f, _p, body = records(answer.body)[0]
    head = {"consumerGroup": "pop-group", "topic": topic, "queueId": queue_of[body], "offset": offset,
            "extraInfo": extra_info(answer, queue_of[body], offset)}
    changed = conn.invoke(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**head, "invisibleTime": 30_000})
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    stale = conn.invoke(RequestCode.ACK_MESSAGE, head)  # named with the old pop time: moved since
    assert stale.code == ResponseCode.NO_MESSAGE
    renamed = {**head, "extraInfo": " ".join([head["extraInfo"].split(" ")[0], changed.ext_fields["popTime"],
                                              "30000", "0", "0", "broker-a", str(queue_of[body]), str(offset)])}
    assert conn.invoke(RequestCode.ACK_MESSAGE, renamed).code == ResponseCode.SUCCESS
    assert conn.invoke(RequestCode.ACK_MESSAGE, renamed).code == ResponseCode.NO_MESSAGE  # acked once only
    assert broker.core.pop_service.in_flight("pop-group") == 3


def test_a_pop_of_an_empty_topic_waits_its_poll_time(broker, conn):
    topic = new_topic(broker, "pop-empty")
    answer = pop(conn, topic, "pop-empty-group", poll_ms=200)
    assert answer.code == ResponseCode.POLLING_TIMEOUT


def test_a_bad_extra_info_is_refused(broker, conn):
    answer = conn.invoke(RequestCode.ACK_MESSAGE, {"consumerGroup": "g", "topic": "simple-topic", "queueId": 0,
                                                   "offset": 0, "extraInfo": "garbage"})
    assert answer.code == ResponseCode.INVALID_PARAMETER
    assert "POP_CK" in answer.remark


def test_a_consumed_message_sent_again_as_it_came_is_stored(broker, conn):
    topic = new_topic(broker, "resent")
    send(conn, topic, b"first")
    pulled = fetch(conn, topic, 0, 0).body
    assert b"__HCRC32#\x01" in pulled  # a client sees the store's CRC property among the message's
    crc = pulled.split(b"__HCRC32#\x01")[1][:10].decode()
    again = send(conn, topic, b"first", properties={"__HCRC32#": crc})
    assert again.code == ResponseCode.SUCCESS, again.remark


def test_a_broker_that_stops_registering_drops_out_of_routes():
    from broker_sim.doors.remoting.namesrv import BrokerEntry, LocalBroker, RouteTable, queue_data

    now = [0.0]
    local = LocalBroker("DefaultCluster", "broker-a", "127.0.0.1:1", list, lambda name: None)
    table = RouteTable(local, clock_ms=lambda: now[0])
    table.register(BrokerEntry("DefaultCluster", "broker-b", "127.0.0.1:2", topics={"t": queue_data("broker-b", 2)},
                               timeout_ms=120_000))
    now[0] = 119_000
    assert [q["brokerName"] for q in table.route("t")["queueDatas"]] == ["broker-b"]
    now[0] = 121_000
    assert table.route("t") is None
    assert table.cluster_info()["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


# --- consumer send-back, message by id -----------------------------------------------------

def offset_of(msg_id: str) -> int:
    """The commitlog offset an offsetMsgId names (its last 16 hex digits)."""
    return int(msg_id[-16:], 16)


def test_a_message_is_viewed_by_its_offset_message_id(broker, conn):
    topic = new_topic(broker, "viewed")
    sent = send(conn, topic, b"look at me", tags="T")
    answer = conn.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset_of(sent.ext_fields["msgId"])})
    assert answer.code == ResponseCode.SUCCESS
    [(viewed_topic, _o, _f, props, body)] = records(answer.body)
    assert (viewed_topic, body, props["TAGS"]) == (topic, b"look at me", "T")
    missing = conn.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset_of(sent.ext_fields["msgId"]) + 1})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert "no message starts at" in missing.remark


def send_back(conn, msg_id: str, group: str, delay_level: int = 0, max_reconsume: int = 16):
    return conn.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": offset_of(msg_id), "group": group, "delayLevel": delay_level, "originMsgId": "origin-1",
        "originTopic": "x", "unitMode": "false", "maxReconsumeTimes": max_reconsume})


def test_a_failed_message_goes_back_through_the_retry_topic_then_the_dlq(broker, conn):
    topic = new_topic(broker, "sent-back")
    sent = send(conn, topic, b"fail me", tags="T", properties={"color": "red"})
    assert send_back(conn, sent.ext_fields["msgId"], "back-group").code == ResponseCode.SUCCESS
    [(retry_topic, _o, _f, props, body)] = records(fetch(conn, "%RETRY%back-group", 0, 0).body)
    assert (retry_topic, body) == ("%RETRY%back-group", b"fail me")
    assert (props["RETRY_TOPIC"], props["ORIGIN_MESSAGE_ID"], props["color"], props["TAGS"]) == (
        topic, "origin-1", "red", "T")
    assert props["DELAY"] == "3"  # level 3 + reconsume times, RocketMQ's first retry delay
    last = send(conn, topic, b"give up", properties={})
    assert send_back(conn, last.ext_fields["msgId"], "back-group", max_reconsume=0).code == ResponseCode.SUCCESS
    [(dlq, *_rest)] = records(fetch(conn, "%DLQ%back-group", 0, 0).body)
    assert dlq == "%DLQ%back-group"


def test_a_delayed_message_is_invisible_until_its_level_s_time(broker, conn):
    topic = new_topic(broker, "delayed")
    sent_at = time.monotonic()
    answer = send(conn, topic, b"a second later", properties={"DELAY": "1"})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    got = pull(conn, topic, 0, 0, suspend_ms=5000)  # suspended until the delivery arrives
    assert time.monotonic() - sent_at >= 0.9
    [(_t, _o, _f, props, body)] = records(got.body)
    assert body == b"a second later"
    assert "DELAY" not in props and "REAL_TOPIC" not in props


def test_messages_are_queried_by_key_and_by_unique_key(broker, conn):
    topic = new_topic(broker, "keyed", 2)
    send(conn, topic, b"one", keys="order-1 customer-9", queue_id=0)
    send(conn, topic, b"two", keys="order-2 customer-9", queue_id=1)
    unique = send(conn, topic, b"three", keys="order-3", properties={"UNIQ_KEY": "ABCDEF0123456789"})
    wait_indexed(conn, topic, 0, 2)
    wait_indexed(conn, topic, 1, 1)

    def query(key: str, unique_key: bool = False, max_num: int = 32, end: int = 2**62):
        head = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": 0, "endTimestamp": end}
        if unique_key:
            head["_UNIQUE_KEY_QUERY"] = "true"
        return conn.invoke(RequestCode.QUERY_MESSAGE, head)

    assert sorted(r[4] for r in records(query("customer-9").body)) == [b"one", b"two"]
    assert len(records(query("customer-9", max_num=1).body)) == 1
    assert [r[4] for r in records(query("ABCDEF0123456789", unique_key=True).body)] == [b"three"]
    assert unique.code == ResponseCode.SUCCESS
    assert query("order-").code == ResponseCode.QUERY_NOT_FOUND  # whole keys only
    assert query("customer-9", end=1).code == ResponseCode.QUERY_NOT_FOUND  # outside the time range


def test_a_client_that_reads_no_answers_stops_being_read(broker, conn):
    """Flow control: answers a client does not read stop the broker reading its requests, so a
    slow client holds a bounded amount of the broker's memory."""
    topic = new_topic(broker, "flow")
    send(conn, topic, b"x" * 50_000)
    fetch(conn, topic, 0, 0)
    request = encode(RemotingCommand(RequestCode.PULL_MESSAGE, 1, 0, {
        "consumerGroup": "g", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
        "pad": "p" * 16_000}))  # requests big enough to fill the kernel's buffers soon
    host, port = broker.remoting.address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sent = 0
        while sent < 2000:  # 2,000 answers of 50 KB (100 MB) if the broker kept reading
            if not select.select([], [raw], [], 2)[1]:
                break  # blocked for 2 s: the broker reads no more of us
            raw.send(request)
            sent += 1
        assert sent < 2000, "the broker read every request of a client that reads nothing"
        with RemotingConnection(broker.remoting.address) as other:  # everyone else is served meanwhile
            assert other.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


# --- subscription groups ----------------------------------------------------------------------

def test_a_group_created_orderly_is_kept(broker, conn):
    answer = conn.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                         orjson.dumps({"groupName": "fifo-group", "consumeMessageOrderly": True}))
    assert answer.code == ResponseCode.SUCCESS
    assert broker.core.group_orderly("fifo-group") and not broker.core.group_orderly("other-group")


@pytest.mark.parametrize("body, words", [(b"not json", "not SubscriptionGroupConfig JSON"),
                                         (b"[1]", "not a SubscriptionGroupConfig object"),
                                         (b'{"consumeMessageOrderly": true}', "no groupName")])
def test_a_malformed_group_config_is_refused_saying_why(conn, body, words):
    answer = conn.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    assert answer.code == ResponseCode.INVALID_PARAMETER and words in answer.remark


def test_a_batch_ack_acks_the_offsets_of_its_bitsets_and_says_what_it_could_not(broker, conn):
    topic = new_topic(broker, "batch-acked", 1)
    for i in range(5):
        send(conn, topic, b"a%d" % i, queue_id=0)
    popped, answer = [], None
    while len(popped) < 5:
        answer = pop(conn, topic, "batch-group")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        popped += records(answer.body)
    assert len({r[1] for r in popped}) == 5
    start = int(answer.ext_fields["startOffsetInfo"].split(" ")[2])
    ack = {"c": "batch-group", "t": topic, "r": "0", "so": start, "q": 0, "rq": 0,
           "pt": int(answer.ext_fields["popTime"]), "it": int(answer.ext_fields["invisibleTime"])}
    bits = base64.b64encode(bytes([0b10101])).decode()  # offsets start, start + 2 and start + 4
    acked = conn.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, orjson.dumps({"brokerName": "broker-a",
                                                                        "acks": [{**ack, "b": bits}]}))
    assert acked.code == ResponseCode.SUCCESS, acked.remark
    assert broker.core.pop_service.in_flight("batch-group") == 2
    again = conn.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, orjson.dumps({"acks": [{**ack, "b": bits}]}))
    assert (again.code, again.remark.split(" (")[0]) == (ResponseCode.NO_MESSAGE, "3 of 3 acks failed")
    for body, said in ((b"{not json", "not JSON"), (b"[]", "not a BatchAckMessageRequestBody"),
                       (orjson.dumps({"acks": [{**ack, "b": "%%"}]}), "is not Base64"),
                       (orjson.dumps({"acks": [{**ack, "q": "zero", "b": bits}]}), "q is a string, not an integer"),
                       (orjson.dumps({"acks": [{**ack, "c": "", "b": bits}]}), "names no consumer group")):
        refused = conn.invoke(RequestCode.BATCH_ACK_MESSAGE, {}, body)
        assert refused.code != ResponseCode.SUCCESS and said in refused.remark, refused.remark
    assert broker.core.pop_service.in_flight("batch-group") == 2
