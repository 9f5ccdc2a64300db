"""The gRPC servicers: they validate requests and translate protobuf <-> store calls, nothing
more. Refusals are raised as ``errors.BrokerError`` and become statuses in errors.py.

Every call that touches the store passes the broker's ``CallGate``: once the broker is
stopping, new calls are refused with UNAVAILABLE, and the store is closed only after the calls
inside have left it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import struct
import threading

from broker_sim.store import (
    ConsumerOffsetTable,
    CreateStatus,
    FlushMode,
    GetStatus,
    MessageStore,
    QueueType,
    TopicConfig,
    echo,
    system_topic_problem,
)
from broker_sim.store import format as fmt
from broker_sim.store.message_filter import TagFilter
from rmq_spark.protocol.v1 import broker_pb2 as pb
from rmq_spark.protocol.v1 import broker_pb2_grpc as pb_grpc

from . import errors
from .errors import BrokerError, Reason, bad_range, invalid, translated, translated_async, translated_stream

DEFAULT_READ_BUDGET = 64 << 20  # ReadRanges' byte budget when the request gives 0
CHUNK_BYTES = 4 << 20  # records per ReadRanges response, at most (a larger record travels alone)
CORRUPTED_LISTED = 100  # damaged records BrokerStats lists (it counts all)
MAX_OFFSETS_QUEUES = 16384  # queues per GetOffsets answer, at most (about 400 KB; a larger topic travels alone)
STREAM_WRITE_TIMEOUT_S = 60.0  # a ReadRanges client that takes no response for this long has its stream ended

_QUEUE_TYPES = {pb.SIMPLE_CQ: QueueType.SIMPLE_CQ, pb.BATCH_CQ: QueueType.BATCH_CQ}
_QUEUE_TYPES_PB = {v: k for k, v in _QUEUE_TYPES.items()}
_CODECS = {pb.CODEC_RMQ: "rmq", pb.CODEC_ARROW: "arrow"}
_COMPRESSIONS = {pb.COMPRESSION_NONE: fmt.Compression.NONE, pb.COMPRESSION_LZ4: fmt.Compression.LZ4,
                 pb.COMPRESSION_ZSTD: fmt.Compression.ZSTD}
# Properties the store writes itself, and the two that have fields of their own.
_RESERVED_PROPERTIES = {fmt.PROPERTY_INNER_NUM, fmt.PROPERTY_INNER_BASE, fmt.PROPERTY_BATCH_CODEC,
                        fmt.PROPERTY_RECORD_CRC, fmt.PROPERTY_PRODUCER}
_FIELD_PROPERTIES = {fmt.PROPERTY_TAGS: "tags", fmt.PROPERTY_KEYS: "keys"}
_SEPARATORS = re.compile("[\x01\x02]")
_GROUP_NAME = re.compile(r"^[%|+a-zA-Z0-9_-]{1,255}$")  # RocketMQ's group characters
_PEER_IPV4 = re.compile(r"^ipv4:(\d+\.\d+\.\d+\.\d+):(\d+)$")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class CallGate:
    """Counts the calls inside the store; ``close`` refuses new ones and waits for those inside."""

    def __init__(self):
        self._cond = threading.Condition()
        self._inside = 0
        self._closed = False

    def __enter__(self) -> None:
        with self._cond:
            if self._closed:
                raise BrokerError(Reason.SERVICE_NOT_AVAILABLE, errors.STOPPING)
            self._inside += 1

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._inside -= 1
            if not self._inside:
                self._cond.notify_all()

    def close(self, timeout_s: float) -> bool:
        """Refuse new calls; True once none is inside, False if some still are after the timeout."""
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._inside == 0, timeout_s)


class Counters:
    """Messages put and read since start, and the stream responses waiting for their client now."""

    def __init__(self):
        self._lock = threading.Lock()
        self.messages_put = 0
        self.messages_read = 0
        self.responses_waiting = 0

    def add(self, put: int = 0, read: int = 0, waiting: int = 0) -> None:
        with self._lock:
            self.messages_put += put
            self.messages_read += read
            self.responses_waiting += waiting


class _Shared:
    """What both servicers use: the store, the gate, and the lookups that refuse with a reason."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable, gate: CallGate, counters: Counters,
                 transactions=None, pop=None):
        self.store = store
        self.offsets = offsets
        self.gate = gate
        self.counters = counters
        self.transactions = transactions  # broker_sim.txn.TransactionService
        self.pop = pop  # broker_sim.pop.PopService
        self._appends_wait_for_flush = store.config.flush_mode is FlushMode.SYNC

    async def run_append(self, append, *args):
        """``append(*args)``: on the event loop, or in the pool when appends wait for a flush."""
        if self._appends_wait_for_flush:
            return await asyncio.get_running_loop().run_in_executor(None, append, *args)
        return append(*args)

    def topic(self, name: str) -> TopicConfig:
        if not name:
            raise invalid("the topic name is empty; name the topic")
        config = self.store.topics.get(name)
        if config is None:
            raise self.topic_not_found(name)
        return config

    def topic_not_found(self, name: str) -> BrokerError:
        names = [t.name for t in self.store.topics.all()]
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        return BrokerError(Reason.TOPIC_NOT_FOUND, f"topic {echo(name)} does not exist; existing topics: "
                                                   f"{shown or 'none'}. Create it first, or check the name")

    @staticmethod
    def check_queue(config: TopicConfig, queue_id: int) -> None:
        if not 0 <= queue_id < config.queue_count:
            raise BrokerError(Reason.QUEUE_NOT_FOUND, f"topic {config.name!r} has queues 0 to "
                                                      f"{config.queue_count - 1}; there is no queue {queue_id}")

    def queue_offsets(self, config: TopicConfig, queue_id: int) -> tuple[int, int]:
        try:
            return self.store.min_offset(config.name, queue_id), self.store.max_offset(config.name, queue_id)
        except LookupError:  # deleted in the meantime
            raise self.topic_not_found(config.name) from None


