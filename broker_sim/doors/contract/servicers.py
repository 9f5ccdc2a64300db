"""Our gRPC contract's door (broker.proto's Admin and Messaging): the servicers translate
protobuf <-> ``BrokerCore`` calls, nothing more. Refusals are ``BrokerFault``s of the core and
become statuses in errors.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from broker_sim.core import (
    BrokerCore,
    EarlyBatchSend,
    InnerBatchSend,
    OffsetRange,
    RangeStatus,
    SendRequest,
    SingleSend,
    TopicConfig,
)
from broker_sim.core.errors import BrokerFault, Reason, bad_range, from_exception, invalid, refused
from broker_sim.doors import BROKER_NAME
from broker_sim.doors.contract.serialized import with_bytes_field
from broker_sim.doors.grpc_acl import caller
from broker_sim.doors.grpc_common import peer_host, translated, translated_stream
from broker_sim.doors.grpc_limits import client_of
from broker_sim.doors.hold import PullHold
from rmq_wire import record as fmt
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from rmq_wire.types import MAX_OFFSETS_WAIT_MS, InnerBatchIds, QueueType

DEFAULT_READ_BUDGET = 64 << 20  # ReadRanges' byte budget when the request gives 0
CHUNK_BYTES = 4 << 20  # records per ReadRanges response, at most (a larger record travels alone)
_RESPONSES_PER_STEP = 256  # ranges answered in one hand-off to the pool, at most: steps stay short
CORRUPTED_LISTED = 100  # damaged records BrokerStats lists (it counts all)
STREAM_WRITE_TIMEOUT_S = 60.0  # a ReadRanges client that takes no response for this long has its stream ended
STEP_HOLDS_BYTES = 3 * CHUNK_BYTES  # what a ReadRanges step may leave held, at most: a chunk twice, the next begun
QUERY_DEFAULT_MESSAGES = 32  # QueryMessages' max_messages when the request gives 0 (mqadmin queryMsgByKey's)
QUERY_MAX_MESSAGES = 64  # QueryMessages answers at most this many (RocketMQ's maxMsgsNumBatch)
QUERY_MAX_BYTES = 16 << 20  # nor more records than this, whatever their number (the first always)

_QUEUE_TYPES = {pb.SIMPLE_CQ: QueueType.SIMPLE_CQ, pb.BATCH_CQ: QueueType.BATCH_CQ}
_QUEUE_TYPES_PB = {v: k for k, v in _QUEUE_TYPES.items()}
_CODECS = {pb.CODEC_RMQ: "rmq", pb.CODEC_ARROW: "arrow"}
_COMPRESSIONS = {pb.COMPRESSION_NONE: fmt.Compression.NONE, pb.COMPRESSION_LZ4: fmt.Compression.LZ4,
                 pb.COMPRESSION_ZSTD: fmt.Compression.ZSTD, pb.COMPRESSION_ZLIB: fmt.Compression.ZLIB}
_RANGE_STATUS = {status: pb.RangeStatus.Value(status.value) for status in RangeStatus}
_RECORDS_FIELD = pb.ReadRangesResponse.DESCRIPTOR.fields_by_name["records"].number


class AdminServicer(pb_grpc.AdminServicer):
    """``broker_name``: how RocketMQ's doors name this broker in routes (BrokerStats says it)."""

    def __init__(self, core: BrokerCore, broker_name: str = BROKER_NAME):
        self._core = core
        self.broker_name = broker_name
        self._pull_hold: PullHold | None = None

    @translated
    def CreateTopic(self, request, context):
        if not request.HasField("topic"):
            raise invalid("the request has no topic: set topic with its name, queue_count and queue_type")
        topic = request.topic
        queue_type = _QUEUE_TYPES.get(topic.queue_type)
        if topic.name and queue_type is None:
            raise invalid(f"queue_type {enum_name(pb.QueueType, topic.queue_type)}: set SIMPLE_CQ (an index unit "
                          "per message) or BATCH_CQ (an index unit per batch)")
        config, created = self._core.create_topic(topic.name, topic.queue_count, queue_type, client_of(context),
                                                  perm=topic.perm)
        return pb.CreateTopicResponse(topic=_topic_pb(config), created=created)

    @translated
    def UpdateTopic(self, request, context):
        config = self._core.update_topic(request.name, request.queue_count, request.perm, client_of(context))
        return pb.UpdateTopicResponse(topic=_topic_pb(config))

    @translated
    def DeleteTopic(self, request, context):
        return pb.DeleteTopicResponse(deleted=self._core.delete_topic(request.name))

    @translated
    def DescribeTopic(self, request, context):
        config, queues = self._core.describe_topic(request.name)
        return pb.DescribeTopicResponse(topic=_topic_pb(config), queues=_queues_pb(queues))

    @translated
    def ListTopics(self, request, context):
        return pb.ListTopicsResponse(topics=[_topic_pb(t) for t in self._core.list_topics()])

    @translated
    async def GetOffsets(self, request, context):
        if request.wait_ms > 0 and request.known:
            await self._wait_past(request)
        return await asyncio.get_running_loop().run_in_executor(None, self._offsets, request)

    async def _wait_past(self, request) -> None:
        """Wait until a queue of ``request.known`` ends past its offset there (or is gone), at
        most ``wait_ms`` (MAX_OFFSETS_WAIT_MS): woken by the store's arrivals, holding no thread."""
        if request.wait_ms > MAX_OFFSETS_WAIT_MS:
            raise invalid(f"wait_ms {request.wait_ms} is more than {MAX_OFFSETS_WAIT_MS:,}: wait at most that long, "
                          "then ask again")
        known = [(t.topic, q.queue_id, q.max_offset) for t in request.known for q in t.queues]
        hold, loop = self._hold(), asyncio.get_running_loop()
        deadline = loop.time() + request.wait_ms / 1000
        while not self._any_past(known) and loop.time() < deadline:
            await hold.arrival(deadline - loop.time())

    def _any_past(self, known: list) -> bool:
        for topic, queue_id, offset in known:
            try:
                if self._core.indexed_offset(topic, queue_id) > offset:
                    return True
            except LookupError:  # the queue is gone: the answer says so
                return True
        return False

    def _hold(self) -> PullHold:
        """The waits of GetOffsets, woken by the store's arrivals (made on the door's loop, at its first wait)."""
        if self._pull_hold is None:
            self._pull_hold = PullHold(asyncio.get_running_loop(), self._core.limits.max_parked_pulls)
            self._core.add_arrival_listener(self._pull_hold.arrived)
        return self._pull_hold

    def _offsets(self, request):
        names = list(request.topics)
        # The page token: for named topics the index of the page's first name, otherwise its name.
        after = _named_page_start(request.page_token, len(names)) if names else request.page_token
        page, next_start = self._core.offsets_page(names, after, request.max_queues)
        topics = [pb.TopicOffsets(topic=config.name, queues=_queues_pb(queues)) for config, queues in page]
        return pb.GetOffsetsResponse(topics=topics, next_page_token="" if next_start is None else str(next_start))

    @translated
    def OffsetForTimestamp(self, request, context):
        found = self._core.offsets_for_timestamp(request.topic, list(request.queue_ids), request.timestamp_ms)
        return pb.OffsetForTimestampResponse(offsets=[pb.QueueOffset(queue_id=q, offset=o) for q, o in found])

    @translated
    def BrokerStats(self, request, context):
        stats = self._core.stats()
        fields = dataclasses.asdict(stats)
        corrupted = fields.pop("corrupted")
        return pb.BrokerStatsResponse(**fields, corrupted_records=len(corrupted),
                                      corrupted=[pb.CorruptedRecord(**r) for r in corrupted[:CORRUPTED_LISTED]],
                                      broker_name=self.broker_name)

    @translated
    def CommitOffsets(self, request, context):
        self._core.commit_offsets(request.group, [(e.topic, e.queue_id, e.offset) for e in request.offsets],
                                  client_of(context))
        return pb.CommitOffsetsResponse()

    @translated
    def QueryOffsets(self, request, context):
        found = self._core.query_offsets(request.group, list(request.topics))
        return pb.QueryOffsetsResponse(offsets=[pb.GroupOffset(topic=t, queue_id=q, offset=o) for t, q, o in found])

    @translated
    def ListGroups(self, request, context):
        return pb.ListGroupsResponse(groups=[pb.ConsumerGroup(name=name, consumers=consumers)
                                             for name, consumers in self._core.list_groups(list(request.groups))])

    @translated
    def DeleteGroup(self, request, context):
        return pb.DeleteGroupResponse(deleted=self._core.delete_group(request.group))

    @translated
    def QueryMessages(self, request, context):
        """Most recent first, at most QUERY_MAX_MESSAGES records and QUERY_MAX_BYTES (the first
        record always)."""
        if request.begin_ms < 0 or request.end_ms < 0:
            raise invalid(f"begin_ms {request.begin_ms} / end_ms {request.end_ms}: give milliseconds since the "
                          "epoch, or 0 (from the first message / until now)")
        if request.max_messages < 0:
            raise invalid(f"max_messages {request.max_messages} is negative: ask for 1 or more, or 0 for "
                          f"{QUERY_DEFAULT_MESSAGES}")
        end_ms = request.end_ms or int(time.time() * 1000)
        if end_ms < request.begin_ms:
            raise invalid(f"end_ms {end_ms} is before begin_ms {request.begin_ms}: the window is empty")
        wanted = min(request.max_messages or QUERY_DEFAULT_MESSAGES, QUERY_MAX_MESSAGES)
        found = self._core.query_messages(request.topic, request.key, wanted, request.begin_ms, end_ms,
                                          request.unique_key)
        kept, size = [], 0
        for record in found:
            if kept and size + len(record) > QUERY_MAX_BYTES:
                break
            kept.append(record)
            size += len(record)
        return pb.QueryMessagesResponse(records=b"".join(kept))

    @translated
    def GetMessage(self, request, context):
        if request.commitlog_offset < 0:
            raise invalid(f"commitlog_offset {request.commitlog_offset} is negative: give the offset a message id "
                          "names (RocketMQ's offsetMsgId holds it)")
        return pb.GetMessageResponse(record=self._core.message_at(request.commitlog_offset))


