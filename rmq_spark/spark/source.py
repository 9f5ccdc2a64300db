"""The readers of the ``rocketmq-batch`` data source (``datasource.py``): streaming and batch
reads of broker_sim topics, or of any RocketMQ cluster's through its name servers, into Spark,
as Arrow record batches, with replayable per-queue offsets."""

from __future__ import annotations

import logging
import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq_spark import Admin, ConfigError, DataLossError, OffsetRange, RangeReader, RmqError
from rmq_spark.spark import compat, kafka
from rmq_spark.spark.offsets import Snapshot, ending_positions, from_json, snapshot, starting_positions, to_json
from rmq_spark.spark.options import SourceOptions, queue_text
from rmq_spark.spark.planning import QueueRange, plan_partitions, rate_limit, should_delay

log = logging.getLogger(__name__)


def spark_schema(include_properties: bool = False) -> StructType:
    """The read schema (``range_reader.read_schema``), as Spark types; ``read()`` yields exactly its Arrow form."""
    fields = [
        StructField("topic", StringType()), StructField("broker", StringType()), StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()), StructField("body", BinaryType()),
        StructField("tags", StringType()), StructField("keys", StringType()),
        StructField("born_timestamp", TimestampType()), StructField("store_timestamp", TimestampType()),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType())))
    return StructType(fields)


class QueueRangesPartition(InputPartition):
    """One Spark task: offset ranges of one or many queues, read with one ReadRanges call (or
    pulls in flight, through name servers)."""

    def __init__(self, ranges: list):
        super().__init__([(r.topic, r.broker, r.queue_id, r.start, r.end) for r in ranges])

    @property
    def ranges(self) -> list:
        return [OffsetRange(topic, queue_id, start, end, broker) for topic, broker, queue_id, start, end in self.value]

    def __repr__(self) -> str:
        return f"QueueRangesPartition({len(self.value)} ranges, {sum(e - s for *_, s, e in self.value)} records)"


def read_partition(options: SourceOptions, partition: QueueRangesPartition) -> Iterator[pa.RecordBatch]:
    """The rows of a partition as Arrow record batches (the read schema), holding at most
    maxBytesPerFetch of fetched records at a time."""
    if not isinstance(partition, QueueRangesPartition):  # PySpark's stand-in when there is nothing to read
        return
    reader = RangeReader(**options.address.sdk(timeout_ms=options.fetch_timeout_ms),
                         max_bytes_per_fetch=options.max_bytes_per_fetch, tag_filter=options.tag_filter,
                         include_properties=options.include_properties, pull_group=options.consumer_group,
                         on_data_loss="fail" if options.fail_on_data_loss else "skip")
    try:
        if options.schema == "kafka":
            for batch in reader.read(partition.ranges):
                yield kafka.to_kafka(batch, options.include_properties, options.address.native)
        else:
            yield from reader.read(partition.ranges)
    except DataLossError as err:  # the same error, its type and fields kept, with the Spark option named
        err.args = (f"{err} (in Spark: set the option failOnDataLoss to false to skip lost messages)",)
        raise
    finally:
        reader.close()


def make_partitions(options: SourceOptions, ranges: list) -> list:
    return [QueueRangesPartition(members) for members in plan_partitions(
        ranges, max_records_per_partition=options.max_records_per_partition, min_partitions=options.min_partitions,
        max_partitions=options.max_partitions)]


