"""Appends: the store's writing role (a part of MessageStore): the put_* calls, and the build_*
calls that check a message as its put_* call does and give the records ``put_records``
appends later. A message is checked (topic, queue, sizes, what a batch may hold), stamped for
idempotence, appended to the commitlog, flushed with --flush sync, and the dispatcher woken."""

from __future__ import annotations

import dataclasses
from typing import Callable

from broker_sim.store.commitlog import CommitLog, PendingRecord
from broker_sim.store.config import StoreConfig
from broker_sim.store.disk import DiskGuard
from broker_sim.store.dispatcher import Dispatcher
from broker_sim.store.errors import DiskFailedError, DiskFullError, echo
from broker_sim.store.producer_state import ProducerState, stamp_problem, stamp_property
from broker_sim.store.status import (
    DEFAULT_PUT,
    BatchPut,
    PutContext,
    PutResult,
    PutStatus,
    QueueRecords,
)
from broker_sim.store.topics import QueueType, TopicConfig, TopicTable, same_topic, unknown_topic
from rmq_wire import record as fmt

# INNER_BASE, added under the append lock: name, separators and up to 19 digits.
_INNER_BASE_RESERVED = len(fmt.PROPERTY_INNER_BASE) + 2 + 19


class Appends:
    """MessageStore's writes, over the parts its opening made (named here)."""

    config: StoreConfig
    topics: TopicTable
    commitlog: CommitLog
    dispatcher: Dispatcher
    producers: ProducerState
    disk: DiskGuard
    payload_check: Callable | None
    now_ms: Callable[[], int]
    _closed: bool
    _sync: bool

    def put_message(self, topic: str, queue_id: int, body: bytes, *, properties: dict | None = None,
                    flag: int = 0, sys_flag: int = 0, context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store one message.

        A put with a producer stamp in its ``context`` is idempotent: a stamp stored before gets
        its first answer back (``duplicate`` set) and nothing is stored (see ``producer_state``)."""
        return self._put(self.build_message(topic, queue_id, body, properties=properties, flag=flag,
                                            sys_flag=sys_flag, context=context), context)

    def put_early_batch(self, topic: str, queue_id: int, payload: bytes, *,
                        context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store a client batch (RocketMQ's MessageBatch encoding) as one record per message,
        with consecutive offsets."""
        return self._put(self.build_early_batch(topic, queue_id, payload, context=context), context)

    def put_inner_batch(self, topic: str, queue_id: int, batch: BatchPut, *,
                        context: PutContext = DEFAULT_PUT) -> PutResult:
        """Store a batch of messages as ONE record (INNER_BATCH | NEED_UNWRAP) on a BatchCQ
        topic. The payload is stored as it is: its codec and compression are recorded, and it
        is checked by ``payload_check`` unless the context says it was stored before."""
        return self._put(self.build_inner_batch(topic, queue_id, batch, context=context), context)

    def put_records(self, topic: str, queue_id: int, records: list[PendingRecord], *, flush: bool = True) -> PutResult:
        """Append records built earlier by a ``build_*`` call (kept aside meanwhile, as prepared
        transaction batches are), checked again against the topic as it is now. ``flush`` False:
        not flushed even with --flush sync (the caller calls ``flush_log`` once for many)."""
        config, failed = self._check_queue(topic, queue_id)
        if not failed and config.queue_type is not QueueType.BATCH_CQ and any(
                r.sys_flag & fmt.SysFlag.INNER_BATCH for r in records):
            failed = _wrong_queue_type(topic)
        return failed or self._append(config, queue_id, records, flush=flush)

    # The build_* calls check a message as its put_* call does and return the records that
    # put_records appends, or the failed PutResult.

    def build_message(self, topic: str, queue_id: int, body: bytes, *, properties: dict | None = None,
                      flag: int = 0, sys_flag: int = 0,
                      context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        """``sys_flag``: the client's SYSFLAG bits of a single message (a compressed body, multi
        tags), kept so that RocketMQ's clients read it back as they sent it."""
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(body))
        if failed:
            return failed
        props = fmt.encode_properties(properties)
        record = PendingRecord(body, fmt.body_crc(body), props, self._born(context), context.born_host, flag,
                               sys_flag & fmt.CLIENT_SYS_FLAGS, reconsume_times=context.reconsume_times)
        return self._checked(config, queue_id, [record])

    def build_early_batch(self, topic: str, queue_id: int, payload: bytes, *,
                          context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(payload), what="batch")
        if failed:
            return failed
        if topic.startswith(fmt.RETRY_TOPIC_PREFIX):
            return _illegal(f"topic {topic!r} is a retry topic: batches cannot be sent to retry topics; send "
                            "its messages one by one")
        born = self._born(context)
        records = []
        wait_values = set()
        try:
            for index, (flag, body, props) in enumerate(fmt.iter_message_batch(payload, len(payload))):
                problem = _early_batch_problem(props, wait_values)
                if problem:
                    return _illegal(f"message {index} of the batch {problem}")
                records.append(PendingRecord(body, fmt.body_crc(body), props, born, context.born_host, flag))
        except fmt.BatchFormatError as err:
            return _illegal(f"malformed batch payload: {err}")
        return self._checked(config, queue_id, records)

    def build_inner_batch(self, topic: str, queue_id: int, batch: BatchPut, *,
                          context: PutContext = DEFAULT_PUT) -> "QueueRecords | PutResult":
        payload, count, codec = batch.payload, batch.count, batch.codec
        config, failed = self._check_queue(topic, queue_id)
        failed = failed or self._check_body(len(payload), what="batch")
        if failed:
            return failed
        if config.queue_type is not QueueType.BATCH_CQ:
            return _wrong_queue_type(topic)
        if not isinstance(count, int) or not 1 <= count <= self.config.max_batch_messages:
            return _illegal(f"batch count {count!r}: use 1 to {self.config.max_batch_messages}")
        if codec not in fmt.BATCH_CODECS:
            return _illegal(f"unknown batch codec {echo(codec)}; use one of: {', '.join(fmt.BATCH_CODECS)}")
        try:
            compression = fmt.Compression.parse(batch.compression)
        except ValueError as err:
            return _illegal(str(err))
        if not payload:
            return _illegal("the batch payload is empty")
        if self.payload_check is not None and not context.stored_before:
            try:
                self.payload_check(payload, codec, compression, count)
            except ValueError as err:
                return _illegal(f"the inner batch payload ({codec}, {compression.name.lower()}) does not decode, "
                                f"nothing was stored: {err}. Encode it with the codec and compression the request "
                                "names, and give its message count")
        props = fmt.encode_properties({**(batch.properties or {}), fmt.PROPERTY_INNER_NUM: count,
                                       fmt.PROPERTY_BATCH_CODEC: codec})
        sys_flag = fmt.SysFlag.INNER_BATCH | fmt.SysFlag.NEED_UNWRAP | compression.sys_flag()
        record = PendingRecord(payload, fmt.body_crc(payload), props, self._born(context), context.born_host,
                               batch.flag, sys_flag, count, context.reconsume_times)
        return self._checked(config, queue_id, [record])

    def _checked(self, config: TopicConfig, queue_id: int, records: list[PendingRecord]) -> "QueueRecords | PutResult":
        return self._check_sizes(config, records) or QueueRecords(config, queue_id, records)

    def _put(self, built: "QueueRecords | PutResult", context: PutContext) -> PutResult:
        if isinstance(built, PutResult):
            return built
        return self._append(built.config, built.queue_id, built.records, context.producer)

    def _append(self, config: TopicConfig, queue_id: int, records: list[PendingRecord],
                producer: tuple[str, int] | None = None, flush: bool = True) -> PutResult:
        if producer is not None:
            problem = stamp_problem(*producer)
            if problem:
                return _illegal(problem)
            first = records[0]
            stamped = first.properties + stamp_property(*producer, len(records))
            records[0] = dataclasses.replace(first, properties=stamped)
        failed = self._check_sizes(config, records)
        if failed:
            return failed
        if producer is None:
            return self._store(config, queue_id, records, flush)
        known = self.producers.begin(*producer)
        if known is not None:
            return known
        result = PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store failed while storing the message")
        try:
            result = self._store(config, queue_id, records)
            return result
        finally:
            self.producers.end(*producer, result)

    def _check_sizes(self, config: TopicConfig, records: list[PendingRecord]) -> PutResult | None:
        topic = config.name
        topic_len = len(topic.encode())
        for index, record in enumerate(records):
            # The log adds INNER_BASE to inner batches and the CRC property to every record.
            store_own = _INNER_BASE_RESERVED if record.sys_flag & fmt.SysFlag.INNER_BATCH else 0
            props_len = len(record.properties) + fmt.CRC_RESERVED_BYTES + store_own
            if props_len > fmt.MAX_PROPERTIES_BYTES:
                return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                 f"message {index}: properties take {props_len} bytes with the store's own; "
                                 f"the limit is {fmt.MAX_PROPERTIES_BYTES}")
            total = fmt.record_size(len(record.body), topic_len, len(record.properties) + store_own)
            if not self.commitlog.record_fits_segment(total):
                return PutResult(PutStatus.MESSAGE_TOO_LARGE,
                                 f"message {index}: a record of {total} bytes does not fit a commitlog segment of "
                                 f"{self.config.segment_bytes} bytes; raise segment_bytes or send less")
        return None

    def _store(self, config: TopicConfig, queue_id: int, records: list[PendingRecord],
               flush: bool = True) -> PutResult:
        topic = config.name
        if self._closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, "the store is closed")
        if self.disk.failure:
            return PutResult(PutStatus.DISK_FAILED, self.disk.failure)
        def still_served() -> bool:  # not deleted (and made again), nor the queue hidden by an update
            now = self.topics.get(topic)
            return same_topic(now, config) and queue_id < now.queue_count

        try:
            appended = self.commitlog.append(topic, queue_id, records, still_served)
        except DiskFullError as err:
            return PutResult(PutStatus.DISK_FULL, err.message)
        except OSError as err:  # the append was undone, but the disk cannot be trusted any more
            return PutResult(PutStatus.DISK_FAILED, str(self.disk.fail("a write", err)))
        if appended is None:
            now = self.topics.get(topic)
            if same_topic(now, config):
                return PutResult(PutStatus.QUEUE_NOT_FOUND, f"queue {queue_id} of topic {topic!r} was taken out of "
                                 f"service while the message was being stored (the topic has {now.queue_count} "
                                 "queues now); nothing was stored")
            return PutResult(PutStatus.TOPIC_NOT_FOUND, f"topic {topic!r} was deleted while the message was being "
                             f"stored; nothing was stored. {unknown_topic(topic, self.topics)}")
        if self._sync and flush:
            try:
                self.commitlog.flush(until=appended.end_offset)
            except DiskFailedError as err:
                return PutResult(PutStatus.DISK_FAILED, f"{err}. The message was written but may not be on disk: "
                                 "after the restart it is there or not; an idempotent send is stored once")
        self.dispatcher.wake()
        count = sum(r.count for r in records)
        return PutResult(PutStatus.PUT_OK, "", queue_id, appended.queue_offset, count, appended.physical_offsets,
                         appended.store_timestamp)

    def _check_queue(self, topic: str, queue_id: int) -> tuple[TopicConfig | None, PutResult | None]:
        """The topic's config, and a failed result when the topic or queue does not exist."""
        config = self.topics.get(topic)
        if config is None:
            return None, PutResult(PutStatus.TOPIC_NOT_FOUND, unknown_topic(topic, self.topics))
        if not isinstance(queue_id, int) or not 0 <= queue_id < config.queue_count:
            return config, PutResult(PutStatus.QUEUE_NOT_FOUND, f"topic {topic!r} has queues 0 to "
                                     f"{config.queue_count - 1}; there is no queue {queue_id!r}")
        return config, None

    def _check_body(self, size: int, what: str = "message body") -> PutResult | None:
        if size > self.config.max_message_bytes:
            return PutResult(PutStatus.MESSAGE_TOO_LARGE, f"the {what} is {size} bytes; the largest accepted is "
                             f"{self.config.max_message_bytes} bytes (max_message_bytes): split it")
        return None

    def _born(self, context: PutContext) -> int:
        return self.now_ms() if context.born_timestamp_ms is None else context.born_timestamp_ms


