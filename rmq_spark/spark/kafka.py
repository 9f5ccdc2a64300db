"""Spark's Kafka connector's names and columns, so that a Kafka job ports by changing the format.

With the option ``schema=kafka``, reads yield the Kafka source's columns and take its option
names where one has an equivalent here; writes take the Kafka sink's columns. The rocketmq
schema stays the default. This is the one place that knows the mapping: the options, the
source and the sink ask it (also for the hints that name Kafka's words without the option).

=================  ==========================================================================
Kafka column       here
=================  ==========================================================================
key binary         keys, as UTF-8 (RocketMQ's keys are strings; null when a message has none)
value binary       body
topic string       topic
partition int      queue_id (through nameServer a queue is (broker, queue id): the ``broker``
                   column follows the Kafka columns)
offset long        queue_offset
timestamp          born_timestamp, the producer's time (Kafka's CreateTime)
timestampType int  0 (CreateTime)
headers            properties (user properties), as array<struct<key string, value binary>>;
                   with includeHeaders only
=================  ==========================================================================

RocketMQ's tags have no Kafka column: read them with the default schema (``tags``).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq_spark import ConfigError

SCHEMAS = ("rocketmq", "kafka")

# Options of Spark's Kafka source that mean the same here (lower-cased: PySpark hands options
# over lower-cased) -> our names; accepted with schema=kafka.
OPTION_ALIASES = {
    "subscribe": "topics", "subscribepattern": "topicPattern", "maxoffsetspertrigger": "maxRecordsPerTrigger",
    "minoffsetspertrigger": "minRecordsPerTrigger", "includeheaders": "includeProperties",
}
# Words of Kafka (and RocketMQ's other clients) a user may type, and what we call the nearest
# thing: only named in the errors, as they differ in meaning (bootstrap servers: our endpoint or
# nameServer; Kafka's group id: the source never commits, ours does with consumerGroup).
HINTS = {
    **OPTION_ALIASES, "kafka.bootstrap.servers": "endpoint", "kafka.group.id": "consumerGroup",
    "groupidprefix": "consumerGroup", "namesrvaddr": "nameServer", "namesrv": "nameServer",
}
# The Kafka sink's columns -> ours.
SINK_COLUMNS = {"value": "body", "key": "keys", "topic": "topic", "partition": "queue_id", "headers": "properties",
                "broker": "broker"}
# Columns of the Kafka read schema a write leaves out, so that rows read can be written back.
IGNORED_SINK_COLUMNS = ("offset", "timestamp", "timestampType")
_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
_ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def read_schema(include_headers: bool, with_broker: bool) -> StructType:
    """The Kafka source's schema (``headers`` with includeHeaders), and ``broker`` through
    nameServer, where a partition number alone does not name a queue."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", _HEADERS))
    if with_broker:
        fields.append(StructField("broker", StringType()))
    return StructType(fields)


def to_kafka(batch: pa.RecordBatch, include_headers: bool, with_broker: bool) -> pa.RecordBatch:
    """Rows of the read schema as the Kafka source's columns (no copy of bodies)."""
    columns = {
        "key": batch.column("keys").cast(pa.binary()),
        "value": batch.column("body"),
        "topic": batch.column("topic"),
        "partition": batch.column("queue_id"),
        "offset": batch.column("queue_offset"),
        "timestamp": batch.column("born_timestamp"),
        "timestampType": pa.repeat(pa.scalar(0, pa.int32()), batch.num_rows),
    }
    if include_headers:
        properties = batch.column("properties")
        headers = pa.StructArray.from_arrays([properties.keys, properties.items.cast(pa.binary())],
                                             fields=list(_ARROW_HEADER))
        columns["headers"] = pa.ListArray.from_arrays(properties.offsets, headers, mask=properties.is_null())
    if with_broker:
        columns["broker"] = batch.column("broker")
    return pa.RecordBatch.from_pydict(columns)


def sink_schema(schema: StructType) -> StructType:
    """The Kafka sink's columns as the rocketmq sink's (names and types), for its checks;
    raises ConfigError for a column the Kafka schema does not have, or of the wrong shape."""
    fields = []
    for field in schema.fields:
        if field.name in IGNORED_SINK_COLUMNS:
            continue
        ours = SINK_COLUMNS.get(field.name)
        if ours is None:
            raise ConfigError(f"column {field.name!r} is not one of the Kafka sink's (schema=kafka): the columns are "
                              f"{', '.join(SINK_COLUMNS)}; select or rename the columns to write, or drop "
                              "schema=kafka to write rocketmq-batch's own (body, keys, tags, ...)")
        data_type = field.dataType
        if field.name == "key" and isinstance(data_type, BinaryType):
            data_type = StringType()  # checked as UTF-8 row by row (to_rocketmq)
        elif field.name == "headers":
            if not _kafka_headers(data_type):
                raise ConfigError(f"column 'headers' is {data_type.simpleString()}; with schema=kafka it is "
                                  "array<struct<key:string,value:binary>> as in Spark's Kafka sink: cast it")
            data_type = MapType(StringType(), StringType())
        fields.append(StructField(ours, data_type))
    return StructType(fields)


def to_rocketmq(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Rows of the Kafka sink's columns as the rocketmq sink's; raises ConfigError for a key or
    a header value that is not UTF-8 (RocketMQ's keys and properties are strings)."""
    columns = {}
    for name in batch.schema.names:
        if name in IGNORED_SINK_COLUMNS:
            continue
        column = batch.column(name)
        if name == "key" and pa.types.is_binary(column.type):
            column = _utf8(column, "key", "RocketMQ's keys")
        elif name == "headers":
            column = _headers_map(column)
        columns[SINK_COLUMNS[name]] = column
    return pa.RecordBatch.from_pydict(columns)


def _kafka_headers(data_type) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    element = {f.name: f.dataType for f in data_type.elementType.fields}
    return (set(element) == {"key", "value"} and isinstance(element["key"], StringType)
            and isinstance(element["value"], (BinaryType, StringType)))


def _headers_map(headers: pa.Array) -> pa.Array:
    entries = headers.flatten()  # the structs of every row, in order (offsets start at 0 after flatten)
    values = _utf8(entries.field("value"), "headers", "RocketMQ's properties")
    offsets = pa.array(headers.offsets.to_numpy() - headers.offsets[0].as_py(), pa.int32())
    return pa.MapArray.from_arrays(offsets, entries.field("key"), values, mask=headers.is_null())


def _utf8(column: pa.Array, name: str, what: str) -> pa.Array:
    if pa.types.is_string(column.type):
        return column
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        raise ConfigError(f"column {name!r} holds bytes that are not UTF-8, and {what} are strings: encode them "
                          "as text (base64 or hex), or write them in value") from None
