"""The options of the ``rocketmq-batch`` source: parsed and checked once, when the data source
is created (``load()``), into a ``SourceOptions`` that the planner and the readers share.

Every default lives in ``DEFAULTS``; every error names the option, what was given and what is
accepted. Names follow Spark's Kafka source where the meaning is the same.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark import (
    Admin,
    ConfigError,
    Credentials,
    ProducerConfig,
    TransportConfig,
    check_endpoint,
    check_name_server,
    normalize_tag_filter,
    transport_type,
)
from rmq_spark.spark import kafka
from rmq_wire.units import parse_duration_ms, parse_size_bytes

EARLIEST = -2  # in offset JSON, as Kafka's
LATEST = -1

DEFAULTS = {
    "startingOffsets.stream": "latest",
    "startingOffsets.batch": "earliest",
    "endingOffsets": "latest",
    "maxTriggerDelay_ms": 15 * 60 * 1000,
    "waitForMessages_ms": 500,
    "maxPartitions": 32,
    "maxBytesPerFetch": 64 << 20,
    "fetchTimeout_ms": 5 * 60 * 1000,
    "failOnDataLoss": True,
    "includeProperties": False,
    # the sink
    "queueSelector": "hash",  # "column" when the rows have a queue_id column
    "batchMaxBytes": ProducerConfig.batch_max_bytes,  # the producer's own defaults
    "batchMaxDelayMs": ProducerConfig.batch_max_delay_ms,
    "totalBatchMaxBytes": 64 << 20,
    "requestTimeout_ms": ProducerConfig.request_timeout_ms,  # Kafka's request.timeout.ms
    "deliveryTimeout_ms": ProducerConfig.delivery_timeout_ms,  # Kafka's delivery.timeout.ms
    "compression": "lz4",
    "codec": "arrow",
    "deliveryGuarantee": "exactlyOnce",
    "tls": False,
    "schema": "rocketmq",
}

# How reads and writes connect: TLS, as TransportConfig's fields.
_TLS_FILES = {"tlsCaFile": "tls_ca_file", "tlsCertFile": "tls_cert_file", "tlsKeyFile": "tls_key_file"}
TLS_OPTION_NAMES = ("tls", *_TLS_FILES)
# Spark's option names are case-insensitive: PySpark hands them over lower-cased.
OPTION_NAMES = (
    "endpoint", "nameServer", "topic", "topics", "topicPattern", "assign", "startingOffsets",
    "startingTimestamp", "endingOffsets", "endingTimestamp", "maxRecordsPerTrigger", "minRecordsPerTrigger",
    "maxTriggerDelay", "waitForMessages", "maxRecordsPerPartition", "minPartitions", "maxPartitions",
    "maxBytesPerFetch", "fetchTimeout", "failOnDataLoss", "tagFilter", "includeProperties", "consumerGroup",
    "accessKey", "secretKey", "schema", *TLS_OPTION_NAMES,
)
_BY_LOWER = {name.lower(): name for name in OPTION_NAMES}
SUBSCRIPTIONS = ("topic", "topics", "topicPattern", "assign")



@dataclass(frozen=True)
class BrokerAddress:
    """What a read or write reaches: broker_sim's own door (``endpoint``), or any RocketMQ
    cluster through its name servers (``name_server``, RocketMQ's remoting protocol), and how:
    TLS, and the account that signs the calls (its secret never shows in a repr)."""

    endpoint: str | None = None
    name_server: str | None = None
    transport: TransportConfig = field(default_factory=TransportConfig)  # TLS and credentials (their options)

    @property
    def native(self) -> bool:
        """Through name servers: RocketMQ's own protocol and messages."""
        return self.name_server is not None

    @property
    def transport_type(self) -> type:
        """The transport that reaches it: what a write through it may carry."""
        return transport_type(name_server=self.native)  # rmq_spark's: the Transport subclass it connects with

    def sdk(self, **transport_changes) -> dict:
        """The SDK's keyword arguments naming it and how to connect; ``transport_changes``:
        TransportConfig fields of one use (a deadline)."""
        where = {"endpoint": self.endpoint} if self.endpoint is not None else {"name_server": self.name_server}
        return {**where, "transport": dataclasses.replace(self.transport, **transport_changes)}

    def describe(self) -> str:
        return f"the broker {self.endpoint}" if self.endpoint is not None else f"the name servers {self.name_server}"


def queue_text(broker: str, queue_id: int) -> str:
    """A queue as option JSON and checkpoints name it: "3", or "broker-a:3" for a queue of a
    named broker (through name servers a topic may be served by several, each with a queue 3)."""
    return f"{broker}:{queue_id}" if broker else str(queue_id)


def parse_queue(text) -> tuple[str, int] | None:
    """(broker, queue id) of ``queue_text``'s form ("" when no broker is named); None if malformed."""
    if isinstance(text, int) and not isinstance(text, bool):
        return ("", text) if text >= 0 else None
    if not isinstance(text, str):
        return None
    broker, _sep, queue = text.rpartition(":")
    return (broker, int(queue)) if queue.isdigit() and (broker or not _sep) else None


@dataclass(frozen=True)
class Subscription:
    """Which queues to read: named topics (all their queues, new ones too), topics matching a
    pattern (new topics too), or assigned queues (exactly those)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: dict = field(default_factory=dict)  # topic -> tuple of (broker, queue id); broker "": not named

    def describe(self) -> str:
        if self.pattern is not None:
            return f"topicPattern {self.pattern!r}"
        if self.assign:
            return "assign " + json.dumps({t: [queue_text(*q) for q in queues] for t, queues in self.assign.items()})
        return "topics " + ", ".join(self.topics)

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in (self.assign or self.topics)


@dataclass(frozen=True)
class SourceOptions:
    """The checked options (see ``RocketMQBatchDataSource`` for what each means)."""

    address: BrokerAddress
    subscription: Subscription
    starting_offsets: object  # "earliest" | "latest" | {topic: {(broker, queue_id): offset or -2 / -1}} | None
    starting_timestamp_ms: int | None
    ending_offsets: object  # "latest" | {topic: {(broker, queue_id): offset or -1}} | None
    ending_timestamp_ms: int | None
    max_records_per_trigger: int | None
    min_records_per_trigger: int | None
    max_trigger_delay_ms: int
    wait_for_messages_ms: int
    max_records_per_partition: int | None
    min_partitions: int | None
    max_partitions: int
    max_bytes_per_fetch: int
    fetch_timeout_ms: int
    fail_on_data_loss: bool
    tag_filter: str | None
    include_properties: bool
    consumer_group: str | None
    schema: str = "rocketmq"  # "rocketmq" | "kafka": Spark's Kafka source's columns (kafka.py)

    def check_stream(self) -> None:
        """What a streaming read does not accept."""
        for name, value in (("endingOffsets", self.ending_offsets), ("endingTimestamp", self.ending_timestamp_ms)):
            if value is not None:
                raise ConfigError(f"option {name} is for batch reads (spark.read) only; a streaming query reads on "
                                  f"as messages arrive: drop {name}, or read with spark.read")

    def check_batch(self) -> None:
        """What a batch read does not accept."""
        if self.starting_offsets == "latest" or _names_offset(self.starting_offsets, LATEST):
            raise ConfigError("option startingOffsets='latest' (or -1 in its JSON) reads nothing in a batch read: use "
                              "'earliest', offsets, or startingTimestamp")
        if self.ending_offsets == "earliest" or _names_offset(self.ending_offsets, EARLIEST):
            raise ConfigError("option endingOffsets='earliest' (or -2 in its JSON) reads nothing: use 'latest' or "
                              "offsets, or endingTimestamp")
        for name, value in (("maxRecordsPerTrigger", self.max_records_per_trigger),
                            ("minRecordsPerTrigger", self.min_records_per_trigger),
                            ("consumerGroup", self.consumer_group)):
            if value is not None:
                raise ConfigError(f"option {name} applies to streaming queries (spark.readStream) only; drop it for "
                                  "a batch read")


def _names_offset(offsets, value: int) -> bool:
    return isinstance(offsets, dict) and any(v == value for queues in offsets.values() for v in queues.values())


def parse_options(options) -> SourceOptions:
    """Check ``options`` (a mapping of option name -> string, any case) into SourceOptions.

    Raises ConfigError naming the first unknown or malformed option and what it accepts.
    """
    options = dict(options)
    schema = _schema(options)
    given = {}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if name is None and schema == "kafka":
            name = kafka.OPTION_ALIASES.get(key.lower())
            if name is not None and any(_BY_LOWER.get(other.lower()) == name for other in options):
                raise ConfigError(f"options {key} and {name} are the same option (Spark's Kafka name and ours): "
                                  "give one")
        if name is None:
            raise ConfigError(_unknown(key))
        given[name] = value if isinstance(value, str) else str(value)
    address = _address(given)
    subscription = _subscription(given)
    opts = SourceOptions(
        address=address,
        subscription=subscription,
        starting_offsets=_offsets_option(given, "startingOffsets", subscription, ("earliest", "latest")),
        starting_timestamp_ms=_whole(given, "startingTimestamp", "a time in milliseconds since the Unix epoch",
                                     minimum=0),
        ending_offsets=_offsets_option(given, "endingOffsets", subscription, ("earliest", "latest")),
        ending_timestamp_ms=_whole(given, "endingTimestamp", "a time in milliseconds since the Unix epoch", minimum=0),
        max_records_per_trigger=_whole(given, "maxRecordsPerTrigger", "a positive number of records"),
        min_records_per_trigger=_whole(given, "minRecordsPerTrigger", "a positive number of records"),
        max_trigger_delay_ms=_duration(given, "maxTriggerDelay"),
        wait_for_messages_ms=_wait(given),
        max_records_per_partition=_whole(given, "maxRecordsPerPartition", "a positive number of records"),
        min_partitions=_whole(given, "minPartitions", "a positive number of partitions"),
        max_partitions=_whole(given, "maxPartitions", "a positive number of partitions") or DEFAULTS["maxPartitions"],
        max_bytes_per_fetch=_size(given, "maxBytesPerFetch"),
        fetch_timeout_ms=_duration(given, "fetchTimeout"),
        fail_on_data_loss=_bool(given, "failOnDataLoss"),
        tag_filter=_tag_filter(given),
        include_properties=_bool(given, "includeProperties"),
        consumer_group=_name(given, "consumerGroup"),
        schema=schema,
    )
    if (opts.min_records_per_trigger and opts.max_records_per_trigger
            and opts.min_records_per_trigger > opts.max_records_per_trigger):
        raise ConfigError(f"option minRecordsPerTrigger={opts.min_records_per_trigger} is above "
                          f"maxRecordsPerTrigger={opts.max_records_per_trigger}: a trigger could never run; lower it")
    if opts.min_partitions and opts.min_partitions > opts.max_partitions:
        raise ConfigError(f"option minPartitions={opts.min_partitions} is above maxPartitions={opts.max_partitions}: "
                          "raise maxPartitions too")
    if "maxTriggerDelay" in given and opts.min_records_per_trigger is None:
        raise ConfigError("option maxTriggerDelay only bounds the wait of minRecordsPerTrigger: set "
                          "minRecordsPerTrigger too, or drop maxTriggerDelay")
    return opts


def _schema(options: dict) -> str:
    """The option schema: rocketmq (default) or kafka, any case."""
    for key, value in options.items():
        if key.lower() == "schema":
            schema = str(value).strip().lower()
            if schema not in kafka.SCHEMAS:
                raise ConfigError(f"option schema={value!r}: use rocketmq (the default: body, keys, tags, queue_id, "
                                  "...) or kafka (Spark's Kafka connector's columns: key, value, partition, offset, "
                                  "...)")
            return schema
    return DEFAULTS["schema"]


def _unknown(key: str, names: tuple = OPTION_NAMES, role: str = "source") -> str:
    by_lower = {name.lower(): name for name in names}
    ours = kafka.HINTS.get(key.lower())
    if ours in names:
        also = ", or set schema=kafka to use Kafka's names and columns" if key.lower() in kafka.OPTION_ALIASES else ""
        hint = f" (that is Spark's Kafka {role}'s name; here it is {ours}{also})"
    else:
        close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
        hint = f" (did you mean {by_lower[close[0]]}?)" if close else ""
    return f"unknown option {key!r} for the rocketmq-batch {role}{hint}; the options are: {', '.join(names)}"


def _address(given: dict) -> BrokerAddress:
    """Exactly one of the options endpoint and nameServer, checked (reads and writes alike)."""
    named = [name for name in ("endpoint", "nameServer") if name in given]
    if len(named) != 1:
        which = "none was given" if not named else "both were given"
        raise ConfigError(f"give exactly one of the options endpoint (broker_sim's own door, HOST:PORT, e.g. "
                          "'127.0.0.1:10911') and nameServer (any RocketMQ cluster through its name servers, "
                          f"HOST:PORT;HOST:PORT, e.g. '127.0.0.1:9876'): {which}")
    name, value = named[0], given[named[0]].strip()
    try:
        where = {"endpoint": check_endpoint(value)} if name == "endpoint" else {
            "name_server": check_name_server(value)}
    except ConfigError as err:
        raise ConfigError(f"option {name}: {err}") from None
    return BrokerAddress(**where, transport=_transport(given))


def _transport(given: dict) -> TransportConfig:
    """The options tls, tlsCaFile, tlsCertFile and tlsKeyFile, and accessKey and secretKey,
    checked, as a TransportConfig."""
    tls = _bool(given, "tls")
    files = {option: given[option].strip() for option in _TLS_FILES if option in given}
    if files and not tls:
        raise ConfigError(f"option {', '.join(files)} applies to TLS connections: set the option tls=true too")
    if ("tlsCertFile" in files) != ("tlsKeyFile" in files):
        raise ConfigError("options tlsCertFile and tlsKeyFile go together: a client certificate (PEM) and its key")
    for option, path in files.items():
        try:
            Path(path).read_bytes()
        except OSError as err:
            raise ConfigError(f"option {option}={path!r}: cannot read it ({err.strerror or err}); give a PEM file "
                              "that the driver and every executor can read") from None
    return TransportConfig(tls=tls, credentials=_credentials(given),
                           **{_TLS_FILES[option]: path for option, path in files.items()})


def _credentials(given: dict) -> Credentials | None:
    """accessKey with secretKey, or with the secret in the environment variable RMQ_SECRET_KEY
    of the application (then it appears in no option: not in plans, not in logs)."""
    access_key = given.get("accessKey", "").strip()
    if not access_key:
        if "secretKey" in given:
            raise ConfigError("option secretKey needs accessKey, the account it is the secret of")
        return None
    if given.get("secretKey"):
        return Credentials(access_key, given["secretKey"])
    try:
        return Credentials.from_environment(access_key)
    except ConfigError as err:
        raise ConfigError(f"option accessKey: {err}, or give the option secretKey") from None


def _subscription(given: dict) -> Subscription:
    named = [name for name in SUBSCRIPTIONS if name in given]
    if len(named) != 1:
        which = "none was given" if not named else f"got {', '.join(named)}"
        raise ConfigError(f"give exactly one of the options {', '.join(SUBSCRIPTIONS)} ({which}): topic 'orders', "
                          "topics 'a,b', topicPattern 'orders-.*' or assign '{\"orders\": [0, 1]}'")
    name = named[0]
    value = given[name].strip()
    if name in ("topic", "topics"):
        topics = tuple(t.strip() for t in value.split(",")) if name == "topics" else (value,)
        if not all(topics) or (name == "topic" and "," in value):
            raise ConfigError(f"option {name}={given[name]!r}: give " +
                              ("one topic name (use topics for a comma list)" if name == "topic"
                               else "topic names separated by commas, none empty"))
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    if name == "topicPattern":
        try:
            re.compile(value)
        except re.error as err:
            raise ConfigError(f"option topicPattern={value!r} is not a regular expression ({err}); it must match "
                              "whole topic names, e.g. 'orders-.*'") from None
        if not value:
            raise ConfigError("option topicPattern is empty: give a regular expression matching whole topic names")
        return Subscription(pattern=value)
    assign = _json(value, "assign", '{"orders": [0, 1]}')
    if not isinstance(assign, dict) or not assign or not all(
            isinstance(t, str) and t and isinstance(q, list) and q and all(parse_queue(i) for i in q)
            for t, q in assign.items()):
        raise ConfigError(f"option assign={value!r}: give a JSON object of topic -> list of queue ids, "
                          'e.g. {"orders": [0, 1]}, or through nameServer {"orders": ["broker-a:0", "broker-b:0"]} '
                          "where a topic is served by several brokers")
    return Subscription(assign={t: tuple(sorted({parse_queue(i) for i in q})) for t, q in sorted(assign.items())})


def _json(value: str, name: str, example: str):
    try:
        return json.loads(value)
    except ValueError as err:
        raise ConfigError(f"option {name}={value!r} is not valid JSON ({err}); e.g. {example}") from None


def _offsets_option(given: dict, name: str, subscription: Subscription, words: tuple) -> object:
    """'earliest' / 'latest', or JSON {topic: {queue id: offset}} with -2 earliest, -1 latest."""
    if name not in given:
        return None
    value = given[name].strip()
    if value.lower() in words:
        return value.lower()
    example = '{"orders": {"0": 23, "1": -2}}'
    parsed = _json(value, name, example) if value.startswith("{") else None
    accepted = (f"option {name}={value!r}: use {' or '.join(words)}, or JSON of topic -> queue id -> offset, "
                f"with -2 for earliest and -1 for latest, e.g. {example} (a queue of a named broker: "
                '"broker-a:0")')
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(accepted)
    offsets = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict) or not queues:
            raise ConfigError(accepted)
        offsets[topic] = {}
        for queue, offset in queues.items():
            if not parse_queue(queue) or not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise ConfigError(accepted)
            offsets[topic][parse_queue(queue)] = offset
        if not subscription.matches(topic):
            raise ConfigError(f"option {name} names topic {topic!r}, which the subscription "
                              f"({subscription.describe()}) does not read")
        if subscription.assign and not set(offsets[topic]) <= set(subscription.assign[topic]):
            extra = [queue_text(*q) for q in sorted(set(offsets[topic]) - set(subscription.assign[topic]))]
            raise ConfigError(f"option {name} names queues {extra} of {topic!r}, which assign does not read")
    return offsets


def _whole(given: dict, name: str, what: str, minimum: int = 1) -> int | None:
    if name not in given:
        return None
    value = given[name].strip()
    if not re.fullmatch(r"-?\d+", value) or int(value) < minimum:
        raise ConfigError(f"option {name}={given[name]!r}: expected {what} (a whole number"
                          f"{' >= ' + str(minimum) if minimum else ''})")
    return int(value)


def _wait(given: dict) -> int:
    """waitForMessages: a duration up to 30 s, or 0 (a trigger that finds nothing does not wait)."""
    value = given.get("waitForMessages", "").strip()
    if re.fullmatch(r"0+(ms|s)?", value):
        return 0
    wait_ms = _duration(given, "waitForMessages")
    if wait_ms > Admin.MAX_WAIT_MS:
        raise ConfigError(f"option waitForMessages={value!r} is more than 30s: a trigger that finds nothing waits at "
                          "the broker at most that long (Spark waits for it to stop a query)")
    return wait_ms


def _duration(given: dict, name: str) -> int:
    return _positive(given, name, f"{name}_ms", parse_duration_ms,
                     "a duration such as 500ms, 30s, 15m, 1h or 1d (a bare number is milliseconds)")


def _size(given: dict, name: str) -> int:
    return _positive(given, name, name, parse_size_bytes,
                     "a positive size in bytes, or with a unit: 512k, 64m, 1g (binary units)")


def _positive(given: dict, name: str, default: str, parse, expected: str) -> int:
    """Option ``name`` read by ``parse`` (``rmq_wire.units``), which must give more than 0;
    ``DEFAULTS[default]`` when it is not given."""
    if name not in given:
        return DEFAULTS[default]
    value = parse(given[name])
    if not value:
        raise ConfigError(f"option {name}={given[name]!r}: expected {expected}")
    return value


def _bool(given: dict, name: str) -> bool:
    if name not in given:
        return DEFAULTS[name]
    value = given[name].strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name}={given[name]!r}: expected true or false")
    return value == "true"


def _tag_filter(given: dict) -> str | None:
    if "tagFilter" not in given:
        return None
    try:
        return normalize_tag_filter(given["tagFilter"]) or None
    except ConfigError as err:
        raise ConfigError(f"option tagFilter: {err}") from None


def _name(given: dict, name: str) -> str | None:
    if name not in given:
        return None
    value = given[name].strip()
    if not value:
        raise ConfigError(f"option {name} is empty: give a consumer group name, or drop the option")
    return value


# -- the sink ------------------------------------------------------------------------------------

SINK_OPTION_NAMES = (
    "endpoint", "nameServer", "topic", "queueSelector", "batchMaxBytes", "batchMaxDelayMs", "totalBatchMaxBytes",
    "requestTimeout", "deliveryTimeout", "compression", "codec", "deliveryGuarantee", "sinkId", "batchId",
    "accessKey", "secretKey", "schema",
    *TLS_OPTION_NAMES,
)
# Set by Spark on streaming writes (checkpointLocation from .option(...), queryName from .queryName(...)).
SPARK_WRITE_OPTIONS = ("checkpointLocation", "queryName")
_SINK_BY_LOWER = {name.lower(): name for name in SINK_OPTION_NAMES + SPARK_WRITE_OPTIONS}
QUEUE_SELECTORS = {"hash": "hash", "roundrobin": "roundRobin", "column": "column"}
DELIVERY_GUARANTEES = {"exactlyonce": "exactlyOnce", "atleastonce": "atLeastOnce"}


@dataclass(frozen=True)
class SinkOptions:
    """The checked options of a write (see ``RocketMQBatchDataSource`` for what each means)."""

    address: BrokerAddress
    topic: str | None
    queue_selector: str | None  # "hash" | "roundRobin" | "column"; None: by the columns (DEFAULTS)
    batch_max_bytes: int
    batch_max_delay_ms: int
    total_batch_max_bytes: int
    compression: str
    codec: str
    exactly_once: bool
    request_timeout_ms: int
    delivery_timeout_ms: int
    sink_id: str | None
    checkpoint_location: str | None
    query_name: str | None
    schema: str = "rocketmq"  # "kafka": the rows have Spark's Kafka sink's columns (kafka.py)
    batch_id: int | None = None  # df.write: the write's number under sinkId (foreachBatch's batch id)

    def check_batch_write(self) -> None:
        """What a batch write (``df.write``) does not accept."""
        if self.exactly_once and self.address.native and (self.sink_id is None or self.checkpoint_location is None):
            raise ConfigError("deliveryGuarantee=exactlyOnce through nameServer commits RocketMQ's transactional "
                              "messages one at a time, so a df.write keeps its decision where a rerun finds it: set "
                              ".option('checkpointLocation', DIR) and .option('sinkId', NAME), the same on a rerun "
                              "(in foreachBatch also .option('batchId', batch_id)); or drop the option for at least "
                              "once (each message carries a UNIQ_KEY, the same when the write is repeated)")

    def check_stream_write(self) -> None:
        """What a streaming write (``df.writeStream``) does not accept."""
        if self.batch_id is not None:
            raise ConfigError("option batchId numbers a df.write (inside foreachBatch: its batch_id); a stream's "
                              "micro-batches are numbered by Spark: drop batchId")

    @property
    def write_batch_id(self) -> int | None:
        """What a df.write is recorded as under its sinkId: batchId, 0 when only sinkId is given
        (None without a sinkId). Streams have Spark's micro-batch ids instead."""
        if self.batch_id is not None:
            return self.batch_id
        return 0 if self.sink_id is not None else None


def parse_sink_options(options) -> SinkOptions:
    """Check the options of a write (a mapping of option name -> string, any case) into
    SinkOptions. Raises ConfigError naming the first unknown or malformed option."""
    given = {}
    for key, value in dict(options).items():
        name = _SINK_BY_LOWER.get(key.lower())
        if name is None:
            read_option = _BY_LOWER.get(key.lower())
            if read_option is not None:
                raise ConfigError(f"option {read_option} is an option of reads (spark.read / readStream), not of "
                                  f"writes; the write options are: {', '.join(SINK_OPTION_NAMES)}")
            raise ConfigError(_unknown(key, SINK_OPTION_NAMES, "sink"))
        given[name] = value if isinstance(value, str) else str(value)
    address = _address(given)
    topic = given.get("topic")
    if topic is not None and (not topic.strip() or "," in topic):
        raise ConfigError(f"option topic={topic!r}: give one topic name (or a topic column, one topic per row)")
    transport = address.transport_type
    defaults = {**DEFAULTS, **_write_defaults(transport)}
    default = defaults.__getitem__
    opts = SinkOptions(
        address=address,
        topic=topic.strip() if topic is not None else None,
        queue_selector=_choice(given, "queueSelector", QUEUE_SELECTORS) if "queueSelector" in given else None,
        batch_max_bytes=_size(given, "batchMaxBytes"),
        batch_max_delay_ms=_whole(given, "batchMaxDelayMs", "a positive number of milliseconds")
        or DEFAULTS["batchMaxDelayMs"],
        total_batch_max_bytes=_size(given, "totalBatchMaxBytes"),
        compression=_choice(given, "compression", {"none": "none", "lz4": "lz4", "zstd": "zstd"}, default),
        codec=_choice(given, "codec", {"arrow": "arrow", "rmq": "rmq"}, default),
        exactly_once=_choice(given, "deliveryGuarantee", DELIVERY_GUARANTEES, default) == "exactlyOnce",
        request_timeout_ms=_duration(given, "requestTimeout"),
        delivery_timeout_ms=_duration(given, "deliveryTimeout"),
        sink_id=_sink_id(given),
        checkpoint_location=given.get("checkpointLocation"),
        query_name=given.get("queryName"),
        schema=_schema(given),
        batch_id=_whole(given, "batchId", "the write's batch id, foreachBatch's batch_id", minimum=0),
    )
    refused = transport.refused_write_settings(opts.codec, opts.compression)
    if refused:
        name, needed = next(iter(refused.items()))
        raise ConfigError(f"option {name}={given[name]!r}: through nameServer a batch is RocketMQ's MessageBatch, "
                          f"uncompressed, which RocketMQ's brokers and clients read: drop the option (or set "
                          f"{name}={needed})")
    if opts.delivery_timeout_ms < opts.request_timeout_ms:
        raise ConfigError(f"option deliveryTimeout ({opts.delivery_timeout_ms} ms) is below requestTimeout "
                          f"({opts.request_timeout_ms} ms): a batch would not have the time of one attempt; raise "
                          "deliveryTimeout")
    if opts.total_batch_max_bytes < opts.batch_max_bytes:
        raise ConfigError(f"option totalBatchMaxBytes={opts.total_batch_max_bytes} is below batchMaxBytes="
                          f"{opts.batch_max_bytes}: a writer could not hold a single batch; raise it")
    if opts.sink_id is not None and not opts.exactly_once and not address.native:
        raise ConfigError("option sinkId names the commits of deliveryGuarantee=exactlyOnce; drop it, or drop "
                          "deliveryGuarantee=atLeastOnce")
    if opts.batch_id is not None and opts.sink_id is None:
        raise ConfigError("option batchId numbers a write of a sink: set sinkId too, a name that stays the same on "
                          "every run (.option('sinkId', 'orders-agg').option('batchId', batch_id))")
    return opts


def _write_defaults(transport: type) -> dict:
    """The defaults of a write that ``transport`` changes: the one codec and compression its
    batches may have (``write_form``), at least once where it has no transactions."""
    defaults = {}
    if transport.write_form is not None:
        codec, compression = transport.write_form
        defaults.update(codec=codec.value, compression=compression.name.lower())
    if not transport.supports_transactions:
        defaults["deliveryGuarantee"] = "atLeastOnce"
    return defaults


def _choice(given: dict, name: str, choices: dict, default=None) -> str:
    """One of ``choices`` (lower-cased spelling -> canonical), any case; ``default(name)``
    (DEFAULTS[name]) if absent."""
    if name not in given:
        return default(name) if default is not None else DEFAULTS[name]
    value = choices.get(given[name].strip().lower())
    if value is None:
        raise ConfigError(f"option {name}={given[name]!r}: use one of {', '.join(choices.values())}")
    return value


def _sink_id(given: dict) -> str | None:
    if "sinkId" not in given:
        return None
    value = given["sinkId"].strip()
    if not re.fullmatch(r"[A-Za-z0-9._:@+=-]{1,150}", value):
        raise ConfigError(f"option sinkId={given['sinkId']!r}: use 1 to 150 letters, digits or . _ : @ + = - "
                          "(one id per query, the same on every restart)")
    return value
