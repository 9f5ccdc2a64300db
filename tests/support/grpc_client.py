"""A client of our gRPC contract for tests (broker_sim.doors.contract): the generated stubs over a real channel on
127.0.0.1, refusals as (code, reason, details), ReadRanges answers grouped per range."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import grpc

from broker_sim.store import decode_record, encode_message_batch
from rmq_wire import record as fmt
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from rmq_wire.contract import pop_pb2_grpc

WAIT_S = 10.0
CALL_TIMEOUT_S = 20.0
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 80 << 20), ("grpc.max_send_message_length", 80 << 20)]


class Client:
    """The contract's stubs over one channel (``admin``, ``messaging``, ``pop``); every call has a deadline."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.channel = grpc.insecure_channel(endpoint, options=CHANNEL_OPTIONS)
        self.admin = pb_grpc.AdminStub(self.channel)
        self.messaging = pb_grpc.MessagingStub(self.channel)
        self.pop = pop_pb2_grpc.PopStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    # --- admin ---------------------------------------------------------------------------------

    def create(self, name: str, queues: int = 1, queue_type=pb.SIMPLE_CQ):
        topic = pb.Topic(name=name, queue_count=queues, queue_type=queue_type)
        return self.admin.CreateTopic(pb.CreateTopicRequest(topic=topic), timeout=CALL_TIMEOUT_S)

    def offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        answer = self.admin.DescribeTopic(pb.DescribeTopicRequest(name=topic), timeout=CALL_TIMEOUT_S)
        return {q.queue_id: (q.min_offset, q.max_offset) for q in answer.queues}

    def stats(self):
        return self.admin.BrokerStats(pb.BrokerStatsRequest(), timeout=CALL_TIMEOUT_S)

    def wait_readable(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Wait until the queue's max offset reaches ``max_offset`` (the dispatcher indexed it)."""
        deadline = time.monotonic() + WAIT_S
        while self.offsets(topic)[queue_id][1] < max_offset:
            assert time.monotonic() < deadline, f"{topic}:{queue_id} never reached offset {max_offset}"
            time.sleep(0.005)

    # --- sending -------------------------------------------------------------------------------

    def send(self, topic: str, queue_id: int = 0, **payload):
        return self.messaging.Send(pb.SendRequest(topic=topic, queue_id=queue_id, **payload), timeout=CALL_TIMEOUT_S)

    def send_single(self, topic: str, queue_id: int = 0, body: bytes = b"body", **fields):
        born = fields.pop("born_timestamp_ms", 0)
        return self.send(topic, queue_id, born_timestamp_ms=born, single=pb.SingleMessage(body=body, **fields))

    def send_inner(self, topic: str, queue_id: int, messages, *, tags: str = "", codec=pb.CODEC_RMQ,
                   compression=pb.COMPRESSION_NONE, properties=None):
        """An inner batch of ``messages`` (body, properties, flag) in the MessageBatch encoding."""
        batch = pb.InnerBatch(payload=fmt.encode_message_batch(messages), count=len(messages), codec=codec,
                              compression=compression, tags=tags, properties=properties or {})
        return self.send(topic, queue_id, inner_batch=batch)

    # --- reading -------------------------------------------------------------------------------

    def read(self, ranges, max_bytes: int = 0, tag_filter: str = "") -> list["RangeRead"]:
        request = pb.ReadRangesRequest(ranges=[pb.ReadRange(topic=t, queue_id=q, start_offset=s, end_offset=e)
                                               for t, q, s, e in ranges],
                                       max_bytes=max_bytes, tag_filter=tag_filter)
        out = [RangeRead() for _ in ranges]
        expected = 0
        for response in self.messaging.ReadRanges(request, timeout=CALL_TIMEOUT_S):
            assert response.range_index == expected, "ranges are answered in order, each to its done"
            read = out[response.range_index]
            read.chunks.append(response)
            if response.done:
                read.done = response
                expected += 1
        assert expected == len(ranges), "every range gets its done response"
        return out


@dataclass
class RangeRead:
    chunks: list = field(default_factory=list)
    done: object = None

    @property
    def status(self) -> str:
        return pb.RangeStatus.Name(self.done.status)

    @property
    def next_offset(self) -> int:
        return self.done.next_offset

    @property
    def records(self) -> list:
        """The decoded records of every chunk, checked against each chunk's record_count."""
        out = []
        for chunk in self.chunks:
            decoded = split_records(chunk.records)
            assert len(decoded) == chunk.record_count
            out += decoded
        return out


def filler_batch(fill: int, size: int, count: int) -> bytes:
    """An rmq inner batch payload of exactly ``size`` bytes: ``count`` messages of ``fill`` bytes."""
    entry = size // count
    sizes = [entry] * (count - 1) + [size - entry * (count - 1)]
    return encode_message_batch([(bytes([fill]) * (n - fmt.BATCH_ENTRY_FIXED_BYTES), {}, 0) for n in sizes])


def split_records(data: bytes) -> list:
    """Decode concatenated stored records, checking each one's CRCs as recovery does."""
    out, pos = [], 0
    while pos < len(data):
        check, size, reason = fmt.check_record(data, pos, len(data))
        assert check is fmt.Check.OK, f"record at {pos}: {reason}"
        out.append(decode_record(data, pos))
        pos += size
    return out


def refusal(call, *args, **kwargs) -> tuple[grpc.StatusCode, str | None, str]:
    """Make a call that must fail: its (code, rmq-reason, details)."""
    try:
        result = call(*args, **kwargs)
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)  # a stream fails while it is read
    except grpc.RpcError as err:
        reason = dict(err.trailing_metadata() or ()).get("rmq-reason")
        return err.code(), reason, err.details()
    raise AssertionError(f"the call succeeded: {result}")


def stream_refusal(client: Client, request) -> tuple[grpc.StatusCode, str | None, str, int]:
    """A ReadRanges call that must fail: (code, reason, details, responses received before)."""
    received = 0
    try:
        for _ in client.messaging.ReadRanges(request, timeout=CALL_TIMEOUT_S):
            received += 1
    except grpc.RpcError as err:
        reason = dict(err.trailing_metadata() or ()).get("rmq-reason")
        return err.code(), reason, err.details(), received
    raise AssertionError("the stream ended without an error")
