"""The SDK reads a tag subscription expression as the broker (and RocketMQ's
FilterAPI.buildSubscriptionData) does: pieces trimmed, empty ones skipped, "*" or "" for all,
an expression naming no tag refused."""

import pytest

from broker_sim.store.message_filter import TagFilter
from rmq_spark import (
    Admin,
    ConfigError,
    Message,
    OffsetRange,
    PopConsumer,
    Producer,
    RangeReader,
    normalize_tag_filter,
)
from support.sdk import wait_indexed

REFUSED = "refused"
EXPRESSIONS = [
    ("", None), ("*", None), ("  *  ", None), ("A", {"A"}), ("A || B", {"A", "B"}), (" A ||B ", {"A", "B"}),
    ("A || ", {"A"}), ("|| A", {"A"}), ("A |||| B", {"A", "B"}), ("A || || B", {"A", "B"}),
    ("Tag A", {"Tag A"}), ("A | B", {"A | B"}), ("A || *", {"A", "*"}),
    ("||", REFUSED), (" || ", REFUSED), ("|| ||", REFUSED), ("||||", REFUSED),
]


def sdk_reading(expression: str):
    try:
        normalized = normalize_tag_filter(expression)
    except ConfigError:
        return REFUSED
    return set(normalized.split(" || ")) if normalized else None


def broker_reading(expression: str):
    try:
        parsed = TagFilter.parse(expression)
    except ValueError:
        return REFUSED
    return None if parsed is None else {tag.decode() for tag in parsed.tags}


@pytest.mark.parametrize("expression, tags", EXPRESSIONS)
def test_the_sdk_and_the_broker_read_an_expression_alike(expression, tags):
    assert sdk_reading(expression) == broker_reading(expression) == tags


def test_an_expression_naming_no_tag_is_refused_before_any_call():
    with pytest.raises(ConfigError, match=r"tag filter '\|\|' names no tag: write 'TagA \|\| TagB', or '\*'"):
        RangeReader("127.0.0.1:1", tag_filter="||")
    with pytest.raises(ConfigError, match="names no tag"):
        PopConsumer("127.0.0.1:1", "g", "t", tag_filter=" || ")


def test_an_empty_piece_is_skipped_by_the_range_reader_and_the_pop_consumer(endpoint, topic_name):
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1, "SimpleCQ")
    with Producer(endpoint) as producer:
        for i, tag in enumerate("ABAB"):
            producer.send(Message(topic_name, b"m%d" % i, tags=tag))
    wait_indexed(endpoint, topic_name, 4)
    with RangeReader(endpoint, tag_filter="A || ") as reader:
        assert reader.read_table([OffsetRange(topic_name, 0, 0)])["body"].to_pylist() == [b"m0", b"m2"]
    with PopConsumer(endpoint, "g-" + topic_name, topic_name, tag_filter="|| A", max_messages=10,
                     poll_ms=0) as consumer:
        deliveries = consumer.receive()
        assert sorted(d.records["body"][0].as_py() for d in deliveries) == [b"m0", b"m2"]
        consumer.ack(deliveries)
