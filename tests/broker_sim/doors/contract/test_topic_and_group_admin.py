"""Our contract's operator calls (issue 48): UpdateTopic (queue count and perm; Topic.perm in
every Topic answered), DeleteGroup, QueryMessages and GetMessage, BrokerStats' broker name; and
what each demands of an account when the broker checks ACLs."""

from __future__ import annotations

import grpc
import pytest

from broker_sim.acl import Guard
from broker_sim.broker import Broker
from broker_sim.store import QueueType
from rmq_spark import Credentials
from rmq_wire import record as fmt
from rmq_wire import signing
from rmq_wire.contract import broker_pb2 as pb
from support.acl import ACL_FILE, SECRETS
from support.brokers import SMALL_SEGMENTS
from support.grpc_client import CALL_TIMEOUT_S, Client, refusal, split_records

NOT_FOUND, INVALID, DENIED = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                              grpc.StatusCode.PERMISSION_DENIED)


@pytest.fixture
def broker(new_broker):
    """support.brokers' broker, named (BrokerStats says the name)."""
    return new_broker(store_config=SMALL_SEGMENTS, auto_create_topics=None, broker_name="broker-x")


@pytest.fixture
def client(broker):
    client = Client(broker.endpoint)
    yield client
    client.close()


def update(client, name: str, queue_count: int = 0, perm: int = 0):
    return client.admin.UpdateTopic(pb.UpdateTopicRequest(name=name, queue_count=queue_count, perm=perm),
                                    timeout=CALL_TIMEOUT_S).topic


def offset_of(message_id: str) -> int:
    """The commitlog offset an offsetMsgId names (its last 16 hex digits)."""
    return int(message_id[-16:], 16)


def query(client, topic: str, key: str, **fields):
    answer = client.admin.QueryMessages(pb.QueryMessagesRequest(topic=topic, key=key, **fields),
                                        timeout=CALL_TIMEOUT_S)
    return split_records(answer.records)


# --- UpdateTopic and Topic.perm --------------------------------------------------------------------

def test_every_topic_answered_has_its_perm_and_an_update_changes_count_and_perm(client):
    created = client.create("t", 2)
    assert (created.topic.queue_count, created.topic.perm) == (2, 6)
    topic = update(client, "t", queue_count=4, perm=4)
    assert (topic.name, topic.queue_count, topic.perm, topic.queue_type) == ("t", 4, 4, pb.SIMPLE_CQ)
    described = client.admin.DescribeTopic(pb.DescribeTopicRequest(name="t"), timeout=CALL_TIMEOUT_S)
    assert (described.topic.perm, len(described.queues)) == (4, 4)
    listed = client.admin.ListTopics(pb.ListTopicsRequest(), timeout=CALL_TIMEOUT_S).topics
    assert [(t.name, t.queue_count, t.perm) for t in listed] == [("t", 4, 4)]
    assert update(client, "t").perm == 4  # 0 and 0: as it is
    assert (update(client, "t", perm=6).queue_count, update(client, "t", queue_count=1).perm) == (4, 6)


def test_a_create_may_give_the_perm(client):
    topic = pb.Topic(name="ro", queue_count=1, queue_type=pb.BATCH_CQ, perm=4)
    answer = client.admin.CreateTopic(pb.CreateTopicRequest(topic=topic), timeout=CALL_TIMEOUT_S)
    assert answer.created and answer.topic.perm == 4
    assert client.create("ro", 1, pb.BATCH_CQ).topic.perm == 4  # perm 0: the same topic, whatever its perm


def test_perm_is_enforced_on_sends_and_reads(client):
    client.create("t", 1)
    client.send_single("t", 0, b"before")
    update(client, "t", perm=4)
    code, reason, details = refusal(client.send_single, "t", 0, b"after")
    assert (code, reason) == (DENIED, "PERMISSION_DENIED")
    assert details.startswith("the topic[t] sending message is forbidden")
    assert [r.body for r in client.read([("t", 0, 0, 0)])[0].records] == [b"before"]
    update(client, "t", perm=2)
    client.send_single("t", 0, b"after")
    request = pb.ReadRangesRequest(ranges=[pb.ReadRange(topic="t", queue_id=0)])
    code, reason, details = refusal(client.messaging.ReadRanges, request, timeout=CALL_TIMEOUT_S)
    assert (code, reason) == (DENIED, "PERMISSION_DENIED") and "the topic[t] pulling message is forbidden" in details