# --- admin ---------------------------------------------------------------------------------------

class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, shared: _Shared):
        self._s = shared

    @translated
    def CreateTopic(self, request, context):
        if not request.HasField("topic"):
            raise invalid("the request has no topic: set topic with its name, queue_count and queue_type")
        topic = request.topic
        if not topic.name:
            raise invalid("the topic name is empty; name the topic")
        _check_not_system(topic.name, "create")
        queue_type = _QUEUE_TYPES.get(topic.queue_type)
        if queue_type is None:
            raise invalid(f"queue_type {_enum_name(pb.QueueType, topic.queue_type)}: set SIMPLE_CQ (an index unit "
                          "per message) or BATCH_CQ (an index unit per batch)")
        with self._s.gate:
            status, detail = self._s.store.create_topic(topic.name, topic.queue_count, queue_type)
            if status not in (CreateStatus.CREATED, CreateStatus.ALREADY_EXISTS):
                raise errors.from_create(status, detail)
            config = self._s.topic(topic.name)
        return pb.CreateTopicResponse(topic=_topic_pb(config), created=status is CreateStatus.CREATED)

    @translated
    def DeleteTopic(self, request, context):
        if not request.name:
            raise invalid("the topic name is empty; name the topic to delete")
        _check_not_system(request.name, "delete")
        with self._s.gate:
            deleted = self._s.store.delete_topic(request.name)
            if deleted:
                self._s.offsets.remove_topic(request.name)
                if self._s.pop is not None:
                    self._s.pop.forget_topic(request.name)
        return pb.DeleteTopicResponse(deleted=deleted)

    @translated
    def DescribeTopic(self, request, context):
        with self._s.gate:
            config = self._s.topic(request.name)
            return pb.DescribeTopicResponse(topic=_topic_pb(config), queues=self._queues(config))

    @translated
    def ListTopics(self, request, context):
        with self._s.gate:
            return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in self._s.store.topics.all()])

    @translated
    def GetOffsets(self, request, context):
        if request.max_queues < 0:
            raise invalid(f"max_queues {request.max_queues} is negative: give the queues per answer, or 0 for the "
                          f"broker's cap of {MAX_OFFSETS_QUEUES}")
        limit = min(request.max_queues or MAX_OFFSETS_QUEUES, MAX_OFFSETS_QUEUES)
        with self._s.gate:
            if request.topics:  # the page token: the index of the page's first name
                first = _named_page_start(request.page_token, len(request.topics))
                configs = (self._s.topic(name) for name in request.topics[first:])
            else:  # the page token: the page's first name (topics made or deleted meanwhile do not matter)
                first = 0
                configs = (c for c in self._s.store.topics.all() if c.name >= request.page_token)
            page, queues = [], 0
            for index, config in enumerate(configs, first):
                if page and queues + config.queue_count > limit:
                    token = str(index) if request.topics else config.name
                    return pb.GetOffsetsResponse(topics=page, next_page_token=token)
                page.append(pb.TopicOffsets(topic=config.name, queues=self._queues(config)))
                queues += config.queue_count
            return pb.GetOffsetsResponse(topics=page)

    @translated
    def OffsetForTimestamp(self, request, context):
        if request.timestamp_ms < 0:
            raise invalid(f"timestamp_ms {request.timestamp_ms} is negative: give milliseconds since the epoch")
        with self._s.gate:
            config = self._s.topic(request.topic)
            queue_ids = list(request.queue_ids) or range(config.queue_count)
            for queue_id in queue_ids:
                self._s.check_queue(config, queue_id)
            store = self._s.store
            return pb.OffsetForTimestampResponse(offsets=[
                pb.QueueOffset(queue_id=q, offset=store.offset_for_timestamp(config.name, q, request.timestamp_ms))
                for q in queue_ids])

    @translated
    def BrokerStats(self, request, context):
        with self._s.gate:
            store = self._s.store
            topics = store.topics.all()
            log_max = store.commitlog.max_offset
            dispatched = store.dispatcher.position
            lag_bytes, lag_ms = store.dispatch_lag()
            corrupted = store.corrupted_records()
            return pb.BrokerStatsResponse(
                topics=len(topics), queues=sum(t.queue_count for t in topics),
                commitlog_min_offset=store.commitlog.min_offset, commitlog_max_offset=log_max,
                commitlog_flushed_offset=store.commitlog.flushed_offset, dispatched_offset=dispatched,
                dispatch_lag_bytes=lag_bytes, dispatch_lag_ms=lag_ms, messages_put=self._s.counters.messages_put,
                messages_read=self._s.counters.messages_read, resident_memory_bytes=_resident_bytes(),
                data_dir=str(store.data_dir.resolve()), flush_mode=store.config.flush_mode.value,
                corrupted_records=len(corrupted),
                corrupted=[pb.CorruptedRecord(**dataclasses.asdict(r)) for r in corrupted[:CORRUPTED_LISTED]],
                disk_failure=store.disk.failure)

    @translated
    def CommitOffsets(self, request, context):
        _check_group(request.group)
        with self._s.gate:
            entries = []
            for entry in request.offsets:
                config = self._s.topic(entry.topic)
                self._s.check_queue(config, entry.queue_id)
                if entry.offset < 0:
                    raise bad_range(f"offset {entry.offset} of topic {entry.topic!r} queue {entry.queue_id} is "
                                    "negative: commit the next offset to consume, 0 or more")
                # RocketMQ's broker stores any offset (ConsumerManageProcessor.updateConsumerOffset
                # checks none); refused here because one past the end would make the group skip
                # messages stored later, and readers (the Spark source) trust committed offsets.
                end = self._s.store.next_offset(config.name, entry.queue_id)
                if entry.offset > end:
                    raise bad_range(f"offset {entry.offset} of topic {entry.topic!r} queue {entry.queue_id} is past "
                                    f"the queue's end: commit at most {end}, the offset its next message gets")
                entries.append((entry.topic, entry.queue_id, entry.offset))
            self._s.offsets.commit(request.group, entries)
        return pb.CommitOffsetsResponse()

    @translated
    def QueryOffsets(self, request, context):
        _check_group(request.group)
        with self._s.gate:
            found = self._s.offsets.query(request.group, list(request.topics) or None)
        return pb.QueryOffsetsResponse(offsets=[pb.GroupOffset(topic=t, queue_id=q, offset=o) for t, q, o in found])

    def _queues(self, config: TopicConfig) -> list:
        out = []
        for queue_id in range(config.queue_count):
            low, high = self._s.queue_offsets(config, queue_id)
            out.append(pb.QueueOffsets(queue_id=queue_id, min_offset=low, max_offset=high))
        return out


