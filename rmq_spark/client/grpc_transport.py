"""GrpcTransport: the transport over our own gRPC contract (protos/rmq_wire/contract).

The one module of the SDK that knows grpc and our protobuf messages: channel options,
deadlines, retries with backoff for the retriable codes only, gRPC status -> a typed error of
errors.py, and protobuf <-> the SDK's types. Three calls skip protobuf's copies on hot paths: a
SendMany request is joined from sends serialized one by one (``join_sends``), and the records of
a pop answer and of a ReadRanges answer are views of the received bytes (``_leading_records``)."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import grpc

from rmq_spark.client.stored import offset_message_id, stored_messages
from rmq_spark.client.tls import read_pem, tls_mismatch
from rmq_spark.client.transport import (
    AckFailure,
    EarlyBatch,
    Popped,
    PopQuery,
    RangeChunk,
    ReadStatus,
    Send,
    SendAnswer,
    Stored,
    Transport,
    TransportConfig,
)
from rmq_spark.errors import ClosedError, ConfigError, RmqError, TopicNotFoundError, error_for
from rmq_spark.structs import (
    PERM_READ,
    PERM_WRITE,
    BrokerInfo,
    BrokerQueues,
    BrokerStats,
    CommitResult,
    ConsumerConnection,
    CorruptedRecord,
    GroupInfo,
    GroupOffset,
    InnerBatchIds,
    Message,
    OffsetRange,
    PreparedTransaction,
    QueueOffsets,
    QueueType,
    SinkBatchStatus,
    SinkInfo,
    StoredMessage,
    TopicInfo,
    TransactionInfo,
    TransactionOutcome,
    TransactionState,
    is_system_topic,
)
from rmq_wire import signing
from rmq_wire.codec import Codec, Compression
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc, pop_pb2, pop_pb2_grpc, txn_pb2, txn_pb2_grpc
from rmq_wire.record import AUTO_CREATE_TOPIC

MAX_MESSAGE_BYTES = 64 << 20
# SendMany calls out at once per transport (a producer keeps max_in_flight_requests, 5 by default).
_CALLER_THREADS = 8

_QUEUE_TYPES = {QueueType.BATCH_CQ: pb.BATCH_CQ, QueueType.SIMPLE_CQ: pb.SIMPLE_CQ}
_FROM_PB_QUEUE_TYPE = {v: k for k, v in _QUEUE_TYPES.items()}
_CODECS = {Codec.RMQ: pb.CODEC_RMQ, Codec.ARROW: pb.CODEC_ARROW}
_COMPRESSIONS = {Compression.NONE: pb.COMPRESSION_NONE, Compression.LZ4: pb.COMPRESSION_LZ4,
                 Compression.ZSTD: pb.COMPRESSION_ZSTD, Compression.ZLIB: pb.COMPRESSION_ZLIB}
_READ_STATUSES = {pb.FOUND: ReadStatus.FOUND, pb.NO_MESSAGE: ReadStatus.NO_MESSAGE,
                  pb.OFFSET_TOO_SMALL: ReadStatus.OFFSET_TOO_SMALL, pb.OFFSET_OVERFLOW: ReadStatus.OFFSET_OVERFLOW,
                  pb.BUDGET_EXHAUSTED: ReadStatus.BUDGET_EXHAUSTED, pb.RECORD_CORRUPTED: ReadStatus.RECORD_CORRUPTED}
_TXN_STATES = {txn_pb2.TXN_OPEN: TransactionState.OPEN, txn_pb2.TXN_COMMITTING: TransactionState.COMMITTING,
               txn_pb2.TXN_COMMITTED: TransactionState.COMMITTED,
               txn_pb2.TXN_ROLLED_BACK: TransactionState.ROLLED_BACK,
               txn_pb2.TRANSACTION_STATE_UNSPECIFIED: TransactionState.UNKNOWN}


class GrpcTransport(Transport):
    """A channel to one broker and the stubs of its services."""

    def __init__(self, endpoint: str, config: TransportConfig, *, sleep: Callable[[float], None] = time.sleep):
        self.endpoint = endpoint
        self.config = config
        self._sleep = sleep
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", config.keepalive_ms),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        self.channel = (grpc.secure_channel(endpoint, _credentials(config), options=options) if config.tls
                        else grpc.insecure_channel(endpoint, options=options))
        self._admin = broker_pb2_grpc.AdminStub(self.channel)
        self._messaging = broker_pb2_grpc.MessagingStub(self.channel)
        self._pop = pop_pb2_grpc.PopStub(self.channel)
        self._txn = txn_pb2_grpc.TransactionsStub(self.channel)
        self._send_many = self.channel.unary_unary(  # takes the request serialized: see join_sends
            "/rmq_spark.protocol.v1.Messaging/SendMany", request_serializer=None,
            response_deserializer=pb.SendManyResponse.FromString)
        self._read_ranges = self.channel.unary_stream(  # as the stub's, but the records are not copied
            "/rmq_spark.protocol.v1.Messaging/ReadRanges", request_serializer=pb.ReadRangesRequest.SerializeToString,
            response_deserializer=_parse_read_ranges)
        self._signature = (0, ())  # (second, metadata): signed once a second, as the date changes
        self._caller_pool: ThreadPoolExecutor | None = None
        self._callers_lock = threading.Lock()
        self._closed = False
        self._answered = False  # a call was answered: a later failure is not TLS's
        self._pop_call = self.channel.unary_unary(  # as the stub's, but the records are not copied
            f"/{pop_pb2.DESCRIPTOR.services_by_name['Pop'].full_name}/Pop",
            request_serializer=pop_pb2.PopRequest.SerializeToString, response_deserializer=_parse_pop)

    # --- topics and offsets ----------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType) -> TopicInfo:
        request = pb.CreateTopicRequest(topic=pb.Topic(name=name, queue_count=queue_count,
                                                       queue_type=_QUEUE_TYPES[queue_type]))
        return _topic(self._call(self._admin.CreateTopic, request).topic)

    def delete_topic(self, name: str) -> bool:
        return self._call(self._admin.DeleteTopic, pb.DeleteTopicRequest(name=name)).deleted

    def list_topics(self) -> list[TopicInfo]:
        """The applications' topics: the broker's own (``is_system_topic``) left out, as through
        name servers."""
        topics = self._call(self._admin.ListTopics, pb.ListTopicsRequest()).topics
        return [_topic(t) for t in topics if not is_system_topic(t.name)]

    def new_topic(self, name: str) -> TopicInfo | None:
        try:
            stand_in, _queues = self.describe_topic(AUTO_CREATE_TOPIC)
        except TopicNotFoundError:
            return None
        return TopicInfo(name, stand_in.queue_count, stand_in.queue_type)

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        response = self._call(self._admin.DescribeTopic, pb.DescribeTopicRequest(name=name))
        return _topic(response.topic), [QueueOffsets(name, q.queue_id, q.min_offset, q.max_offset)
                                        for q in response.queues]

    def offsets(self, topics: list[str], unreachable: set | None = None, past: dict | None = None,
                wait_ms: int = 0) -> dict[str, list[QueueOffsets]]:
        out = {}
        request = pb.GetOffsetsRequest(topics=list(topics))
        timeout_ms = None
        if past and wait_ms > 0:  # the first page waits at the broker
            known: dict = {}
            for (topic, _broker, queue_id), offset in past.items():
                known.setdefault(topic, []).append(pb.QueueOffsets(queue_id=queue_id, max_offset=offset))
            request.known.extend(pb.TopicOffsets(topic=t, queues=q) for t, q in known.items())
            request.wait_ms = wait_ms
            timeout_ms = self.config.timeout_ms + wait_ms
        while True:  # ends: every page but the last holds a topic, and its token is past it
            response = self._call(self._admin.GetOffsets, request, timeout_ms=timeout_ms)
            del request.known[:]
            request.wait_ms, timeout_ms = 0, None
            out.update({t.topic: [QueueOffsets(t.topic, q.queue_id, q.min_offset, q.max_offset) for q in t.queues]
                        for t in response.topics})
            if not response.next_page_token or not response.topics:
                return out
            request.page_token = response.next_page_token

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids: list[int],
                              broker: str = "") -> dict[int, int]:
        request = pb.OffsetForTimestampRequest(topic=topic, timestamp_ms=timestamp_ms, queue_ids=queue_ids)
        return {o.queue_id: o.offset for o in self._call(self._admin.OffsetForTimestamp, request).offsets}

    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, str, int], int]) -> None:
        request = pb.CommitOffsetsRequest(group=group, offsets=[
            pb.GroupOffset(topic=topic, queue_id=queue_id, offset=offset)
            for (topic, _broker, queue_id), offset in offsets.items()])
        self._call(self._admin.CommitOffsets, request)

    def group_offsets(self, group: str, topics: list[str]) -> list[GroupOffset]:
        response = self._call(self._admin.QueryOffsets, pb.QueryOffsetsRequest(group=group, topics=topics))
        return [GroupOffset(group, o.topic, o.queue_id, o.offset) for o in response.offsets]

    def groups(self, names: list[str]) -> list[GroupInfo]:
        response = self._call(self._admin.ListGroups, pb.ListGroupsRequest(groups=names))
        return [GroupInfo(g.name, tuple(g.consumers)) for g in response.groups]

    def broker_stats(self) -> BrokerStats:
        r = self._call(self._admin.BrokerStats, pb.BrokerStatsRequest())
        return BrokerStats(r.topics, r.queues, r.commitlog_min_offset, r.commitlog_max_offset,
                           r.commitlog_flushed_offset, r.dispatched_offset, r.dispatch_lag_bytes, r.messages_put,
                           r.messages_read, r.resident_memory_bytes, r.data_dir, r.flush_mode,
                           r.dispatch_lag_ms, r.corrupted_records, tuple(
                               CorruptedRecord(c.commitlog_offset, c.size, c.topic, c.queue_id, c.first_offset,
                                               c.end_offset, c.reason, c.found_by) for c in r.corrupted),
                           r.disk_failure)

    # --- what operators look at and change ------------------------------------------------------

    def update_topic(self, name: str, queue_count: int = 0, perm: int = 0) -> TopicInfo:
        request = pb.UpdateTopicRequest(name=name, queue_count=queue_count, perm=perm)
        return _topic(self._call(self._admin.UpdateTopic, request).topic)

    def delete_group(self, group: str) -> bool:
        return self._call(self._admin.DeleteGroup, pb.DeleteGroupRequest(group=group)).deleted

    def topic_route(self, topic: str) -> list[BrokerQueues]:
        info, _queues = self.describe_topic(topic)
        return [BrokerQueues(self._broker_name(), self.endpoint, info.queue_count, info.queue_count, info.perm)]

    def brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo("", self._broker_name(), self.endpoint)]

    def broker_status(self, broker: str = "") -> dict[str, str]:
        stats = self.broker_stats()
        return {field.name: str(getattr(stats, field.name)) for field in dataclasses.fields(stats)
                if field.name != "corrupted"}

    def consumer_connections(self, group: str) -> list[ConsumerConnection]:
        [info] = self.groups([group])
        return [ConsumerConnection(group, client_id) for client_id in info.consumers]

    def query_messages(self, topic: str, key: str, *, unique_key: bool = False, begin_ms: int = 0, end_ms: int = 0,
                       max_messages: int = 32) -> list[StoredMessage]:
        request = pb.QueryMessagesRequest(topic=topic, key=key, unique_key=unique_key, begin_ms=begin_ms,
                                          end_ms=end_ms, max_messages=max_messages)
        return stored_messages(self._call(self._admin.QueryMessages, request).records)

    def message_by_offset_id(self, message_id: str) -> StoredMessage:
        _address, offset = offset_message_id(message_id)  # one broker: its store host is this one
        return stored_messages(self._call(self._admin.GetMessage, pb.GetMessageRequest(commitlog_offset=offset))
                               .record)[0]

    def _broker_name(self) -> str:
        return self._call(self._admin.BrokerStats, pb.BrokerStatsRequest()).broker_name

    # --- messages ----------------------------------------------------------------------------------

    def send_many(self, sends: list[Send], timeout_ms: int, answer: SendAnswer) -> None:
        serialized, refused = [], {}
        for index, send in enumerate(sends):
            try:
                serialized.append(_send_request(send).SerializeToString())
            except (TypeError, ValueError) as error:  # e.g. a property that is not a string: this send alone
                refused[index] = error
        if not serialized:
            answer([refused[index] for index in range(len(sends))], None)
            return
        self._callers().submit(self._send_call, join_sends(serialized), timeout_ms / 1000, answer, refused)

    def _callers(self) -> ThreadPoolExecutor:
        """The threads that make SendMany calls, each a blocking call answered on its thread. A
        call's future() would cost a thread of its own whenever no other call is out (gRPC's
        channel spins one up per idle period): a producer's calls come one or two at a time."""
        with self._callers_lock:
            if self._closed:
                raise self._closed_error()
            if self._caller_pool is None:
                self._caller_pool = ThreadPoolExecutor(_CALLER_THREADS, thread_name_prefix="rmq-send")
            return self._caller_pool

    def _send_call(self, request: bytes, timeout_s: float, answer: SendAnswer, refused: dict) -> None:
        try:
            outcomes = self._send_many(request, timeout=timeout_s, metadata=self._signed()).outcomes
        except grpc.RpcError as err:
            answer(None, self._error(err))
            return
        except ValueError:  # the transport was closed with this call still waiting for a thread
            answer(None, self._closed_error())
            return
        answered = [_stored(o.response) if o.HasField("response") else error_for("", o.error, o.reason)
                    for o in outcomes]
        for index in sorted(refused):  # back in the order of the sends
            answered.insert(index, refused[index])
        answer(answered, None)

    def read_ranges(self, ranges: Sequence[OffsetRange], max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        request = pb.ReadRangesRequest(
            ranges=[pb.ReadRange(topic=r.topic, queue_id=r.queue_id, start_offset=r.start, end_offset=r.end or 0)
                    for r in ranges], max_bytes=max_bytes, tag_filter=tag_filter)
        statuses = _READ_STATUSES
        if self._closed:
            raise self._closed_error()
        try:
            for r, records in self._read_ranges(request, timeout=self._timeout_s(None), metadata=self._signed()):
                yield RangeChunk(r.range_index, records, r.record_count, r.done, statuses.get(r.status),
                                 r.next_offset, r.min_offset, r.max_offset, r.corrupted_from, r.detail)
        except grpc.RpcError as err:
            raise self._error(err) from None

    # --- pop ---------------------------------------------------------------------------------------

    def pop(self, query: PopQuery) -> Popped:
        request = pop_pb2.PopRequest(group=query.group, topic=query.topic, queue_id=query.queue_id,
                                     max_messages=query.max_messages, invisible_time_ms=query.invisible_ms,
                                     poll_time_ms=query.poll_ms, tag_filter=query.tag_filter, orderly=query.orderly,
                                     ack_receipt_handles=query.ack_handles)
        # carrying acks, a pop is not sent again: a repeat would ack twice (the second time "expired")
        r, records = self._call(self._pop_call, request, timeout_ms=self.config.timeout_ms + query.poll_ms,
                                retry=not query.ack_handles)
        return Popped(r.topic, r.invisible_until_ms, r.polling_full, r.receipt_handles, r.queue_ids, r.offsets,
                      r.counts, r.reconsume_times, r.retry, r.record_bytes, records,
                      ack_failures=_ack_failures(r.ack_failures))

    def ack(self, group: str, receipt_handles: list[str]) -> list[AckFailure]:
        response = self._call(self._pop.Ack, pop_pb2.AckRequest(group=group, receipt_handles=receipt_handles),
                              retry=False)
        return _ack_failures(response.failures)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        response = self._call(self._pop.ChangeInvisibleDuration, pop_pb2.ChangeInvisibleDurationRequest(
            group=group, receipt_handle=receipt_handle, invisible_time_ms=invisible_ms), retry=False)
        return response.receipt_handle, response.invisible_until_ms

    # --- transactions ------------------------------------------------------------------------------

    def end_transactions(self, commit: bool, transactions: list[PreparedTransaction],
                         sink_batch: tuple[str, int] | None, timeout_ms: int) -> CommitResult:
        request = txn_pb2.EndTransactionRequest(
            action=txn_pb2.TXN_COMMIT if commit else txn_pb2.TXN_ROLLBACK,
            transactions=[txn_pb2.TransactionRef(id=t.transaction_id, message_count=t.message_count)
                          for t in transactions])
        if sink_batch is not None:
            request.sink_batch.CopyFrom(txn_pb2.SinkBatch(sink_id=sink_batch[0], batch_id=sink_batch[1]))
        r = self._call(self._txn.EndTransaction, request, timeout_ms=timeout_ms)  # ending is idempotent
        outcomes = tuple(TransactionOutcome(t.id, _TXN_STATES[t.state], t.changed, t.batch_count, t.message_count)
                         for t in r.transactions)
        return CommitResult(outcomes, r.sink_batch_replayed, tuple(r.sink_batch_transaction_ids))

    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus:
        r = self._call(self._txn.GetSinkBatch, txn_pb2.GetSinkBatchRequest(sink_id=sink_id, batch_id=batch_id))
        return SinkBatchStatus(sink_id, batch_id, r.committed, tuple(r.transaction_ids), r.committed_ms,
                               r.latest_batch_id)

    def list_sinks(self) -> list[SinkInfo]:
        response = self._call(self._txn.ListSinks, txn_pb2.ListSinksRequest())
        return [SinkInfo(s.sink_id, s.owner, s.latest_batch_id, s.batches_kept, s.committed_ms) for s in response.sinks]

    def release_sink(self, sink_id: str) -> str | None:
        response = self._call(self._txn.ReleaseSink, txn_pb2.ReleaseSinkRequest(sink_id=sink_id))
        return response.owner if response.released else None

    def list_transactions(self, transaction_ids: list[str]) -> list[TransactionInfo]:
        response = self._call(self._txn.ListTransactions, txn_pb2.ListTransactionsRequest(ids=transaction_ids))
        return [TransactionInfo(t.id, _TXN_STATES[t.state], t.batch_count, t.message_count, t.created_ms,
                                t.last_prepared_ms, t.expires_ms, t.ended_ms, t.expired)
                for t in response.transactions]

    def close(self) -> None:
        with self._callers_lock:
            pool, self._caller_pool, self._closed = self._caller_pool, None, True
        if pool is not None:
            pool.shutdown(wait=False)  # calls still out end with the channel, answered as failed
        self.channel.close()

    # --- calls -------------------------------------------------------------------------------------

    def _call(self, method, request, *, timeout_ms: int | None = None, retry: bool = True):
        """A unary call; retried on retriable errors when ``retry`` (the call is safe to repeat)."""
        if self._closed:
            raise self._closed_error()
        attempts = 1 + (self.config.retries if retry else 0)
        for attempt in range(attempts):
            try:
                answer = method(request, timeout=self._timeout_s(timeout_ms), metadata=self._signed())
                self._answered = True
                return answer
            except grpc.RpcError as err:
                error = self._error(err)
                if not error.retriable or attempt + 1 == attempts:
                    raise error from None
                self._sleep(self.backoff_s(attempt))
        raise AssertionError("unreachable")

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the connection to {self.endpoint} is closed: close() was called on it, so nothing more "
                           "is sent; create a new producer, reader or admin")

    def _error(self, err: grpc.RpcError) -> RmqError:
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        details = (err.details() if hasattr(err, "details") else None) or str(err)
        reason = None
        for key, value in (err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else ():
            if key == "rmq-reason":
                reason = value
        if code == grpc.StatusCode.UNAVAILABLE and reason is None and not self._answered:
            # TLS on one side only (asked once, before the broker ever answered us: after, TLS cannot
            # be why, and the probe's handshake would have a plain broker log a TLS client)
            tls_problem = tls_mismatch(self.endpoint, self.config)
            if tls_problem is not None:
                return ConfigError(f"{tls_problem} ({details})")
            details = f"broker at {self.endpoint} is unavailable: {details}"
        return error_for(code.name, details, reason, code)

    def _timeout_s(self, timeout_ms: int | None) -> float:
        return (timeout_ms or self.config.timeout_ms) / 1000

    def _signed(self) -> tuple:
        """A call's metadata: the signature of the config's credentials, if any (as RocketMQ's
        gRPC clients sign: the date and time, to the second)."""
        credentials = self.config.credentials
        if credentials is None:
            return ()
        second = int(time.time())
        signed_at, metadata = self._signature
        if signed_at != second:
            metadata = signing.grpc_metadata(credentials, second)
            self._signature = (second, metadata)
        return metadata


def _credentials(config: TransportConfig) -> grpc.ChannelCredentials:
    """TLS credentials of ``config``: its CA (else gRPC's roots) and client certificate, if any."""
    return grpc.ssl_channel_credentials(read_pem(config, "tls_ca_file"), read_pem(config, "tls_key_file"),
                                        read_pem(config, "tls_cert_file"))


def _topic(topic: pb.Topic) -> TopicInfo:
    return TopicInfo(topic.name, topic.queue_count, _FROM_PB_QUEUE_TYPE[topic.queue_type],
                     perm=topic.perm or PERM_READ | PERM_WRITE)  # 0: a broker from before perms


def _stored(r: pb.SendResponse) -> Stored:
    ids = InnerBatchIds(r.batch_message_id, r.count) if r.batch_message_id else r.message_ids  # not copied
    return Stored(r.queue_id, r.base_offset, r.count, ids, r.store_timestamp_ms)


def _send_request(send: Send) -> pb.SendRequest:
    request = pb.SendRequest(topic=send.topic, queue_id=send.queue_id, producer_id=send.producer_id,
                             sequence=send.sequence, transaction_id=send.transaction_id)
    content = send.content
    if isinstance(content, Message):
        request.single.CopyFrom(pb.SingleMessage(body=content.body, properties=content.properties,
                                                 tags=content.tags or "", keys=content.keys or ""))
    elif isinstance(content, EarlyBatch):
        request.early_batch.payload = content.payload
        request.early_batch.count = content.count
    else:
        batch = request.inner_batch
        batch.payload = content.payload
        batch.count = content.count
        batch.codec = _CODECS[content.codec]
        batch.compression = _COMPRESSIONS[content.compression]
        batch.tags = content.tags or ""
    return request


def join_sends(serialized: list[bytes]) -> bytes:
    """A SendManyRequest of sends serialized one by one: field 1, length-delimited, each.

    protobuf's upb encoder serializes a message of several large nested messages at about
    0.4 GB/s (it grows its buffer as it goes); each SendRequest alone serializes at copy speed,
    and joining them here is one more copy."""
    parts = []
    for send in serialized:
        parts += [_SENDS_TAG, _varint(len(send)), send]
    return b"".join(parts)


_SENDS_TAG = b"\x0a"  # field 1 (sends), wire type 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _leading_records(message_type):
    """A parser of ``message_type`` answers whose ``records`` bytes field the broker writes
    first (broker_sim/doors/contract/serialized.py): (the answer without it, a view of the received
    bytes). Protobuf would copy the records twice: parsing, then reading the field."""
    key = bytes([message_type.DESCRIPTOR.fields_by_name["records"].number << 3 | 2])

    def parse(data: bytes):
        if data[:1] == key:
            size, at = _read_varint(data, 1)
            response = message_type.FromString(data[at + size:])
            if not response.records:  # a field given twice: the last one counts, as in protobuf
                return response, memoryview(data)[at:at + size]
        else:
            response = message_type.FromString(data)
        return response, memoryview(response.records)

    return parse


_parse_pop = _leading_records(pop_pb2.PopResponse)
_parse_read_ranges = _leading_records(pb.ReadRangesResponse)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _ack_failures(failures) -> list[AckFailure]:
    return [AckFailure(f.index, f.status == pop_pb2.ACK_INVALID, f.detail) for f in failures]
