"""The ``rocketmq-batch`` sink: ``df.write`` and ``df.writeStream`` into broker_sim topics,
exactly once; or into any RocketMQ cluster's through its name servers, at least once.

Spark hands each write task its rows as Arrow record batches (PySpark's Arrow writers); the
task gives them to the producer by column (``Producer.send_arrow``: routed, cut into batches
and encoded once, no Python object per row).

Exactly once: every task attempt prepares its batches under a transaction of its own (a new
id per attempt, so a retried task never shares one with the attempt it replaces), flushes, and
returns the ``PreparedTransaction`` in its commit message. The driver's commit ends exactly
the returned transactions in one call that also records (sink id, batch id): a micro-batch
replayed after a restart finds its batch id committed and makes nothing visible. An abort rolls
the returned transactions back; a failed attempt rolls its own back, and one that died without
a word is rolled back by the broker's transaction timeout.

Through name servers (RocketMQ's own sends) rows are visible as sent: at least once. Each row
carries a message id (UNIQ_KEY) made from the sink, the micro-batch, the partition and the
row's place in it, so a task retried or a micro-batch replayed writes its rows again under the
same ids, which readers can use to drop repeats. A stream written exactly once through name
servers rides on RocketMQ's transactional messages instead: ``sink_rocketmq.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlparse

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from rmq_spark import (
    Admin,
    ConfigError,
    PreparedTransaction,
    Producer,
    RmqError,
    TopicNotFoundError,
    Transactions,
    deterministic_keys,
    new_transaction_id,
)
from rmq_spark.spark import compat, kafka, sink_rocketmq
from rmq_spark.spark.options import SinkOptions

log = logging.getLogger(__name__)

_STRING = (StringType,)
# The columns a write takes, and the Spark types each may have.
COLUMN_TYPES = {
    "body": ((BinaryType, StringType), "binary or string"),
    "topic": (_STRING, "string"),
    "tags": (_STRING, "string"),
    "keys": (_STRING, "string"),
    "properties": ((MapType,), "map<string,string>"),
    "queue_id": ((IntegerType, LongType, ShortType, ByteType), "an integer type"),
    "broker": (_STRING, "string"),
    "born_timestamp": ((TimestampType, TimestampNTZType, LongType), "timestamp (or long milliseconds)"),
}
# Columns of the read schema that a write leaves out, so that rows read can be written back.
IGNORED_COLUMNS = ("queue_offset", "store_timestamp")
_PRODUCER_SELECTORS = {"hash": "hash", "roundRobin": "round_robin", "column": "hash"}
_NO_SINK_ID = "rocketmq-batch"  # the transaction id prefix of writes without a sink id


@dataclass(frozen=True)
class WritePlan:
    """What every task does with its rows, decided once on the driver from the schema."""

    columns: tuple  # the columns given to the producer, in the rows' order
    queue_selector: str  # the producer's: "hash" | "round_robin" (a queue_id column wins over both)
    kafka: bool = False  # the rows have Spark's Kafka sink's columns (option schema=kafka), renamed per batch


def plan_write(schema: StructType, options: SinkOptions) -> WritePlan:
    """Check the columns to write against ``options``; raises ConfigError naming the first
    problem, before any row is written. With schema=kafka the columns are Spark's Kafka sink's
    (``kafka.sink_schema`` names them as ours)."""
    as_kafka = options.schema == "kafka"
    if as_kafka:
        if "value" not in schema.fieldNames():
            raise ConfigError("the rows have no 'value' column: with schema=kafka every message needs one (binary or "
                              f"string), as in Spark's Kafka sink; the columns are {', '.join(schema.fieldNames())}")
        schema = kafka.sink_schema(schema)
    fields = {field.name: field.dataType for field in schema.fields}
    if "body" not in fields:
        hint = (" (Spark's Kafka sink calls it 'value': set the option schema=kafka to write Kafka's columns)"
                if "value" in fields else "")
        raise ConfigError(f"the rows have no 'body' column{hint}: every message needs one (binary or string); "
                          f"the columns are {', '.join(fields) or 'none'}")
    for name, data_type in fields.items():
        if name in IGNORED_COLUMNS:
            continue
        if name not in COLUMN_TYPES:
            ours = kafka.SINK_COLUMNS.get(name.lower())
            hint = (f" (Spark's Kafka sink calls {name!r} what is {ours!r} here; set the option schema=kafka to "
                    "write Kafka's columns)" if ours else "")
            raise ConfigError(f"column {name!r} is not one rocketmq-batch writes{hint}; the columns are "
                              f"{', '.join(COLUMN_TYPES)}: select or rename the columns to write")
        types, described = COLUMN_TYPES[name]
        if not isinstance(data_type, types) or (name == "properties" and not _string_map(data_type)):
            raise ConfigError(f"column {name!r} is {data_type.simpleString()}; rocketmq-batch writes it as "
                              f"{described}: cast it")
    if options.topic is None and "topic" not in fields:
        raise ConfigError("name the topic to write to: set the option topic, or give the rows a 'topic' column")
    selector = options.queue_selector or ("column" if "queue_id" in fields else "hash")
    if selector == "column" and "queue_id" not in fields:
        raise ConfigError("option queueSelector=column takes each row's queue from the 'queue_id' column, and "
                          "the rows have none: add it, or use hash or roundRobin")
    dropped = set(IGNORED_COLUMNS)
    if options.topic is not None:
        dropped.add("topic")  # the option wins over the column, as in Spark's Kafka sink
    if selector != "column":
        dropped.update(("queue_id", "broker"))
    return WritePlan(tuple(name for name in fields if name not in dropped), _PRODUCER_SELECTORS[selector], as_kafka)


def _string_map(data_type) -> bool:
    return isinstance(data_type.keyType, StringType) and isinstance(data_type.valueType, StringType)


def check_topic(options: SinkOptions) -> None:
    """The topic option names a topic of the broker, or one its first send creates (RocketMQ's
    autoCreateTopicEnable). Rows with a topic column are checked as they are sent: a task fails
    on the first one that neither exists nor can be created, and nothing of the batch is
    committed."""
    if options.topic is None:
        return
    with Admin(**options.address.sdk()) as admin:
        try:
            admin.describe_topic(options.topic)
        except TopicNotFoundError:
            if admin.new_topic(options.topic) is not None:
                return
            how = (f"rmq-admin --endpoint {options.address.endpoint} topic create {options.topic} --queues N --type "
                   "BatchCQ" if not options.address.native else
                   f"mqadmin updateTopic -n {options.address.name_server} -c <cluster> -t {options.topic}")
            makes = "whose brokers create" if options.address.native else "which creates"
            away = ("; if it exists on brokers that are down or restarting, the write works once they register"
                    if options.address.native else "")
            raise ConfigError(f"topic {options.topic!r} does not exist on {options.address.describe()}, {makes} no "
                              f"topic on a first send (autoCreateTopicEnable=false): create it first ({how}){away}"
                              ) from None
        except RmqError as away:
            if not away.retriable:
                raise
            # its brokers restarting, say: the tasks wait for them (deliveryTimeout), the plan does not fail
            log.warning("topic %s cannot be checked now (%s): its writes wait for its brokers up to deliveryTimeout "
                        "(%d ms)", options.topic, away, options.delivery_timeout_ms)


# Spark gives every task of a streaming query its id (the one kept in the checkpoint's metadata).
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def task_sink_id(options: SinkOptions, required: bool = False) -> str | None:
    """The sink id of a stream's write task, the same on every run of the query: the option
    sinkId, else ``spark-<query id>``, the id Spark keeps in the checkpoint (a new checkpoint,
    even at the same location, is a new query and a new sink) and hands every task of the query,
    wherever the checkpoint is (``.option("checkpointLocation")``, the session's
    ``spark.sql.streaming.checkpointLocation``, a remote file system). Outside a Spark task (a
    writer driven by hand) it is read from the checkpoint option; when nothing names it, None, or
    with ``required`` the ConfigError saying what would."""
    if options.sink_id is not None:
        return options.sink_id
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    if query_id:
        return f"spark-{query_id}"
    try:
        return stream_sink_id(options)
    except ConfigError:
        if required:
            raise
        return None


def stream_sink_id(options: SinkOptions) -> str:
    """The sink id of a streaming write read from the checkpoint option: the option sinkId,
    else ``spark-<query id>`` with the id in the checkpoint's ``metadata`` file (as Spark hands
    it to tasks, ``task_sink_id``)."""
    if options.sink_id is not None:
        return options.sink_id
    location = options.checkpoint_location
    if location is None:
        raise ConfigError("deliveryGuarantee=exactlyOnce recognises replayed micro-batches by a sink id that stays "
                          "the same across restarts: run the writer in a streaming query (Spark gives its tasks the "
                          "query's id), or set .option('checkpointLocation', ...) or the option sinkId")
    metadata = _local_path(location) / "metadata"
    try:
        query_id = json.loads(metadata.read_text(encoding="utf-8").splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as err:
        raise ConfigError(f"cannot read the query id from {metadata} ({err}): set the option sinkId to a name "
                          "that stays the same across restarts of this query") from None
    return f"spark-{query_id}"


def _local_path(location: str) -> Path:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location)
    raise ConfigError(f"the checkpoint {location!r} is not on the local file system, where the sink reads the "
                      "query id: set the option sinkId to a name that stays the same across restarts of this query")


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What a task attempt wrote: its rows, and with exactlyOnce its prepared transaction."""

    rows: int
    transaction: Optional[PreparedTransaction] = None
    sink_id: Optional[str] = None  # streams: what the task's rows are committed under (task_sink_id)
    halves: tuple = ()  # exactly once through name servers: the HalfMessages the attempt prepared
    group: Optional[str] = None  # ... and the producer group they name