# --- messaging -----------------------------------------------------------------------------------

class MessagingServicer(pb_grpc.MessagingServicer):
    def __init__(self, shared: _Shared, write_timeout_s: float = STREAM_WRITE_TIMEOUT_S):
        self._s = shared
        self.write_timeout_s = write_timeout_s  # of each ReadRanges response

    # Sends run on the event loop when they never wait for a disk flush: an append is a write
    # into the page cache, and the hand-off to a pool thread and back cost more (~130 us a call).
    # With --flush sync they wait for the flush in the pool, where concurrent sends share it.

    @translated_async
    async def Send(self, request, context):
        return await self._s.run_append(self._send, request, _peer_host(context.peer()))

    @translated_async
    async def SendMany(self, request, context):
        return await self._s.run_append(self._send_many, request, _peer_host(context.peer()))

    def _send_many(self, request, born_host: bytes) -> pb.SendManyResponse:
        outcomes = []
        for send in request.sends:
            try:
                outcomes.append(pb.SendOutcome(response=self._send(send, born_host)))
            except Exception as err:  # each send has its own outcome; faults are logged there
                error = errors.from_exception(err)
                outcomes.append(pb.SendOutcome(reason=error.reason.value, error=error.message))
        return pb.SendManyResponse(outcomes=outcomes)

    def _send(self, request, born_host: bytes) -> pb.SendResponse:
        if not request.topic:
            raise invalid("the topic name is empty; name the topic to send to")
        if request.born_timestamp_ms < 0:
            raise invalid(f"born_timestamp_ms {request.born_timestamp_ms} is negative: give milliseconds since the "
                          "epoch, or 0 for the broker's time")
        born = request.born_timestamp_ms or None
        producer = (request.producer_id, request.sequence) if request.producer_id else None
        kind = request.WhichOneof("payload")
        store = self._s.store
        # A prepared send is checked as a plain one, then kept aside by the transaction service.
        target = self._s.transactions.prepared(request.transaction_id) if request.transaction_id else store
        if kind == "single":
            message = request.single
            properties = _user_properties(message.properties, "the message")
            properties.update(_field_properties(message.tags, message.keys))
            with self._s.gate:
                result = target.put_message(request.topic, request.queue_id, message.body, properties=properties,
                                            flag=message.flag, born_timestamp_ms=born, born_host=born_host,
                                            producer=producer)
        elif kind == "early_batch":
            batch = request.early_batch
            _check_early_batch_count(batch.payload, batch.count)
            with self._s.gate:
                result = target.put_early_batch(request.topic, request.queue_id, batch.payload,
                                                born_timestamp_ms=born, born_host=born_host, producer=producer)
        elif kind == "inner_batch":
            batch = request.inner_batch
            if batch.count < 1:
                raise invalid(f"inner batch count {batch.count}: give the number of messages the payload holds, "
                              "1 or more")
            codec = _CODECS.get(batch.codec)
            if codec is None:
                raise invalid(f"codec {_enum_name(pb.Codec, batch.codec)}: set CODEC_RMQ or CODEC_ARROW")
            compression = _COMPRESSIONS.get(batch.compression)
            if compression is None:
                raise invalid(f"compression {_enum_name(pb.Compression, batch.compression)}: set COMPRESSION_NONE, "
                              "COMPRESSION_LZ4 or COMPRESSION_ZSTD")
            properties = _user_properties(batch.properties, "the batch")
            properties.update(_field_properties(batch.tags, ""))
            with self._s.gate:
                result = target.put_inner_batch(request.topic, request.queue_id, batch.payload, batch.count,
                                                codec=codec, compression=compression, properties=properties,
                                                born_timestamp_ms=born, born_host=born_host, producer=producer)
        else:
            raise invalid("the request carries no message: set one of single, early_batch or inner_batch")
        if not result.ok:
            raise errors.from_put(result)
        if not result.duplicate:
            self._s.counters.add(put=result.count)
        host = store.config.store_host_bytes
        if request.transaction_id:
            ids = []  # offsets and ids are given at commit
        elif kind == "inner_batch":
            record_id = fmt.message_id(host, result.physical_offsets[0])
            ids = [f"{record_id}-{i}" for i in range(result.count)]
        else:
            ids = [fmt.message_id(host, p) for p in result.physical_offsets]
        return pb.SendResponse(queue_id=result.queue_id, base_offset=result.queue_offset, count=result.count,
                               message_ids=ids, store_timestamp_ms=result.store_timestamp,
                               duplicate=result.duplicate)

    @translated_stream
    async def ReadRanges(self, request, context):
        if request.max_bytes < 0:
            raise bad_range(f"max_bytes {request.max_bytes} is negative: give a byte budget, or 0 for the "
                            f"broker's default of {DEFAULT_READ_BUDGET >> 20} MiB")
        tags = parse_tag_filter(request.tag_filter)
        with self._s.gate:
            plans = [self._plan(i, r) for i, r in enumerate(request.ranges)]
        budget = _Budget(request.max_bytes or DEFAULT_READ_BUDGET)
        loop = asyncio.get_running_loop()
        try:
            for plan in plans:
                reader = _RangeReader(self._s, plan, tags, budget)
                done = False
                while not done:  # each step in the broker's thread pool: the loop never waits for the disk
                    responses, done = await loop.run_in_executor(None, self._step, reader)
                    for response in responses:
                        yield response
        finally:  # a cancelled or failed call counts what it read too
            self._s.counters.add(read=budget.messages)

    async def write_response(self, context, response) -> bool:
        """Send one response of a stream (translated_stream); False when the client took none
        for write_timeout_s."""
        self._s.counters.add(waiting=1)
        try:
            await asyncio.wait_for(context.write(response), self.write_timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self._s.counters.add(waiting=-1)

    def _step(self, reader: "_RangeReader") -> tuple[list, bool]:
        with self._s.gate:  # store views are copied into the responses inside: none crosses a yield
            return reader.step()

    def _plan(self, index: int, r) -> tuple:
        config = self._s.topic(r.topic)
        self._s.check_queue(config, r.queue_id)
        if r.start_offset < 0:
            raise bad_range(f"range {index} ({r.topic!r} queue {r.queue_id}): start_offset {r.start_offset} is "
                            "negative; offsets start at 0")
        if r.end_offset < 0:
            raise bad_range(f"range {index} ({r.topic!r} queue {r.queue_id}): end_offset {r.end_offset} is "
                            "negative; give an exclusive end, or 0 for the queue's max offset")
        if r.end_offset and r.end_offset <= r.start_offset:
            raise bad_range(f"range {index} ({r.topic!r} queue {r.queue_id}): end_offset {r.end_offset} is not "
                            f"after start_offset {r.start_offset}; the end is exclusive (0: up to the max offset)")
        return index, config, r.queue_id, r.start_offset, r.end_offset or None


class _Budget:
    """The call's byte budget; its first record is returned even when larger."""

    def __init__(self, total: int):
        self.left = total
        self.returned = False
        self.exhausted = False
        self.messages = 0

    def fits(self, size: int) -> bool:
        if not self.returned:
            return True
        if size > self.left:
            self.exhausted = True  # later ranges get nothing either: ranges are served in order
        return not self.exhausted

    def take(self, size: int) -> None:
        self.left -= size
        self.returned = True
        if self.left <= 0:
            self.exhausted = True


_RANGE_STATUS = {
    GetStatus.OFFSET_TOO_SMALL: pb.OFFSET_TOO_SMALL,
    GetStatus.OFFSET_OVERFLOW_ONE: pb.NO_MESSAGE,
    GetStatus.OFFSET_OVERFLOW_BADLY: pb.OFFSET_OVERFLOW,
}


class _RangeReader:
    """Reads one range step by step (a store read per step), cutting chunks of CHUNK_BYTES."""

    def __init__(self, shared: _Shared, plan: tuple, tags: "TagFilter | None", budget: _Budget):
        self.s = shared
        self.index, self.config, self.queue_id, self.start, self.end = plan
        self.tags = tags
        self.budget = budget
        self.next = self.start
        self.status = None  # set when the range ends without records (not FOUND), or at a damaged record
        self.corrupted_from = 0
        self.detail = ""
        self.min = self.max = 0
        self.parts: list = []  # records of the chunk being cut: views of the store's files, or bytes
        self.part_bytes = 0
        self.part_records = 0
        self.read_any = False

    def step(self) -> tuple[list, bool]:
        out: list = []
        if self.budget.exhausted and not self.read_any:
            self.status = pb.BUDGET_EXHAUSTED
            self.min, self.max = self.s.queue_offsets(self.config, self.queue_id)
            return self._finish(out), True
        ask = max(1, min(CHUNK_BYTES, self.budget.left if self.budget.returned else CHUNK_BYTES))
        try:
            result = self.s.store.get_messages(self.config.name, self.queue_id, self.next, self.end, max_bytes=ask)
        except Exception:
            if self._deleted():  # its index files went away under the read
                raise self._deleted_error() from None
            raise
        if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE or self._deleted():
            raise self._deleted_error()
        self.min, self.max = result.min_offset, result.max_offset
        if result.status is GetStatus.RECORD_CORRUPTED:  # the range ends before it, whatever was read
            self.status, self.corrupted_from, self.detail = pb.RECORD_CORRUPTED, self.next, result.detail
            self.next = result.next_begin_offset
            return self._finish(out), True
        if result.status is not GetStatus.FOUND:
            if not self.read_any:
                self._no_records(result)
            return self._finish(out), True
        if self.end is None:
            self.end = result.max_offset  # 0 in the request: up to the max offset at read time
        self.read_any = True
        for batch in result.batches:
            after = min(batch.base_offset + batch.count, self.end)
            if self.tags is None or self.tags.matches(batch):
                size = len(batch.data)
                if not self.budget.fits(size):
                    if self.next == self.start:
                        self.status = pb.BUDGET_EXHAUSTED
                    return self._finish(out), True
                if self.parts and self.part_bytes + size > CHUNK_BYTES:
                    out.append(self._chunk())
                self.parts.append(batch.data)
                self.part_bytes += size
                self.part_records += 1
                self.budget.take(size)
                self.budget.messages += after - max(batch.base_offset, self.next)
            self.next = after  # past filtered records too
        if not result.batches or self.next >= self.end or self.budget.exhausted:
            return self._finish(out), True
        if self.part_bytes >= CHUNK_BYTES:
            out.append(self._chunk())
        elif self.parts:  # the start of the next chunk: copied, no view of the store is kept across a yield
            self.parts[:] = [b"".join(self.parts)]
        return out, False

    def _deleted(self) -> bool:
        """The topic was deleted (and maybe created again) since the call began."""
        return self.s.store.topics.get(self.config.name) is not self.config

    def _deleted_error(self) -> BrokerError:
        return BrokerError(Reason.TOPIC_NOT_FOUND, f"topic {self.config.name!r} was deleted while it was being read; "
                                                   "nothing more of it can be read (created again, it starts empty)")

    def _no_records(self, result) -> None:
        if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:  # nothing was ever stored in the queue
            self.status = pb.NO_MESSAGE if self.start == 0 else pb.OFFSET_OVERFLOW
            self.next = 0
        else:
            self.status = _RANGE_STATUS[result.status]
            self.next = self.start if result.status is GetStatus.OFFSET_OVERFLOW_ONE else result.next_begin_offset

    def _chunk(self):
        records = b"".join(self.parts)
        response = pb.ReadRangesResponse(range_index=self.index, records=records, record_count=self.part_records)
        self.parts.clear()
        self.part_bytes = self.part_records = 0
        return response

    def _finish(self, out: list) -> list:
        done = self._chunk() if self.parts else pb.ReadRangesResponse(range_index=self.index)
        done.done = True
        done.status = self.status or pb.FOUND
        done.next_offset = self.next
        done.min_offset = self.min
        done.max_offset = self.max
        done.corrupted_from = self.corrupted_from
        done.detail = self.detail
        out.append(done)
        return out


# --- validation helpers ---------------------------------------------------------------------------

def parse_tag_filter(expression: str) -> TagFilter | None:
    try:
        return TagFilter.parse(expression)
    except ValueError as bad:
        raise invalid(f"tag filter {echo(expression)} {bad}") from None



def _user_properties(properties, what: str) -> dict:
    out = {}
    for name, value in properties.items():
        if not name:
            raise invalid(f"{what} has a property with an empty name")
        if _SEPARATORS.search(name) or _SEPARATORS.search(value):
            raise invalid(f"property {echo(name)} of {what} holds a \\x01 or \\x02 character, which separate stored "
                          "properties: remove it")
        if name in _FIELD_PROPERTIES:
            raise invalid(f"{what} sets {name} as a property: use the {_FIELD_PROPERTIES[name]} field instead")
        if name in _RESERVED_PROPERTIES:
            raise invalid(f"property {echo(name)} of {what} is reserved for the broker: use another name")
        out[name] = value
    return out


def _field_properties(tags: str, keys: str) -> dict:
    out = {}
    for name, value in ((fmt.PROPERTY_TAGS, tags), (fmt.PROPERTY_KEYS, keys)):
        if value:
            if _SEPARATORS.search(value):
                raise invalid(f"{_FIELD_PROPERTIES[name]} {echo(value)} holds a \\x01 or \\x02 character: remove it")
            out[name] = value
    return out


def _check_early_batch_count(payload: bytes, count: int) -> None:
    """Refuse a declared count that is not the number of entries of a well-formed payload. A
    malformed payload is left to the store, which says where it breaks (MESSAGE_ILLEGAL)."""
    if count < 1:
        raise invalid(f"early batch count {count}: give the number of messages the payload holds, 1 or more")
    smallest = fmt.BATCH_ENTRY_FIXED_BYTES
    if count > len(payload) // smallest:
        raise invalid(f"early batch count {count} cannot be right: a payload of {len(payload)} bytes holds at most "
                      f"{len(payload) // smallest} messages of {smallest} bytes or more")
    pos, n, end = 0, 0, len(payload)
    while pos < end:
        if end - pos < 4:
            return
        (total,) = struct.unpack_from(">i", payload, pos)
        if total < smallest or total > end - pos:
            return
        pos += total
        n += 1
        if n > count:
            break
    if n != count:
        found = f"more than {count}" if n > count else str(n)
        raise invalid(f"early batch count {count} does not match its payload, which holds {found} messages: "
                      "send the number of messages encoded")


def _named_page_start(token: str, names: int) -> int:
    """Where the GetOffsets page of the token starts in a request's names."""
    if not token:
        return 0
    if token.isascii() and token.isdigit() and 0 < int(token) < names:
        return int(token)
    raise invalid(f"page_token {token[:40]!r} is not one the broker gave for these {names} topics: pass the "
                  "next_page_token of the last answer with the same topics, or \"\" for the first page")


def _check_group(group: str) -> None:
    if not group:
        raise invalid("the consumer group name is empty; name the group")
    if not _GROUP_NAME.match(group):
        raise invalid(f"consumer group {echo(group)} may only use letters, digits, '%', '|', '+', '_' and '-', "
                      "at most 255 of them")


def _check_not_system(topic: str, action: str) -> None:
    problem = system_topic_problem(topic, action)
    if problem:
        raise invalid(problem)


def _enum_name(enum_type, value: int) -> str:
    try:
        return enum_type.Name(value)
    except ValueError:
        return f"{value} (unknown)"


def _topic_pb(config: TopicConfig):
    return pb.Topic(name=config.name, queue_count=config.queue_count, queue_type=_QUEUE_TYPES_PB[config.queue_type])


def _peer_host(peer: str) -> bytes:
    """The client's address as RocketMQ's BORNHOST (IPv4 and port); zeros when not IPv4."""
    match = _PEER_IPV4.match(peer or "")
    if match:
        try:
            return fmt.encode_host(match.group(1), int(match.group(2)))
        except (OSError, struct.error):
            pass
    return bytes(8)


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def make_servicers(store: MessageStore, offsets: ConsumerOffsetTable, gate: CallGate,
                   counters: Counters, transactions=None, pop=None,
                   write_timeout_s: float = STREAM_WRITE_TIMEOUT_S) -> tuple[AdminServicer, MessagingServicer]:
    shared = _Shared(store, offsets, gate, counters, transactions, pop)
    return AdminServicer(shared), MessagingServicer(shared, write_timeout_s)