def test_fewer_queues_hide_the_others_until_the_count_grows_back(client):
    client.create("t", 2)
    client.send_single("t", 1, b"kept")
    update(client, "t", queue_count=1)
    assert list(client.offsets("t")) == [0]
    code, reason, _details = refusal(client.send_single, "t", 1)
    assert (code, reason) == (NOT_FOUND, "QUEUE_NOT_FOUND")
    update(client, "t", queue_count=2)
    assert client.send_single("t", 1, b"again").base_offset == 1
    client.wait_readable("t", 1, 2)
    assert [r.body for r in client.read([("t", 1, 0, 0)])[0].records] == [b"kept", b"again"]


@pytest.mark.parametrize(("name", "count", "perm", "expected", "words"), [
    ("missing", 2, 0, (NOT_FOUND, "TOPIC_NOT_FOUND"), "does not exist"),
    ("%DLQ%g", 2, 0, (INVALID, "INVALID_ARGUMENT"), "cannot update topic"),
    ("t", 0, 5, (INVALID, "INVALID_ARGUMENT"), "use 2 (write only), 4 (read only) or 6"),
    ("t", -2, 0, (INVALID, "INVALID_ARGUMENT"), "negative"),
])
def test_updates_refused(client, name, count, perm, expected, words):
    client.create("t", 1)
    code, reason, details = refusal(update, client, name, count, perm)
    assert (code, reason) == expected and words in details


# --- DeleteGroup -----------------------------------------------------------------------------------

def test_a_deleted_group_has_no_offsets_and_a_second_delete_finds_none(client):
    client.create("t", 1)
    client.send_single("t", 0)
    client.wait_readable("t", 0, 1)
    offsets = [pb.GroupOffset(topic="t", queue_id=0, offset=1)]
    client.admin.CommitOffsets(pb.CommitOffsetsRequest(group="g", offsets=offsets), timeout=CALL_TIMEOUT_S)
    delete = lambda group: client.admin.DeleteGroup(pb.DeleteGroupRequest(group=group),  # noqa: E731
                                                    timeout=CALL_TIMEOUT_S).deleted
    assert delete("g") is True
    answer = client.admin.QueryOffsets(pb.QueryOffsetsRequest(group="g"), timeout=CALL_TIMEOUT_S)
    assert list(answer.offsets) == []
    groups = client.admin.ListGroups(pb.ListGroupsRequest(), timeout=CALL_TIMEOUT_S).groups
    assert "g" not in [g.name for g in groups]
    assert delete("g") is False
    code, reason, _details = refusal(delete, "")
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")


# --- QueryMessages and GetMessage ------------------------------------------------------------------

def test_messages_found_by_key_and_unique_key_most_recent_first(client):
    client.create("t", 2)
    sent = [client.send_single("t", n % 2, f"m{n}".encode(), keys=f"order-{n % 3} all",
                               properties={fmt.PROPERTY_UNIQ_KEY: f"ID{n:04d}"}) for n in range(6)]
    client.wait_readable("t", 1, 3)
    found = query(client, "t", "order-1")
    assert [r.body for r in found] == [b"m4", b"m1"]
    assert [r.body for r in query(client, "t", "all", max_messages=4)] == [b"m5", b"m4", b"m3", b"m2"]
    assert [r.body for r in query(client, "t", "ID0003", unique_key=True)] == [b"m3"]
    assert query(client, "t", "ID0003") == []  # a unique key is no key
    after = sent[4].store_timestamp_ms
    assert all(r.store_timestamp >= after for r in query(client, "t", "all", begin_ms=after))
    assert query(client, "t", "all", end_ms=sent[0].store_timestamp_ms - 1) == []


@pytest.mark.parametrize(("fields", "expected", "words"), [
    (dict(topic="t", key=""), (INVALID, "INVALID_ARGUMENT"), "the key to query is empty"),
    (dict(topic="nowhere", key="k"), (NOT_FOUND, "TOPIC_NOT_FOUND"), "does not exist"),
    (dict(topic="t", key="k", begin_ms=10, end_ms=5), (INVALID, "INVALID_ARGUMENT"), "window is empty"),
    (dict(topic="t", key="k", max_messages=-1), (INVALID, "INVALID_ARGUMENT"), "negative"),
])
def test_queries_refused(client, fields, expected, words):
    client.create("t", 1)
    code, reason, details = refusal(client.admin.QueryMessages, pb.QueryMessagesRequest(**fields),
                                    timeout=CALL_TIMEOUT_S)
    assert (code, reason) == expected and words in details


