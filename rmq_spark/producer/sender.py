"""The sender: encodes batches (an inner batch on a BatchCQ topic, an early batch on a SimpleCQ
topic, a single message when alone), sends many in one SendMany call without waiting for it,
retries what failed retriably, and answers every batch; and the batch timer."""

from __future__ import annotations

import logging
import threading
import uuid
from itertools import count
from typing import Callable

import grpc

from ..client.transport import Transport
from ..codec import Codec, Compression, compress, encode_messages, rmq
from ..errors import TopicNotFoundError, error_for
from ..protocol.v1 import broker_pb2 as pb
from .accumulator import RecordAccumulator
from .batch import BatchForm, ProducerBatch, batch_form
from .config import ProducerConfig
from .routing import Router

log = logging.getLogger(__name__)

PB_CODECS = {Codec.RMQ: pb.CODEC_RMQ, Codec.ARROW: pb.CODEC_ARROW}
PB_COMPRESSIONS = {Compression.NONE: pb.COMPRESSION_NONE, Compression.LZ4: pb.COMPRESSION_LZ4,
                   Compression.ZSTD: pb.COMPRESSION_ZSTD}


class Sender:
    """Sends batches; every send is stamped with the producer's id and a sequence, so a retry
    after a lost answer is stored once (the broker answers it with the first answer)."""

    def __init__(self, transport: Transport, router: Router, accumulator: RecordAccumulator,
                 config: ProducerConfig, codec: Codec, compression: Compression):
        self.transport = transport
        self.accumulator = accumulator
        self.router = router
        self.config = config
        self.codec = codec
        self.compression = compression
        self.producer_id = uuid.uuid4().hex
        self._sequences = count()
        self._in_flight = 0  # SendMany calls of ready batches not yet answered
        self._lock = threading.Lock()
        self.transaction_id = ""  # set: every send is prepared under this transaction
        self.prepared_batches = 0
        self.prepared_messages = 0

    def send_ready(self) -> int:
        """Send the accumulator's ready batches, many per call, while fewer than
        ``max_in_flight_requests`` calls are unanswered; returns how many batches went. Batches
        that become ready while that many are out go together in a later call."""
        sent = 0
        while True:
            with self._lock:
                if self._in_flight >= self.config.max_in_flight_requests:
                    return sent
                batches = self.accumulator.drain(self.config.request_max_bytes)
                if not batches:
                    return sent
                self._in_flight += 1
            self.send(batches, self.accumulator.release, on_answered=self._call_answered)
            sent += len(batches)

    def _call_answered(self) -> None:
        # Only the slot is freed here, on gRPC's thread: the batches ready meanwhile go with the
        # next append that fills a batch, or the timer's next tick (within half a delay), so
        # encoding never holds up the thread that answers calls.
        with self._lock:
            self._in_flight -= 1

    def send(self, batches: list[ProducerBatch], release: Callable[[ProducerBatch], None] | None = None,
             on_answered: Callable[[], None] | None = None) -> None:
        """Send batches in one call without waiting. Each batch is answered (completed or
        failed) when the broker answers, then ``release(batch)`` is called, failures
        included; ``on_answered()`` once the call is answered (before retries, if any)."""
        pending = []
        for batch in batches:
            try:
                request = self._request(batch)
                pending.append((batch, request, request.SerializeToString()))
            except BaseException as error:  # e.g. the topic does not exist: this batch fails alone
                _answer(batch, error, None, release)
        if pending:
            self._call(pending, 0, release, on_answered)
        elif on_answered is not None:
            on_answered()

    def _call(self, pending: list, attempt: int, release, on_answered=None) -> None:
        request = join_sends([serialized for _, _, serialized in pending])
        try:
            call = self.transport.send_many_serialized.future(request, timeout=self.config.send_timeout_ms / 1000)
        except BaseException as error:
            for batch, _request, _serialized in pending:
                _answer(batch, error, None, release)
            if on_answered is not None:
                on_answered()
            raise
        call.add_done_callback(lambda done: self._on_answer(done, pending, attempt, release, on_answered))

    def _on_answer(self, call, pending: list, attempt: int, release, on_answered) -> None:
        try:
            self._answer_call(call, pending, attempt, release)
        finally:
            if on_answered is not None:
                on_answered()

    def _answer_call(self, call, pending: list, attempt: int, release) -> None:
        """Answer the batches of a call (on gRPC's thread); retry the retriable failures."""
        last = attempt == self.transport.config.retries
        try:
            outcomes = call.result().outcomes
        except grpc.RpcError as err:
            error = self.transport.error(err)
            if error.retriable and not last:
                self._retry(pending, attempt, release)
                return
            for batch, _request, _serialized in pending:
                _answer(batch, error, None, release)
            return
        retry = []
        for (batch, request, serialized), outcome in zip(pending, outcomes):
            if outcome.HasField("response"):
                if self.transaction_id:
                    self._count_prepared(outcome.response)
                _answer(batch, None, outcome.response, release)
                continue
            error = error_for("", outcome.error, outcome.reason)
            if error.retriable and not last:
                retry.append((batch, request, serialized))
                continue
            if isinstance(error, TopicNotFoundError):
                self.router.forget(request.topic)
            _answer(batch, error, None, release)
        if retry:
            self._retry(retry, attempt, release)

    def _retry(self, pending: list, attempt: int, release) -> None:
        """Send again after the backoff, from a timer thread (retries are rare)."""
        timer = threading.Timer(self.transport.backoff_s(attempt), self._call, (pending, attempt + 1, release))
        timer.daemon = True
        timer.start()

    def _count_prepared(self, response) -> None:
        with self._lock:  # answers arrive on gRPC's threads
            self.prepared_batches += 1
            self.prepared_messages += response.count

    def _request(self, batch: ProducerBatch) -> pb.SendRequest:
        if batch.sequence < 0:
            batch.sequence = next(self._sequences)
        topic, queue_id = batch.key.topic, batch.key.queue_id
        request = pb.SendRequest(topic=topic, queue_id=queue_id, producer_id=self.producer_id,
                                 sequence=batch.sequence, transaction_id=self.transaction_id)
        if batch.encoded is not None:
            return self._encoded_request(request, batch)
        messages = batch.messages
        if batch.alone:
            message = messages[0]
            request.single.CopyFrom(pb.SingleMessage(body=message.body, properties=message.properties,
                                                     tags=message.tags or "", keys=message.keys or ""))
            return request
        form = self.form(topic)
        if form.inner:
            tags = {m.tags for m in messages}
            batch_ = request.inner_batch
            batch_.payload = _encode(messages, form.codec, form.compression)
            batch_.count = len(messages)
            batch_.codec = PB_CODECS[form.codec]
            batch_.compression = PB_COMPRESSIONS[form.compression]
            batch_.tags = (next(iter(tags)) or "") if len(tags) == 1 else ""
        else:
            request.early_batch.payload = _encode(messages, form.codec, form.compression)
            request.early_batch.count = len(messages)
        return request


    def _encoded_request(self, request: pb.SendRequest, batch: ProducerBatch) -> pb.SendRequest:
        payload, count, codec, compression = batch.encoded
        if self.form(batch.key.topic).inner:
            request.inner_batch.CopyFrom(pb.InnerBatch(payload=payload, count=count, codec=PB_CODECS[codec],
                                                       compression=PB_COMPRESSIONS[compression],
                                                       tags=batch.key.tags or ""))
        else:
            request.early_batch.CopyFrom(pb.EarlyBatch(payload=payload, count=count))
        return request

    def form(self, topic: str) -> BatchForm:
        """How batches of ``topic`` go (``batch_form``): the route's queue type decides."""
        return batch_form(self.router.topic(topic).queue_type, self.codec, self.compression)


def _encode(messages: list, codec: Codec, compression: Compression) -> bytes:
    if codec is Codec.RMQ:  # joined from the messages' own values: no column is built for tens of rows
        return compress(rmq.encode_rows([(m.body, m.properties.items() if m.properties else None, m.keys, m.tags)
                                         for m in messages]), compression)
    return encode_messages([(m.body, m.properties, m.keys, m.tags, None) for m in messages], codec, compression)


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


def _answer(batch: ProducerBatch, error, response, release) -> None:
    try:
        if error is not None:
            batch.fail(error)
        else:
            batch.complete(response)
    finally:
        if release is not None:
            release(batch)


class BatchTimer:
    """The one background thread: every half delay it sends the batches that are old enough."""

    def __init__(self, accumulator: RecordAccumulator, sender: Sender, interval_ms: float):
        self.accumulator = accumulator
        self.sender = sender
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmq-producer-timer", daemon=True)
        self._thread.start()

    def tick(self, flush_all: bool = False) -> int:
        """Send the batches that are ready now (every open one with ``flush_all``); returns
        how many batches were sent."""
        self.accumulator.seal_aged(flush_all)
        return self.sender.send_ready()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # the sender answers batches itself; this is a bug guard
                log.exception("producer timer failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
