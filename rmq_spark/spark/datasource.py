"""The ``rocketmq-batch`` data source: one class that Spark asks for the readers of
``spark.read`` / ``readStream`` (``source.py``) and the writers of ``df.write`` /
``writeStream`` (``sink.py``), each with its options checked (``options.py``)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from rmq_spark import ConfigError
from rmq_spark.spark import kafka, sink
from rmq_spark.spark.options import SourceOptions, parse_options, parse_sink_options
from rmq_spark.spark.source import RocketMQBatchReader, RocketMQBatchStreamReader, spark_schema

NAME = "rocketmq-batch"


class RocketMQBatchDataSource(DataSource):
    """``spark.readStream.format("rocketmq-batch")`` and ``spark.read.format("rocketmq-batch")``:
    topics of a broker_sim broker, or of any RocketMQ 4.x / 5.x cluster through its name
    servers, read by offset ranges at the speed of the batch model;
    ``df.writeStream.format("rocketmq-batch")`` and ``df.write.format("rocketmq-batch")``:
    rows written to topics, exactly once into broker_sim, at least once into RocketMQ (the
    write options follow the read options).

    Registered by itself on install (the top-level module ``pyspark_rocketmq_batch``), or with
    ``rmq_spark.spark.register(spark)``. Rows have the schema topic string, broker string,
    queue_id int, queue_offset long, body binary, tags string, keys string, born_timestamp
    timestamp, store_timestamp timestamp, and with ``includeProperties`` properties
    map<string,string>; ``broker`` is the broker a row came from through ``nameServer`` (a
    topic's queues are (broker, queue id)), null through ``endpoint``. A streaming query
    checkpoints ``{"topic": {"queueId": next_offset}}``, naming a queue of a named broker
    ``"broker:queueId"``; the same offsets always give the same rows, so a query restarted from
    its checkpoint sees every message exactly once. Unknown or malformed options fail at
    ``load()``.

    Parameters
    ----------
    Options of reads:

    endpoint : str
        The broker_sim broker's ``HOST:PORT`` (its own door). One of endpoint and nameServer.
    nameServer : str
        RocketMQ's name servers, ``HOST:PORT;HOST:PORT``: any RocketMQ cluster (broker_sim's
        remoting door too), read by pulls (RocketMQ's remoting protocol). Every read option
        works the same; brokers that join a topic are read from their first offset, a broker
        that leaves fails the query naming it (failOnDataLoss) and one that cannot be reached
        for a while is waited for.
    tls : bool
        ``true``: connect with TLS, to a broker that serves TLS (``rmq-broker-sim --tls-cert``,
        or RocketMQ with TLS enabled); default ``false``. Reads and writes alike. The broker's
        certificate must name the host of endpoint / nameServer and be signed by a CA of the
        system's, or of tlsCaFile.
    tlsCaFile : str
        With tls: a PEM file of the CA that signed the broker's certificate (a private CA).
    tlsCertFile : str
        With tls: this client's PEM certificate, for a broker that requires one (mutual TLS,
        ``--tls-client-ca``); with tlsKeyFile.
    tlsKeyFile : str
        The PEM private key of tlsCertFile, unencrypted. The files are read by the driver and
        by every executor: give paths they can all read.
    topic, topics, topicPattern, assign : str
        Exactly one. ``topic``: one topic; ``topics``: a comma list; ``topicPattern``: a
        regular expression matching whole topic names (topics created later are read too;
        RocketMQ's own topics, ``is_system_topic``, never);
        ``assign``: JSON of topic -> queue ids, ``{"orders": [0, 1]}`` (exactly those queues;
        ``"broker-a:0"`` names a queue of a topic served by several brokers).
        Queues a topic gains during a query are read from their first offset.
    startingOffsets : str
        ``earliest``, ``latest`` or JSON ``{"topic": {"queueId": offset}}`` with -2 for
        earliest and -1 for latest; a topic named must have every queue named, a topic left
        out starts at earliest. Default ``latest`` for streams, ``earliest`` for batch reads.
        Applies when a query starts without a checkpoint only.
    startingTimestamp : int
        Milliseconds since the epoch: start each queue at its first message stored at or after
        this time (the queue's end if none is). Wins over startingOffsets.
    endingOffsets : str
        Batch reads only: ``latest`` (default) or JSON as startingOffsets (-1 latest).
    endingTimestamp : int
        Batch reads only: end each queue before its first message stored at or after this time.
    maxRecordsPerTrigger : int
        Streams: at most this many records per micro-batch, split over the queues in
        proportion to their backlog, none starved (round robin when there are more queues
        with a backlog than records). Exact to the record. Default: no limit.
    minRecordsPerTrigger : int
        Streams: hold a trigger until this many records wait, or maxTriggerDelay has passed
        since the last micro-batch. Not applied under Trigger.AvailableNow.
    maxTriggerDelay : str
        The longest a trigger is held by minRecordsPerTrigger: ``500ms``, ``30s``, ``15m``
        (default), ``1h``; a bare number is milliseconds.
    waitForMessages : str
        Streams: a trigger that finds no new message waits at the broker for one this long, at
        most (a long poll: the broker answers as the messages are stored, and the micro-batch
        starts then, not at the next trigger). Default ``500ms``; ``0`` answers at once; 30s at
        most (stopping a query waits for it).
    maxRecordsPerPartition : int
        At most this many records per Spark task: larger ranges are split. Default: no limit.
    minPartitions : int
        At least this many tasks per micro-batch (or batch read), when there are enough
        records: the largest ranges are split.
    maxPartitions : int
        At most this many tasks per micro-batch (default 32) unless maxRecordsPerPartition
        needs more: the ranges of many queues are packed together, each task reading all its
        ranges with one ReadRanges call.
    maxBytesPerFetch : str
        The stored bytes one ReadRanges call may return, so the most a task holds whatever
        its range: bytes, or ``512k``, ``64m`` (default), ``1g``.
    fetchTimeout : str
        The deadline of one ReadRanges call, whose records stream to Spark as it takes them
        (a slow sink holds the call open): a duration as maxTriggerDelay, default ``5m``.
    failOnDataLoss : bool
        ``true`` (default): fail the query when messages it had to read are gone (deleted
        below the checkpointed offset, a queue reset, its topic deleted). ``false``: skip them
        with a warning and read on.
    tagFilter : str
        ``TagA || TagB``: only messages with one of these tags (filtered by the broker);
        ``*`` (default) for all. Offsets still advance past the others.
    includeProperties : bool
        Add the ``properties`` column of user properties (default ``false``).
    consumerGroup : str
        Streams: commit the end offsets of every finished micro-batch as this consumer group's
        offsets on the broker, so its lag is visible outside Spark (``rmq-admin group
        offsets``; through nameServer RocketMQ's consumer offsets, which ``mqadmin
        consumerProgress`` and the dashboard show). The checkpoint stays the source of truth
        for the query itself. Through nameServer it also names the group of the pulls (RocketMQ
        brokers without autoCreateSubscriptionGroup need the group created); give the query a
        group of its own.
    accessKey : str
        For brokers that check ACLs (broker_sim with ``--acl-file``, RocketMQ with ACLs on):
        the account every call is signed with, by RocketMQ's own signatures. The account needs
        SUB on the topics read (through nameServer also on the pulls' group, ``consumerGroup``
        or ``rocketmq-batch-reader``).
    schema : str
        ``rocketmq`` (default: the columns above) or ``kafka``: Spark's Kafka connector's
        columns, so that a Kafka job ports by changing the format's name: key binary (keys as
        UTF-8), value binary (body), topic, partition int (queue_id), offset long
        (queue_offset), timestamp (born_timestamp), timestampType int (0, CreateTime), with
        includeHeaders the user properties as headers array<struct<key string, value
        binary>>, and through nameServer the broker last. The Kafka source's option names
        with an equivalent are taken too: subscribe, subscribePattern, maxOffsetsPerTrigger,
        minOffsetsPerTrigger, includeHeaders (assign, startingOffsets, endingOffsets,
        startingTimestamp, endingTimestamp, minPartitions, maxRecordsPerPartition,
        maxTriggerDelay and failOnDataLoss are the same names here). Tags have no Kafka column.
        On writes, ``kafka`` takes the Kafka sink's columns: value (required), key, topic,
        partition, headers, broker (offset, timestamp and timestampType are left out).
    secretKey : str
        The account's secret key. Spark redacts it (and accessKey) in plans and the UI
        (``spark.redaction.regex``); to keep the secret out of the job's code as well, leave
        it out and set the environment variable ``RMQ_SECRET_KEY`` of the application.

    Write options
    -------------
    ``df.write`` and ``df.writeStream`` (``rmq_spark.spark.sink``) take the columns ``body``
    (binary or string, required), and optionally ``topic`` (string), ``tags``, ``keys``
    (strings), ``properties`` (map<string,string>), ``queue_id`` (an integer) with ``broker``
    (string, for topics served by several brokers) and ``born_timestamp`` (timestamp);
    ``queue_offset`` and ``store_timestamp`` (of the read schema) are left out, any other
    column is refused. A missing body, a column of another
    type, or an unknown topic fails before a row is written. Rows go to the producer as Arrow
    columns (PySpark's Arrow writers), are grouped by (topic, queue, tag) and cut into batches
    encoded once. Writes append: ``mode('overwrite')`` is refused; a stream's complete mode
    appends each micro-batch's whole result, as Spark's Kafka sink does (update mode Spark
    gives Python sinks not at all: ``foreachBatch`` with sinkId and batchId).

    endpoint, nameServer : str
        One of the two, as for reads. Through nameServer the rows are RocketMQ's own messages
        (RocketMQ's MessageBatch encoding, uncompressed: codec rmq and compression none, the
        defaults there), written at least once; each carries a message id (UNIQ_KEY) made from
        the sink id, the micro-batch, the partition and the row's place, the same when a task
        or a micro-batch is written again, so readers can drop repeats.
    tls, tlsCaFile, tlsCertFile, tlsKeyFile : str
        As for reads.
    topic : str
        The topic to write to; required without a ``topic`` column, and when given it wins
        over the column (as in Spark's Kafka sink). Checked to exist before writing.
    queueSelector : str
        ``hash`` (rows with keys go to ``crc32(keys) % queues``, the others take the queues
        in turn), ``roundRobin`` (the queues in turn, a batch at a time) or ``column`` (the
        ``queue_id`` column). Default: ``column`` when there is a ``queue_id`` column, else
        ``hash``; with ``hash`` or ``roundRobin`` a ``queue_id`` column is ignored.
    batchMaxBytes : str
        A stored batch is cut when its bodies pass this size: bytes, or ``256k`` (default),
        ``1m``. Larger batches write and read faster; a read starting inside one decodes it.
    batchMaxDelayMs : int
        How long a partly filled batch of the producer waits for more rows, in milliseconds
        (default 10). The sink sends each Arrow batch of rows from Spark at once, so this
        bounds only rows the producer batches itself.
    totalBatchMaxBytes : str
        Bytes of batches a task holds sent and not yet answered before it waits for the
        broker (default ``64m``).
    requestTimeout : str
        The deadline of each attempt to send a call of batches, its upload included (default
        ``30s``, Kafka's request.timeout.ms): raise it for a link slower than 4 MiB in that time.
    deliveryTimeout : str
        How long a batch may take to be stored, retries included (default ``2m``, Kafka's
        delivery.timeout.ms); a task also waits this long for room, or for the routes of a
        cluster whose brokers restart, before it fails.
    compression : str
        ``none``, ``lz4`` (default through endpoint) or ``zstd``, over each batch, end to end.
    codec : str
        ``arrow`` (default through endpoint: one Arrow IPC record batch per stored batch) or
        ``rmq`` (RocketMQ's MessageBatch encoding, readable by RocketMQ clients; the only one
        through nameServer).
    deliveryGuarantee : str
        ``exactlyOnce`` (default): every task attempt prepares its rows under a transaction of
        its own; the driver's commit makes exactly the returned ones visible and records (sink
        id, batch id) in the same step, so a failed task, an aborted job or a micro-batch
        replayed after a restart writes nothing twice; ``df.write`` is all or nothing, and
        with sinkId (and batchId) the same write run again stores nothing twice.
        ``atLeastOnce``: rows are visible as they are sent, and a retried task or a replayed
        micro-batch writes them again. Through nameServer atLeastOnce is the default;
        exactlyOnce rides on RocketMQ's transactional messages, its decisions kept under
        checkpointLocation (a df.write needs sinkId and checkpointLocation for it).
    accessKey, secretKey : str
        As for reads; the account needs PUB on the topics written.
    schema : str
        ``kafka``: the rows have Spark's Kafka sink's columns (see the read option).
    sinkId : str
        Streams with exactlyOnce: the name under which micro-batches are recorded as
        committed, the same on every restart of the query (through nameServer: what the rows'
        message ids are made from). Default: ``spark-<query id>``, the query id Spark keeps
        in the checkpoint and gives every task of the query, wherever the checkpoint is set
        (``.option("checkpointLocation", ...)`` or ``spark.sql.streaming.checkpointLocation``).
        ``df.write``: the name its commit is recorded under with batchId, so that the same
        write run again (a job rerun, or a micro-batch foreachBatch runs again after a restart)
        stores nothing twice; the same on every run.
    batchId : int
        ``df.write`` with sinkId: the write's number under its sink, 0 by default; inside
        ``foreachBatch`` its ``batch_id``, which makes an update- or complete-mode aggregation
        exactly once (Spark gives a stream's micro-batches their ids itself).
    checkpointLocation : str
        Streams: Spark's checkpoint (exactlyOnce through nameServer keeps its decisions beside
        it). ``df.write`` exactlyOnce through nameServer: a directory on the job's file system
        where the write's decision is kept, so that a rerun finishes or rolls back what a dead
        driver left.
    """

    def __init__(self, options):
        super().__init__(options)
        self._source_options: SourceOptions | None = None

    @property
    def source_options(self) -> SourceOptions:
        """The read options, parsed on first use (``schema()`` at ``load()``); writes parse
        theirs in ``writer`` / ``streamWriter``."""
        if self._source_options is None:
            self._source_options = parse_options(self.options)
        return self._source_options

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        options = self.source_options
        if options.schema == "kafka":  # Spark's Kafka source's columns
            return kafka.read_schema(options.include_properties, options.address.native)
        return spark_schema(options.include_properties)

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        self._check_schema(schema)
        self.source_options.check_batch()
        return RocketMQBatchReader(self.source_options)

    def streamReader(self, schema: StructType) -> RocketMQBatchStreamReader:
        self._check_schema(schema)
        self.source_options.check_stream()
        return RocketMQBatchStreamReader(self.source_options)

    def writer(self, schema: StructType, overwrite: bool) -> "sink.RocketMQBatchWriter":
        return sink.make_writer(parse_sink_options(self.options), schema, overwrite, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "sink.RocketMQBatchStreamWriter":
        return sink.make_writer(parse_sink_options(self.options), schema, overwrite, streaming=True)

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema != expected:
            raise ConfigError(f"rocketmq-batch reads a fixed schema ({expected.simpleString()}); drop .schema(...) "
                              "and select or cast columns after load()")