def test_a_message_read_by_its_commitlog_offset(client):
    client.create("t", 1)
    sent = client.send_single("t", 0, b"hello", keys="k")
    offset = offset_of(sent.message_ids[0])
    record = client.admin.GetMessage(pb.GetMessageRequest(commitlog_offset=offset), timeout=CALL_TIMEOUT_S).record
    [decoded] = split_records(record)
    assert (decoded.topic, decoded.body, decoded.physical_offset) == ("t", b"hello", offset)
    code, reason, details = refusal(client.admin.GetMessage, pb.GetMessageRequest(commitlog_offset=offset + 1),
                                    timeout=CALL_TIMEOUT_S)
    assert (code, reason) == (NOT_FOUND, "MESSAGE_NOT_FOUND") and f"commitlog offset {offset + 1}" in details
    code, reason, _details = refusal(client.admin.GetMessage, pb.GetMessageRequest(commitlog_offset=-1),
                                     timeout=CALL_TIMEOUT_S)
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT")


def test_broker_stats_name_the_broker(client):
    assert client.stats().broker_name == "broker-x"


# --- ACLs --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("acl")
    (home / "plain_acl.yml").write_text(ACL_FILE)
    with Broker(home / "data", "127.0.0.1", 0, store_config=SMALL_SEGMENTS, auto_create_topics=None,
                acl=Guard(home / "plain_acl.yml")) as started:
        started.core.create_topic("orders", 1, QueueType.SIMPLE_CQ)
        started.core.create_topic("audit", 1, QueueType.SIMPLE_CQ)
        yield started


class Signed:
    """Our contract's calls signed as one account of ACL_FILE."""

    def __init__(self, broker, access_key: str):
        self.client = Client(broker.endpoint)
        self.credentials = Credentials(access_key, SECRETS[access_key])

    def __call__(self, method: str, request):
        stub = self.client.messaging if method == "Send" else self.client.admin
        return getattr(stub, method)(request, timeout=CALL_TIMEOUT_S,
                                     metadata=signing.grpc_metadata(self.credentials))

    def refused(self, method: str, request) -> str:
        code, reason, details = refusal(self, method, request)
        assert (code, reason) == (DENIED, "PERMISSION_DENIED"), details
        return details


@pytest.fixture
def signed(acl_broker):
    made = []

    def sign(access_key: str) -> Signed:
        made.append(Signed(acl_broker, access_key))
        return made[-1]

    yield sign
    for account in made:
        account.client.close()


def sent_offset(signed, topic: str) -> int:
    answer = signed("writer")("Send", pb.SendRequest(topic=topic, single=pb.SingleMessage(
        body=f"secret of {topic}".encode(), keys="k")))
    return offset_of(answer.message_ids[0])


def test_updating_topics_and_deleting_groups_are_for_admins(signed):
    for account in ("reader", "writer", "stranger"):
        assert "admin" in signed(account).refused("UpdateTopic", pb.UpdateTopicRequest(name="orders", perm=4))
        assert "admin" in signed(account).refused("DeleteGroup", pb.DeleteGroupRequest(group="billing"))
    ops = signed("ops")
    assert ops("UpdateTopic", pb.UpdateTopicRequest(name="orders", queue_count=2)).topic.queue_count == 2
    assert ops("DeleteGroup", pb.DeleteGroupRequest(group="billing")).deleted is False


def test_queries_need_the_topics_sub_and_a_message_by_offset_its_own_topics(signed):
    orders, audit = sent_offset(signed, "orders"), sent_offset(signed, "audit")
    reader = signed("reader")  # orders: SUB; audit: DENY
    assert split_records(reader("QueryMessages", pb.QueryMessagesRequest(topic="orders", key="k")).records)
    assert "topic 'audit'" in reader.refused("QueryMessages", pb.QueryMessagesRequest(topic="audit", key="k"))
    [mine] = split_records(reader("GetMessage", pb.GetMessageRequest(commitlog_offset=orders)).record)
    assert mine.body == b"secret of orders"
    details = reader.refused("GetMessage", pb.GetMessageRequest(commitlog_offset=audit))
    assert f"the topic of the message at commitlog offset {audit}" in details and "'audit'" not in details
    code, reason, _details = refusal(reader, "GetMessage", pb.GetMessageRequest(commitlog_offset=audit + 1))
    assert (code, reason) == (NOT_FOUND, "MESSAGE_NOT_FOUND")  # no record there: nothing to demand
    assert signed("ops")("GetMessage", pb.GetMessageRequest(commitlog_offset=audit)).record
    signed("stranger").refused("GetMessage", pb.GetMessageRequest(commitlog_offset=orders))