class RocketMQBatchReader(DataSourceReader):
    """``spark.read``: from startingOffsets / startingTimestamp (default earliest) to
    endingOffsets / endingTimestamp (default latest), resolved once when the read is planned."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list:
        with Admin(**self.options.address.sdk()) as admin:
            view = snapshot(admin, self.options.subscription)
            view.require_topics(self.options.address.describe())
            start = starting_positions(admin, self.options, view, "earliest")
            end = ending_positions(admin, self.options, view)
        backwards = [key for key in sorted(view.queues) if start[key] > end[key]]
        if backwards:
            topic, broker, queue_id = backwards[0]
            raise ConfigError(f"topic {topic!r} queue {queue_text(broker, queue_id)}: the read would start at "
                              f"{start[backwards[0]]}, after its end {end[backwards[0]]}; check startingOffsets / "
                              "startingTimestamp against endingOffsets / endingTimestamp")
        ranges = [QueueRange(topic, queue_id, start[key], end[key], broker)
                  for key in sorted(view.queues) for topic, broker, queue_id in [key]]
        return make_partitions(self.options, ranges)

    def read(self, partition: QueueRangesPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


def _nothing_new(view: Snapshot, start: dict) -> bool:
    """No queue of ``view`` ends past where ``start`` has it (a queue ``start`` lacks: past its first offset)."""
    begin = from_json(start, view.queues)
    return all(queue.max_offset <= begin.get(key, queue.min_offset) for key, queue in view.queues.items())


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RocketMQBatchStreamReader(DataSourceStreamReader, compat.SupportsTriggerAvailableNow):
    """``spark.readStream``. The engine runs one instance on the driver for the life of a
    query (offsets, admission control, planning, commits); ``read`` runs in the tasks.

    ``now_ms``: the clock of minRecordsPerTrigger / maxTriggerDelay (tests give their own).
    """

    def __init__(self, options: SourceOptions, now_ms=_wall_clock_ms):
        self.options = options
        self.now_ms = now_ms
        self._admin: Admin | None = None  # opened on first use: the reader is pickled into the tasks
        self._latest: dict | None = None  # max offsets seen by the last latestOffset, for query progress
        self._target: Snapshot | None = None  # Trigger.AvailableNow: the queues' ends when the query started
        self._last_trigger_ms = 0
        self._group_committed: dict | None = None  # the consumer group's offsets last committed
        self._initial: dict | None = None  # initialOffset's answer
        # PySpark < 4.2 tells latestOffset() neither its start nor a limit (compat): where the next
        # micro-batch starts, kept from each offset handed out and partitions' ends (a new query's
        # first trigger starts at initialOffset).
        self._next_start: dict | None = None
        self._told_old_engine = False
        self._away: set = set()  # brokers said to be unreachable, until they answer again: said once each

    # -- offsets --------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a new query starts: resolved once a run, as PySpark < 4.2 asks for it after the
        first ``latestOffset()`` (which takes it as its start) and must get the same answer."""
        if self._initial is None:
            view = snapshot(self._broker(), self.options.subscription)
            view.require_topics(self.options.address.describe())
            self._initial = to_json(starting_positions(self._broker(), self.options, view, "latest"))
        return self._initial

    def getDefaultReadLimit(self):
        return compat.default_read_limit(self.options.min_records_per_trigger, self.options.max_records_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = snapshot(self._broker(), self.options.subscription)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if start is None:  # PySpark < 4.2 (compat): the source knows its start and applies its limits itself
            start = self._next_start if self._next_start is not None else self.initialOffset()
            limit = self.getDefaultReadLimit()
            self._tell_old_engine()
        self._commit_group(start)  # where a trigger starts, the micro-batch before it is done
        view = self._target or self._view(start)
        self._latest = view.max_positions()
        self._next_start = self._trigger(start, limit, view)
        return self._next_start

    def _view(self, start: dict) -> Snapshot:
        """The queues now; when none has a message past ``start``, once the broker has one (or
        waitForMessages has passed): a long poll, so that a micro-batch starts as messages land."""
        view = snapshot(self._broker(), self.options.subscription)
        if self.options.wait_for_messages_ms and view.queues and not view.unreachable and _nothing_new(view, start):
            view = snapshot(self._broker(), self.options.subscription, past=view.max_positions(),
                            wait_ms=self.options.wait_for_messages_ms)
        return view

    def _trigger(self, start: dict, limit, view: Snapshot) -> dict:
        """The end of the micro-batch that starts at ``start`` (``start`` itself: none)."""
        begin = self._reconcile(from_json(start, view.queues), view)
        available = {key: max(0, view.queues[key].max_offset - offset) for key, offset in begin.items()
                     if key in view.queues}
        take = self._admit(begin, available, compat.admission(limit, self.options.min_records_per_trigger,
                                                              self.options.max_records_per_trigger))
        if take is None:
            return start
        end = {key: offset + take.get(key, 0) for key, offset in begin.items()}
        if end == from_json(start):
            return start
        self._last_trigger_ms = self.now_ms()
        return to_json(end)

    def _admit(self, begin: dict, available: dict, admit: compat.Admission) -> dict | None:
        """Records to take per queue; None to hold the trigger (minRecordsPerTrigger)."""
        if admit.all_available:
            return available
        total = sum(available.values())
        if (admit.min_records and self._target is None and total
                and should_delay(total, admit.min_records, self.now_ms(), self._last_trigger_ms,
                                 self.options.max_trigger_delay_ms)):
            return None
        if admit.max_records is None:
            return available
        return rate_limit({key: (begin[key], available[key]) for key in available}, admit.max_records)

    def _reconcile(self, start: dict, view: Snapshot) -> dict:
        """Where each queue reads from now: the checkpointed offset, checked against what the
        broker still has; new queues from their first offset (which must be 0, or data was lost)."""
        begin, waiting = {}, {}
        for key, offset in start.items():
            queue = view.queues.get(key)
            topic, broker, queue_id = key
            where = f"topic {topic!r} queue {queue_text(broker, queue_id)}"
            if queue is None and broker in view.unreachable:
                waiting.setdefault(broker, []).append(f"{topic}:{queue_id}@{offset}")
                begin[key] = offset
            elif queue is None and not self.options.subscription.matches(topic):
                log.warning("rocketmq-batch: topic %r is in the checkpoint but no longer in the subscription "
                            "(%s); its offsets are dropped", topic, self.options.subscription.describe())
            elif queue is None and broker:
                self._lost(f"{where} is gone with offsets from {offset} on not read: broker {broker} no longer "
                           "serves the topic (it left the cluster, or the topic was deleted there)",
                           "dropping the queue")
            elif queue is None:
                self._lost(f"{where} is gone (deleted with its topic?) with offsets from {offset} on not read",
                           "dropping the queue")
            elif offset > queue.max_offset:
                self._lost(f"{where} ends at {queue.max_offset}, before the checkpointed offset {offset} (was the "
                           "topic deleted and created again?)", f"reading it from its first offset {queue.min_offset}")
                begin[key] = queue.min_offset
            elif offset < queue.min_offset:
                self._lost(f"{where}: offsets {offset} to {queue.min_offset - 1} were deleted before they were read",
                           "reading on from the first stored one")
                begin[key] = queue.min_offset
            else:
                begin[key] = offset
        for key, queue in view.queues.items():
            if key not in start:  # a new queue (a new topic, or a broker that joined): from its first offset
                if queue.min_offset > 0:
                    self._lost(f"new queue {queue_text(key[1], key[2])} of topic {key[0]!r} starts at offset "
                               f"{queue.min_offset}, not 0: its first messages were deleted before they were read",
                               "reading on from there")
                begin[key] = queue.min_offset
        self._say_away(waiting)
        return begin

    def _say_away(self, waiting: dict) -> None:
        """One line per broker that cannot be reached, when it is first seen so (a query plans every
        trigger: a line per queue per trigger said nothing more), and one when it answers again."""
        for broker in sorted(waiting.keys() - self._away):
            log.warning("rocketmq-batch: broker %s cannot be reached; its queues wait at their offsets (%s) until it "
                        "can", broker, ", ".join(waiting[broker]))
        for broker in sorted(self._away - waiting.keys()):
            log.warning("rocketmq-batch: broker %s answers again", broker)
        self._away = set(waiting)

    def _lost(self, what: str, skipping: str) -> None:
        """Data the query had to read is gone: fail (failOnDataLoss) or warn and skip it."""
        if self.options.fail_on_data_loss:
            raise DataLossError(f"data loss: {what}. To skip lost messages and go on, set the option "
                                "failOnDataLoss to false")
        log.warning("rocketmq-batch data loss: %s; %s", what, skipping)

    def _tell_old_engine(self) -> None:
        said = compat.old_engine_limits(self.options.max_records_per_trigger)
        if said and not self._told_old_engine:
            log.warning(said)
        self._told_old_engine = True

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json(self._latest)

    # -- micro-batches --------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list:
        self._next_start = end  # also PySpark < 4.2's word, at a restart, of the checkpoint's last offset
        stop = from_json(end)
        begin = from_json(start, stop)  # a checkpoint's queues named without brokers: as ``end`` names them
        ranges = []
        for key, end_offset in sorted(stop.items()):
            topic, broker, queue_id = key
            start_offset = begin.get(key, 0)  # a new queue: from 0 (the reader reports what was deleted)
            if start_offset > end_offset:  # a reset queue that latestOffset let through (failOnDataLoss=false)
                self._lost(f"topic {topic!r} queue {queue_text(broker, queue_id)} moved back from {start_offset} to "
                           f"{end_offset}", "reading it from its first offset")
                start_offset = 0
            ranges.append(QueueRange(topic, queue_id, start_offset, end_offset, broker))
        return make_partitions(self.options, ranges)

    def read(self, partition: QueueRangesPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Spark finished every offset below ``end``; with consumerGroup, the broker learns it too."""
        self._commit_group(end)

    def _commit_group(self, done: dict) -> None:
        """Commit ``done`` as the consumer group's offsets. Spark commits a micro-batch when it
        starts the next one, so the start of every trigger is committed too: the group does not
        trail by a micro-batch when a query stops (or an AvailableNow run ends)."""
        if not self.options.consumer_group or done == self._group_committed:
            return
        try:
            self._broker().commit_group_offsets(self.options.consumer_group, from_json(done))
            self._group_committed = done
        except RmqError as err:  # the group's offsets only show lag: the next commit brings them up to date
            log.warning("rocketmq-batch: could not commit the offsets of consumer group %r (%s); the next "
                        "micro-batch commits them again", self.options.consumer_group, err)

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _broker(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(**self.options.address.sdk())
        return self._admin