class MessagingServicer(pb_grpc.MessagingServicer):
    def __init__(self, core: BrokerCore, write_timeout_s: float = STREAM_WRITE_TIMEOUT_S):
        self._core = core
        self.write_timeout_s = write_timeout_s  # of each ReadRanges response
        self._ended: dict = {}  # a ReadRanges call's context -> a future set when the memory budget cuts it

    # Sends run on the event loop when they never wait for a disk flush: an append is a write
    # into the page cache, and the hand-off to a pool thread and back cost more (~130 us a call).
    # With --flush sync they wait for the flush in the pool, where concurrent sends share it.

    @translated
    async def Send(self, request, context):
        return await self._run_append(self._send, request, peer_host(context.peer()), caller(), client_of(context))

    @translated
    async def SendMany(self, request, context):
        return await self._run_append(self._send_many, request, peer_host(context.peer()), caller(),
                                      client_of(context))

    async def _run_append(self, append, *args):
        if self._core.appends_wait_for_flush:
            return await asyncio.get_running_loop().run_in_executor(None, append, *args)
        return append(*args)

    def _send_many(self, request, born_host: bytes, owner: str | None, client: str) -> pb.SendManyResponse:
        outcomes = []
        for send in request.sends:
            try:
                outcomes.append(pb.SendOutcome(response=self._send(send, born_host, owner, client)))
            except Exception as err:  # each send has its own outcome; faults are logged there
                error = from_exception(err)
                outcomes.append(pb.SendOutcome(reason=error.reason.value, error=error.message))
        return pb.SendManyResponse(outcomes=outcomes)

    def _send(self, request, born_host: bytes, owner: str | None, client: str) -> pb.SendResponse:
        outcome = self._core.send(SendRequest(request.topic, request.queue_id, _content(request),
                                              request.born_timestamp_ms, born_host, request.producer_id,
                                              request.sequence, request.transaction_id, owner=owner, client=client))
        ids = outcome.message_ids
        batch_id = ids.record_id if isinstance(ids, InnerBatchIds) else ""
        return pb.SendResponse(queue_id=outcome.queue_id, base_offset=outcome.base_offset, count=outcome.count,
                               message_ids=() if batch_id else ids, batch_message_id=batch_id,
                               store_timestamp_ms=outcome.store_timestamp_ms, duplicate=outcome.duplicate)

    @translated_stream
    async def ReadRanges(self, request, context):
        if request.max_bytes < 0:
            raise bad_range(f"max_bytes {request.max_bytes} is negative: give a byte budget, or 0 for the "
                            f"broker's default of {DEFAULT_READ_BUDGET >> 20} MiB")
        limits = self._core.limits
        if len(request.ranges) > limits.max_ranges_per_read:
            raise bad_range(f"the call names {len(request.ranges)} ranges, the broker's limit is "
                            f"{limits.max_ranges_per_read} (--max-ranges-per-read): read them in several calls")
        ranges = [OffsetRange(r.topic, r.queue_id, r.start_offset, r.end_offset or None) for r in request.ranges]
        loop = asyncio.get_running_loop()
        ended = self._ended[context] = loop.create_future()  # the broker's memory budget cut this stream

        def cut(why: str) -> None:
            loop.call_soon_threadsafe(lambda: ended.done() or ended.set_result(why))

        # What the stream holds, in the broker's memory budget: each response made and not yet
        # sent counts twice (ours, and gRPC's copy while it is written), the start of the next
        # one once. A step is reserved at its most before it runs.
        memory = self._core.memory.holding(client_of(context), "a ReadRanges stream", cut)
        # At most the broker's bound, whatever the call asks: its reader asks again for the rest.
        budget = min(request.max_bytes or DEFAULT_READ_BUDGET, limits.max_read_bytes_per_call)
        cursors = self._core.open_ranges(ranges, request.tag_filter, budget)
        position = _Position(cursors)
        try:
            while not position.finished:  # steps in the broker's thread pool: the loop never waits for the disk
                memory.reserve(STEP_HOLDS_BYTES - memory.held)
                responses = await loop.run_in_executor(None, position.step)
                holds = 2 * sum(map(len, responses)) + position.pending_bytes
                memory.reserve(holds - memory.held)
                memory.release(memory.held - holds)
                for response in responses:
                    yield response  # resumed once it is written
                    memory.release(2 * len(response))
        finally:  # a cancelled or failed call counts what it read too
            memory.close()
            del self._ended[context]
            if cursors:
                self._core.counters.add(read=cursors[0].budget.messages)

    async def write_response(self, context, response) -> BrokerFault | None:
        """Send one response of a stream (translated_stream); the refusal ending the stream
        when the client took none for write_timeout_s, or the broker's memory budget cut it."""
        self._core.counters.add(waiting=1)
        write = asyncio.ensure_future(context.write(response))
        ended = self._ended.get(context)
        try:
            waits = (write, ended) if ended is not None else (write,)
            done, _ = await asyncio.wait(waits, timeout=self.write_timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if write in done:
                write.result()
                return None
            write.cancel()
            if ended is not None and ended.done():
                return refused(Reason.TOO_MANY_REQUESTS, f"[TOO_MANY_REQUESTS] the broker ended this stream: "
                                                         f"{ended.result()}")
            return refused(Reason.STREAM_STALLED, f"the client took no response of this stream for "
                                                  f"{self.write_timeout_s:g} s, so the broker ended it; read the "
                                                  "responses as they come, and read again from the last "
                                                  "next_offset received")
        finally:
            if not write.done():  # the call was cancelled (the client went away)
                write.cancel()
            write.add_done_callback(_retrieved)
            self._core.counters.add(waiting=-1)


def _retrieved(write: asyncio.Future) -> None:
    """A write's failure after its stream ended (the client went away) is no fault to report."""
    if not write.cancelled():
        write.exception()


class _Position:
    """Where a ReadRanges call is: its cursors, read in order. A step is one store step of a
    range, and of the ranges after it while each ends within its step and less than a chunk is
    answered: many small or empty ranges share a hand-off to the thread pool, and a large one
    is answered a chunk at a time, as it is read."""

    def __init__(self, cursors: list):
        self.cursors = cursors
        self.index = 0
        self.chunks = _Chunks(0, cursors[0]) if cursors else None

    @property
    def finished(self) -> bool:
        return self.index >= len(self.cursors)

    @property
    def pending_bytes(self) -> int:
        """Records taken for the next response, held until it is made."""
        return self.chunks.part_bytes if self.chunks is not None else 0

    def step(self) -> list:
        out, size = [], 0
        while not self.finished and size < CHUNK_BYTES and len(out) < _RESPONSES_PER_STEP:
            responses, done = self.cursors[self.index].step(CHUNK_BYTES, self.chunks.take)
            out += responses
            size += sum(map(len, responses))
            if not done:
                return out
            self.index += 1
            self.chunks = _Chunks(self.index, self.cursors[self.index]) if not self.finished else None
        return out


class _Chunks:
    """Cuts a range's records into ReadRanges responses of CHUNK_BYTES at most. Records arrive
    as views of the store: they are copied into the responses (or into the start of the next
    one) before ``take`` returns."""

    def __init__(self, index: int, cursor):
        self.index = index
        self.cursor = cursor
        self.parts: list = []
        self.part_bytes = 0
        self.part_records = 0

    def take(self, records: list, done: bool) -> tuple[list, bool]:
        out = []
        size = sum(map(len, records))
        if self.part_bytes + size <= CHUNK_BYTES:  # the usual step: no record per record work
            self.parts += records
            self.part_bytes += size
            self.part_records += len(records)
        else:
            for record in records:
                if self.parts and self.part_bytes + len(record) > CHUNK_BYTES:
                    out.append(self._chunk())
                self.parts.append(record)
                self.part_bytes += len(record)
                self.part_records += 1
        if done:
            out.append(self._finish())
        elif self.part_bytes >= CHUNK_BYTES:
            out.append(self._chunk())
        elif self.parts:  # the start of the next chunk: copied, no view of the store is kept across a yield
            self.parts[:] = [b"".join(self.parts)]
        return out, done

    def _chunk(self, **fields) -> bytes:
        """A response of the records taken so far, serialized with them copied once (from the
        store's views straight into the answer: ``with_bytes_field``)."""
        head = pb.ReadRangesResponse(range_index=self.index, record_count=self.part_records, **fields)
        response = with_bytes_field(head, _RECORDS_FIELD, self.parts)
        self.parts.clear()
        self.part_bytes = self.part_records = 0
        return response

    def _finish(self) -> bytes:
        cursor = self.cursor
        return self._chunk(done=True, status=_RANGE_STATUS[cursor.status], next_offset=cursor.next_offset,
                           min_offset=cursor.min_offset, max_offset=cursor.max_offset,
                           corrupted_from=cursor.corrupted_from, detail=cursor.detail)


# --- translation helpers --------------------------------------------------------------------------

def _content(request):
    kind = request.WhichOneof("payload")
    if kind == "single":
        message = request.single
        return SingleSend(message.body, dict(message.properties), message.tags, message.keys, message.flag)
    if kind == "early_batch":
        return EarlyBatchSend(request.early_batch.payload, request.early_batch.count)
    if kind == "inner_batch":
        batch = request.inner_batch
        codec = _CODECS.get(batch.codec)
        if codec is None:
            raise invalid(f"codec {enum_name(pb.Codec, batch.codec)}: set CODEC_RMQ or CODEC_ARROW")
        compression = _COMPRESSIONS.get(batch.compression)
        if compression is None:
            raise invalid(f"compression {enum_name(pb.Compression, batch.compression)}: set COMPRESSION_NONE, "
                          "COMPRESSION_LZ4, COMPRESSION_ZSTD or COMPRESSION_ZLIB")
        return InnerBatchSend(batch.payload, batch.count, codec, compression, dict(batch.properties), batch.tags)
    raise invalid("the request carries no message: set one of single, early_batch or inner_batch")

def _named_page_start(token: str, names: int) -> int:
    """Where the GetOffsets page of the token starts in a request's names."""
    if not token:
        return 0
    if token.isascii() and token.isdigit() and 0 < int(token) < names:
        return int(token)
    raise invalid(f"page_token {token[:40]!r} is not one the broker gave for these {names} topics: pass the "
                  "next_page_token of the last answer with the same topics, or \"\" for the first page")

def enum_name(enum_type, value: int) -> str:
    """The name of ``value`` in a protobuf enum, for a refusal's sentence; "N (unknown)" outside it."""
    try:
        return enum_type.Name(value)
    except ValueError:
        return f"{value} (unknown)"

def _topic_pb(config: TopicConfig):
    return pb.Topic(name=config.name, queue_count=config.queue_count, queue_type=_QUEUE_TYPES_PB[config.queue_type],
                    perm=config.perm)


def _queues_pb(queues) -> list:
    return [pb.QueueOffsets(queue_id=q.queue_id, min_offset=q.min_offset, max_offset=q.max_offset) for q in queues]


def make_servicers(core: BrokerCore, write_timeout_s: float = STREAM_WRITE_TIMEOUT_S,
                   broker_name: str = BROKER_NAME):
    return AdminServicer(core, broker_name), MessagingServicer(core, write_timeout_s)