def write_partition(options: SinkOptions, plan: WritePlan, batches: Iterator[pa.RecordBatch],
                    transaction_prefix: str, batch: int | None) -> SinkCommitMessage:
    """Send a task's rows of ``batch`` (a micro-batch, a numbered df.write, or None); with
    exactlyOnce, prepared under a new transaction of this attempt; through name servers, each
    row with the message id of its place (``_ids_name``)."""
    transaction_id = new_transaction_id(_attempt_prefix(transaction_prefix, batch)) if options.exactly_once else None
    ids_name = _ids_name(transaction_prefix, batch) if options.address.native else None
    producer = Producer(**options.address.sdk(), transaction_id=transaction_id, codec=options.codec,
                        compression=options.compression, queue_selector=plan.queue_selector,
                        batch_max_bytes=options.batch_max_bytes, batch_max_delay_ms=options.batch_max_delay_ms,
                        total_batch_max_bytes=options.total_batch_max_bytes,
                        request_timeout_ms=options.request_timeout_ms, delivery_timeout_ms=options.delivery_timeout_ms,
                        # a task waits for room, or for a restarting cluster's routes, as long as for an answer
                        send_timeout_ms=options.delivery_timeout_ms)
    try:
        rows = 0
        unanswered = deque()  # sends whose answers are not checked yet (answered ones free their payloads)
        for batch in _read_ahead(batches):
            if batch.num_rows == 0:
                continue
            if plan.kafka:
                batch = kafka.to_rocketmq(batch)
            columns = batch.select(plan.columns)
            if ids_name is not None:
                columns = columns.append_column("message_id", deterministic_keys(ids_name, rows, batch.num_rows))
            unanswered.append(producer.send_arrow(columns, options.topic))
            rows += batch.num_rows
            while unanswered and unanswered[0].done():
                unanswered.popleft().wait(0)  # raises the send's error, if any
        producer.flush()
        for send in unanswered:
            send.wait(0)
        message = SinkCommitMessage(rows, producer.prepared() if transaction_id else None)
    except BaseException:
        _abandon(producer, options, transaction_id)
        raise
    producer.close()
    return message


