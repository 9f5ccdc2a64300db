"""Small holes of issue 15: commits past a queue's max offset, clients making or removing
pop's system topics, and error sentences that echoed unbounded input."""

import grpc
import pytest

from broker_sim.store.errors import ECHO_CHARS
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import pop_pb2, pop_pb2_grpc
from support.grpc_client import refusal

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def commit(client, offset: int):
    return client.admin.CommitOffsets(pb.CommitOffsetsRequest(
        group="g", offsets=[pb.GroupOffset(topic="t", queue_id=0, offset=offset)]))


def test_a_commit_past_the_max_offset_is_refused(client):
    client.create("t", 1)
    for _ in range(3):
        client.send_single("t", 0)
    client.wait_readable("t", 0, 3)
    commit(client, 3)  # the max offset: everything consumed
    code, reason, details = refusal(commit, client, 4)
    assert (code, reason) == (INVALID, "BAD_OFFSET_RANGE") and "past the queue's end: commit at most 3" in details
    answer = client.admin.QueryOffsets(pb.QueryOffsetsRequest(group="g"))
    assert [o.offset for o in answer.offsets] == [3]


@pytest.mark.parametrize("name", ["%RETRY%g+t", "%DLQ%g"])
def test_clients_cannot_create_or_delete_pop_system_topics(client, broker, name):
    code, reason, details = refusal(client.create, name)
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT") and "pop's retry and dead letter topics" in details
    assert broker.core.store.topics.get(name) is None
    broker.core.store.create_topic(name, 1)  # as pop makes it
    code, reason, details = refusal(client.admin.DeleteTopic, pb.DeleteTopicRequest(name=name))
    assert (code, reason) == (INVALID, "INVALID_ARGUMENT") and f"cannot delete topic '{name}'" in details
    assert broker.core.store.topics.get(name) is not None


LONG = "x" * 100_000
LONG_TAGS = "||" + LONG.replace("x", " ")  # no tag, many characters
LONG_SENDS = [
    ("unknown topic", dict(topic=LONG, single=pb.SingleMessage(body=b"x"))),
    ("property name", dict(topic="s", single=pb.SingleMessage(body=b"x", properties={LONG + "\x01": "v"}))),
    ("tags", dict(topic="s", single=pb.SingleMessage(body=b"x", tags=LONG + "\x02"))),
    ("producer id", dict(topic="s", single=pb.SingleMessage(body=b"x"), producer_id=LONG, sequence=1)),
    ("transaction id", dict(topic="s", single=pb.SingleMessage(body=b"x"), transaction_id=LONG + "!")),
]


@pytest.mark.parametrize("name, fields", LONG_SENDS, ids=[s[0] for s in LONG_SENDS])
def test_sentences_cut_long_input_of_sends(client, name, fields):
    client.create("s", 1)
    _code, _reason, details = refusal(client.messaging.Send, pb.SendRequest(**fields))
    assert "x" * ECHO_CHARS not in details and "xxx..." in details and len(details) < 1000, details


def test_sentences_cut_long_input_of_other_calls(client):
    client.create("s", 1)
    pop = pop_pb2_grpc.PopStub(client.channel).Pop
    cases = [
        (client.admin.DescribeTopic, pb.DescribeTopicRequest(name=LONG), "does not exist"),
        (client.admin.CreateTopic, pb.CreateTopicRequest(topic=pb.Topic(name=LONG, queue_count=1,
                                                                            queue_type=pb.SIMPLE_CQ)), "longer than"),
        (client.admin.QueryOffsets, pb.QueryOffsetsRequest(group=LONG), "may only use"),
        (client.messaging.ReadRanges, pb.ReadRangesRequest(ranges=[pb.ReadRange(topic="s")], tag_filter=LONG_TAGS),
         "names no tag"),
        (pop, pop_pb2.PopRequest(group=LONG, topic="s", max_messages=1, invisible_time_ms=1000), "may only use"),
        (pop, pop_pb2.PopRequest(group="g", topic=LONG, max_messages=1, invisible_time_ms=1000), "does not exist"),
    ]
    for call, request, words in cases:
        _code, _reason, details = refusal(call, request)
        assert words in details and len(details) < 1000 and "..." in details, (type(request).__name__, details[:200])
