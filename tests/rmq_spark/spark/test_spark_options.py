"""Options of rocketmq-batch: every bad one is refused with a sentence naming it and what is
accepted (here without Spark; test_spark_source.py shows the same error at load())."""


import pytest

from rmq_spark import ConfigError
from rmq_spark.spark import RocketMQBatchDataSource
from rmq_spark.spark.options import DEFAULTS, OPTION_NAMES, parse_options
from support.paths import REPO_ROOT

BASE = {"endpoint": "127.0.0.1:10911", "topic": "orders"}


def parse(**extra):
    return parse_options({**BASE, **extra})


def test_defaults():
    opts = parse()
    assert opts.subscription.topics == ("orders",)
    assert opts.fail_on_data_loss is True and opts.include_properties is False
    assert opts.max_bytes_per_fetch == 64 << 20 and opts.max_partitions == DEFAULTS["maxPartitions"]
    assert opts.max_trigger_delay_ms == 15 * 60 * 1000 and opts.fetch_timeout_ms == 5 * 60 * 1000
    assert opts.starting_offsets is None and opts.tag_filter is None
    assert opts.wait_for_messages_ms == 500
    assert [parse(waitForMessages=v).wait_for_messages_ms for v in ("0", "2s")] == [0, 2000]


def test_values_are_parsed():
    opts = parse_options({
        "ENDPOINT": "127.0.0.1:1", "topicpattern": "orders-.*", "startingOffsets": '{"orders-1": {"0": 5, "1": -2}}',
        "maxRecordsPerTrigger": "1000", "minRecordsPerTrigger": "10", "maxTriggerDelay": "30s",
        "maxBytesPerFetch": "8m", "failOnDataLoss": "FALSE", "tagFilter": " TagA ||TagB ", "includeProperties": "true",
        "consumerGroup": "g1", "minPartitions": "2", "maxRecordsPerPartition": "5000"})
    assert opts.subscription.pattern == "orders-.*" and opts.subscription.matches("orders-1")
    assert not opts.subscription.matches("xorders-1")
    assert opts.starting_offsets == {"orders-1": {("", 0): 5, ("", 1): -2}}  # (broker, queue id): none named
    assert (opts.max_records_per_trigger, opts.min_records_per_trigger, opts.max_trigger_delay_ms) == (1000, 10, 30_000)
    assert opts.max_bytes_per_fetch == 8 << 20 and opts.fail_on_data_loss is False
    assert opts.tag_filter == "TagA || TagB" and opts.include_properties and opts.consumer_group == "g1"
    # As RocketMQ reads a subscription: empty pieces are skipped, "*" is everything.
    assert parse(tagFilter="TagA || ").tag_filter == "TagA" and parse(tagFilter=" * ").tag_filter is None
    assign = parse_options({"endpoint": "h:1", "assign": '{"b": [1, 0, 1]}'}).subscription.assign
    assert assign == {"b": (("", 0), ("", 1))}  # (broker, queue id): no broker named
    assert parse_options({"endpoint": "h:1", "topics": "a, b,a"}).subscription.topics == ("a", "b")


@pytest.mark.parametrize("options, words", [
    ({"topci": "x"}, ["unknown option 'topci'", "did you mean topic?"]),
    ({"maxOffsetsPerTrigger": "5"}, ["maxOffsetsPerTrigger", "Kafka", "maxRecordsPerTrigger"]),
    ({"subscribe": "a"}, ["here it is topics"]),
    ({"topics": "a"}, ["exactly one of the options topic, topics, topicPattern, assign", "got topic, topics"]),
    ({"startingOffsets": "first"}, ["startingOffsets='first'", "earliest or latest", "-2 for earliest"]),
    ({"startingOffsets": '{"orders": {"0": "x"}}'}, ["startingOffsets", "JSON of topic -> queue id -> offset"]),
    ({"startingOffsets": '{"other": {"0": 1}}'}, ["names topic 'other'", "does not read"]),
    ({"startingOffsets": "{bad json"}, ["not valid JSON"]),
    ({"maxRecordsPerTrigger": "0"}, ["maxRecordsPerTrigger='0'", "positive number of records"]),
    ({"maxRecordsPerTrigger": "1e6"}, ["maxRecordsPerTrigger='1e6'"]),
    ({"minRecordsPerTrigger": "100", "maxRecordsPerTrigger": "10"}, ["above maxRecordsPerTrigger"]),
    ({"maxTriggerDelay": "soon", "minRecordsPerTrigger": "1"}, ["maxTriggerDelay='soon'", "30s, 15m"]),
    ({"maxTriggerDelay": "5m"}, ["maxTriggerDelay only bounds", "minRecordsPerTrigger"]),
    ({"maxBytesPerFetch": "lots"}, ["maxBytesPerFetch='lots'", "64m"]),
    ({"fetchTimeout": "0s"}, ["fetchTimeout='0s'", "a duration"]),
    ({"failOnDataLoss": "yes"}, ["failOnDataLoss='yes'", "true or false"]),
    ({"tagFilter": " || "}, ["option tagFilter", "names no tag", "TagA || TagB"]),
    ({"endpoint": "nowhere"}, ["option endpoint", "HOST:PORT"]),
    ({"minPartitions": "100", "maxPartitions": "10"}, ["minPartitions=100 is above maxPartitions=10"]),
    ({"startingTimestamp": "-5"}, ["startingTimestamp='-5'", "milliseconds since the Unix epoch"]),
    ({"consumerGroup": " "}, ["consumerGroup is empty"]),
    ({"waitForMessages": "31s"}, ["waitForMessages='31s' is more than 30s"]),
    ({"waitForMessages": "a while"}, ["waitForMessages='a while'", "a duration"]),
])
def test_bad_options_name_the_option_and_what_is_accepted(options, words):
    with pytest.raises(ConfigError) as err:
        parse(**options)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_subscription_and_endpoint_are_required():
    with pytest.raises(ConfigError, match="exactly one of the options endpoint .* and nameServer"):
        parse_options({"topic": "a"})
    with pytest.raises(ConfigError, match="none was given"):
        parse_options({"endpoint": "h:1"})
    with pytest.raises(ConfigError, match="assign"):
        parse_options({"endpoint": "h:1", "assign": '{"a": []}'})
    with pytest.raises(ConfigError, match="not a regular expression"):
        parse_options({"endpoint": "h:1", "topicPattern": "("})


def test_stream_and_batch_only_options():
    with pytest.raises(ConfigError, match="endingOffsets is for batch reads"):
        parse(endingOffsets="latest").check_stream()
    with pytest.raises(ConfigError, match="startingOffsets='latest'.*reads nothing in a batch read"):
        parse(startingOffsets="latest").check_batch()
    with pytest.raises(ConfigError, match="maxRecordsPerTrigger applies to streaming"):
        parse(maxRecordsPerTrigger="5").check_batch()
    parse(endingOffsets='{"orders": {"0": -1}}').check_batch()


def test_every_option_is_documented():
    doc = RocketMQBatchDataSource.__doc__
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    for name in OPTION_NAMES:
        assert name in doc, f"{name} is not in the data source's docstring"
        assert f"`{name}`" in readme, f"{name} is not in the README's options table"