_END = object()


def _read_ahead(batches: Iterator[pa.RecordBatch], depth: int = 2) -> Iterator[pa.RecordBatch]:
    """``batches``, read from Spark by a thread of its own up to ``depth`` ahead, so that
    reading the next Arrow batch from Spark overlaps encoding and sending this one (both
    release the GIL for their copies and compression)."""
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(_END)
        except BaseException as error:  # handed to the sending thread, which raises it
            put(error)

    reader = threading.Thread(target=read, name="rocketmq-batch-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def _ids_name(sink: str, batch: int | None) -> str:
    """What names a task's rows, the same for every attempt of it and every replay of its
    batch: ``<sink>.b<batch>.p<partition>`` (a row's id adds its place in the task)."""
    context = TaskContext.get()
    if context is None:
        return sink
    return f"{sink}{_batch_part(batch)}.p{context.partitionId()}"


def _micro_batch() -> int | None:
    """The micro-batch a streaming write task writes (None outside a Spark task)."""
    context = TaskContext.get()
    batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
    return int(batch) if batch else None


def _attempt_prefix(prefix: str, batch: int | None) -> str:
    """``<sink>.b<batch>.p<partition>.a<attempt>``: who prepared a transaction, for people
    reading the broker's transaction list (uniqueness comes from the random part after it)."""
    context = TaskContext.get()
    if context is None:  # called outside a Spark task (tests driving the writer directly)
        return prefix
    return f"{prefix}{_batch_part(batch)}.p{context.partitionId()}.a{context.attemptNumber()}"


def _batch_part(batch: int | None) -> str:
    """``.b<batch>`` of a micro-batch or a numbered df.write, empty for another write."""
    return "" if batch is None else f".b{batch}"


def _abandon(producer: Producer, options: SinkOptions, transaction_id: str | None) -> None:
    """A failed attempt: stop sending and roll back what it prepared, so that it does not wait
    for the broker's timeout. Best effort: the timeout rolls it back anyway."""
    try:
        producer.close()
    except Exception:  # noqa: BLE001 - the task's own error is the one to report
        pass
    if transaction_id is None or not producer.prepared().batch_count:  # the broker never heard of it
        return
    try:
        with Transactions(**options.address.sdk()) as txns:
            txns.rollback([transaction_id])
    except Exception as err:  # noqa: BLE001
        log.warning("rocketmq-batch: could not roll back transaction %s of a failed write task (%s); the broker's "
                    "transaction timeout will", transaction_id, err)


def prepared_transactions(messages) -> list:
    """The transactions of the tasks that returned, leaving out those that prepared nothing
    (the broker never heard of them)."""
    return [m.transaction for m in messages
            if m is not None and m.transaction is not None and m.transaction.message_count > 0]


def roll_back(options: SinkOptions, messages, what: str) -> None:
    transactions = prepared_transactions(messages)
    if not transactions:
        return
    try:
        with Transactions(**options.address.sdk()) as txns:
            txns.rollback(transactions)
    except Exception as err:  # noqa: BLE001 - Spark reports the failure that caused the abort
        log.warning("rocketmq-batch: could not roll back the %d transactions of %s (%s); the broker's transaction "
                    "timeout will", len(transactions), what, err)


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write``: every task prepares its rows (exactlyOnce), and ``commit`` makes all of
    them visible in one step, or ``abort`` none. With sinkId (and batchId, default 0) the commit
    is recorded under (sink id, batch id) as a stream's micro-batch is, so the same write run
    again (a job rerun, or a micro-batch foreachBatch runs again after a restart) stores nothing
    twice; through name servers the decision is kept under checkpointLocation
    (``sink_rocketmq``), where a rerun finishes what a dead driver left."""

    def __init__(self, options: SinkOptions, plan: WritePlan):
        self.options = options
        self.plan = plan
        # Names the rows' ids (through name servers) and transactions: the sink, else this write.
        self.name = options.sink_id or (f"{_NO_SINK_ID}-write-{uuid.uuid4().hex}" if options.address.native
                                        else _NO_SINK_ID)

    @property
    def _decides(self) -> bool:
        """Exactly once through name servers: RocketMQ's transactional messages and a decision."""
        return self.options.exactly_once and self.options.address.native

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        if self._decides:
            halves, group = sink_rocketmq.prepare(self.options, self.plan, _read_ahead(iterator), self.name,
                                                  _decisions(self.options, streaming=False),
                                                  self.options.write_batch_id)
            return SinkCommitMessage(len(halves), sink_id=self.name, halves=tuple(halves), group=group)
        return write_partition(self.options, self.plan, iterator, self.name, self.options.write_batch_id)

    def commit(self, messages) -> None:
        if self._decides:
            sink_rocketmq.commit(self.options, _decisions(self.options, streaming=False), messages,
                                 self.options.write_batch_id, log)
            return
        transactions = prepared_transactions(messages)
        if self.options.sink_id is not None and self.options.exactly_once:  # recorded, even with no rows
            with Transactions(**self.options.address.sdk()) as txns:
                result = txns.commit(transactions, sink_id=self.options.sink_id, batch_id=self.options.write_batch_id)
            if result.sink_batch_replayed:
                log.warning("rocketmq-batch: batch %d of sink %s was committed before (the same write run again); "
                            "its rows were not written again", self.options.write_batch_id, self.options.sink_id)
        elif transactions:
            with Transactions(**self.options.address.sdk()) as txns:
                txns.commit(transactions)

    def abort(self, messages) -> None:
        if self._decides:
            sink_rocketmq.abort(self.options, _decisions(self.options, streaming=False), messages,
                                self.options.write_batch_id)
            return
        roll_back(self.options, messages, "an aborted write")


class RocketMQBatchStreamWriter(compat.StreamWriter):
    """``df.writeStream``: each micro-batch's tasks prepare their rows (exactlyOnce), and
    ``commit(messages, batchId)`` makes them visible and records (sink id, batchId) in one
    step; a batch id committed before (a replay after a restart) makes nothing visible.
    ``schema``: the rows' Spark schema (PySpark 4.0 hands a stream writer rows, made Arrow
    batches here: ``compat.arrow_batches``)."""

    def __init__(self, options: SinkOptions, plan: WritePlan, schema: StructType | None = None):
        self.options = options
        self.plan = plan
        self.schema = schema
        # Names a run's rows when nothing stable does (a writer driven by hand, atLeastOnce).
        self.run_name = f"{_NO_SINK_ID}-run-{uuid.uuid4().hex}" if options.address.native else _NO_SINK_ID

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        iterator = compat.arrow_batches(iterator, self.schema)
        sink_id = task_sink_id(self.options, required=self.options.exactly_once)
        if sink_id is None and self.options.address.native:
            log.warning("rocketmq-batch: this write names its rows' message ids by its run (no query id, no sinkId "
                        "option): rows written again after a restart get new ids")
        if self.options.exactly_once and self.options.address.native:
            halves, group = sink_rocketmq.prepare(self.options, self.plan, _read_ahead(iterator), sink_id,
                                                  _decisions(self.options), _micro_batch())
            return SinkCommitMessage(len(halves), sink_id=sink_id, halves=tuple(halves), group=group)
        name = sink_id if sink_id is not None and (self.options.exactly_once or self.options.address.native) \
            else self.run_name
        return dataclasses.replace(write_partition(self.options, self.plan, iterator, name, _micro_batch()),
                                   sink_id=sink_id)

    def commit(self, messages, batchId: int) -> None:
        if not self.options.exactly_once:  # atLeastOnce: every row is visible once sent
            return
        if self.options.address.native:
            sink_rocketmq.commit(self.options, _decisions(self.options), messages, batchId, log)
            return
        sink_id = self.options.sink_id or next((m.sink_id for m in messages if m is not None and m.sink_id), None)
        if sink_id is None:  # no task returned: nothing was prepared
            return
        with Transactions(**self.options.address.sdk()) as txns:
            result = txns.commit(prepared_transactions(messages), sink_id=sink_id, batch_id=batchId)
        if result.sink_batch_replayed:
            log.warning("rocketmq-batch: micro-batch %d of sink %s was committed before (a replay after a restart); "
                        "its rows were not written again", batchId, sink_id)

    def abort(self, messages, batchId: int) -> None:
        if self.options.exactly_once and self.options.address.native:
            sink_rocketmq.abort(self.options, _decisions(self.options), messages, batchId)
            return
        roll_back(self.options, messages, f"micro-batch {batchId}")


def _decisions(options: SinkOptions, streaming: bool = True) -> Path:
    """Where a write exactly once through name servers keeps its decisions: beside a stream's
    checkpoint, or for a df.write under checkpointLocation in a directory of its sink; named and
    local."""
    if options.checkpoint_location is None:
        raise ConfigError("deliveryGuarantee=exactlyOnce through nameServer keeps each micro-batch's decision beside "
                          "the query's checkpoint: set .option('checkpointLocation', ...) on the writeStream")
    return sink_rocketmq.decisions_dir(_local_path(options.checkpoint_location),
                                       None if streaming else options.sink_id)


def make_writer(options: SinkOptions, schema: StructType, overwrite: bool, streaming: bool):
    """The writer of ``df.write`` or ``df.writeStream``, after every check that can be made
    before a row is written. A stream's ``overwrite`` is complete mode: each micro-batch's whole
    result is appended, as Spark's Kafka sink does."""
    if overwrite and not streaming:
        raise ConfigError("rocketmq-batch appends to topics, which cannot be overwritten: use mode('append')")
    if not streaming:
        options.check_batch_write()
    else:
        options.check_stream_write()
    if options.exactly_once and options.address.native:
        _decisions(options, streaming)
    plan = plan_write(schema, options)
    check_topic(options)
    return RocketMQBatchStreamWriter(options, plan, schema) if streaming else RocketMQBatchWriter(options, plan)