def _illegal(detail: str) -> PutResult:
    return PutResult(PutStatus.MESSAGE_ILLEGAL, detail)


def _wrong_queue_type(topic: str) -> PutResult:
    return PutResult(PutStatus.WRONG_QUEUE_TYPE, f"topic {topic!r} is a SimpleCQ topic: inner batches need a BatchCQ "
                     "topic; send an early batch instead, or create the topic with type BatchCQ")


_DELAY_KEYS = tuple(k.encode() for k in (fmt.PROPERTY_DELAY_TIME_LEVEL, *fmt.PROPERTY_TIMER_PROPERTIES))
_TRANSACTION_KEY = fmt.PROPERTY_TRANSACTION_PREPARED.encode()
_WAIT_KEY = fmt.PROPERTY_WAIT_STORE_MSG_OK.encode()
_PRODUCER_KEY = fmt.PROPERTY_PRODUCER.encode()


def _early_batch_problem(properties: bytes, wait_values: set) -> str | None:
    """Why a message cannot travel in an early batch (RocketMQ's rules), or None."""
    # Substring tests first: they are cheap, and most messages have none of these names.
    if any(key in properties and fmt.find_property(properties, key) is not None for key in _DELAY_KEYS):
        return "is delayed: delayed messages cannot be batched; send it alone"
    if _TRANSACTION_KEY in properties and fmt.find_property(properties, _TRANSACTION_KEY) == b"true":
        return "is transactional: transactional messages cannot be batched; send it alone"
    if _PRODUCER_KEY in properties and fmt.find_property(properties, _PRODUCER_KEY) is not None:
        return f"sets {fmt.PROPERTY_PRODUCER}, which is reserved for the store: stamp the send instead"
    wait_values.add(_WAIT_KEY in properties and fmt.find_property(properties, _WAIT_KEY) or b"true")
    if len(wait_values) > 1:
        return "has another waitStoreMsgOK (WAIT) than the messages before it: a batch needs one value"
    if len(properties) + fmt.CRC_RESERVED_BYTES > fmt.MAX_PROPERTIES_BYTES:
        return f"has {len(properties)} bytes of properties; the limit is {fmt.MAX_PROPERTIES_BYTES}"
    return None
