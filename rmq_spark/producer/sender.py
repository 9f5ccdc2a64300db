"""The sender: turns messages into Send requests (an inner batch on a BatchCQ topic, an early
batch on a SimpleCQ topic), sends them, and completes batches; and the batch timer."""

from __future__ import annotations

import logging
import threading

from ..client.transport import Transport
from ..codec import Codec, Compression, encode_messages
from ..errors import TopicNotFoundError
from ..protocol.v1 import broker_pb2 as pb
from ..structs import Message, QueueType
from .accumulator import RecordAccumulator
from .batch import ProducerBatch
from .routing import Router

log = logging.getLogger(__name__)

PB_CODECS = {Codec.RMQ: pb.CODEC_RMQ, Codec.ARROW: pb.CODEC_ARROW}
PB_COMPRESSIONS = {Compression.NONE: pb.COMPRESSION_NONE, Compression.LZ4: pb.COMPRESSION_LZ4,
                   Compression.ZSTD: pb.COMPRESSION_ZSTD}


class Sender:
    def __init__(self, transport: Transport, router: Router, codec: Codec, compression: Compression):
        self.transport = transport
        self.router = router
        self.codec = codec
        self.compression = compression

    def send_single(self, message: Message, queue_id: int) -> pb.SendResponse:
        single = pb.SingleMessage(body=message.body, properties=message.properties, tags=message.tags or "",
                                  keys=message.keys or "")
        return self._send(pb.SendRequest(topic=message.topic, queue_id=queue_id, single=single))

    def send_messages(self, topic: str, queue_id: int, messages: list[Message]) -> pb.SendResponse:
        """Send messages of one topic and queue as one batch."""
        route = self.router.topic(topic)
        rows = [(m.body, m.properties, m.keys, m.tags, None) for m in messages]
        request = pb.SendRequest(topic=topic, queue_id=queue_id)
        if route.queue_type is QueueType.BATCH_CQ:
            tags = {m.tags for m in messages}
            request.inner_batch.CopyFrom(pb.InnerBatch(
                payload=encode_messages(rows, self.codec, self.compression), count=len(messages),
                codec=PB_CODECS[self.codec], compression=PB_COMPRESSIONS[self.compression],
                tags=(next(iter(tags)) or "") if len(tags) == 1 else ""))
        else:  # the broker unpacks an early batch: RocketMQ's encoding, uncompressed
            request.early_batch.CopyFrom(pb.EarlyBatch(
                payload=encode_messages(rows, Codec.RMQ, Compression.NONE), count=len(messages)))
        return self._send(request)

    def send_batch(self, batch: ProducerBatch, accumulator: RecordAccumulator) -> None:
        """Send an accumulated batch and complete its futures; its bytes are released on every
        path, failures included."""
        try:
            response = self.send_messages(batch.key.topic, batch.key.queue_id, batch.messages)
        except BaseException as error:  # every message of the batch fails with the same error
            batch.fail(error)
        else:
            batch.complete(response.base_offset, response.message_ids, response.store_timestamp_ms,
                           response.queue_id)
        finally:
            accumulator.release(batch)

    def _send(self, request: pb.SendRequest) -> pb.SendResponse:
        try:  # not retried: a retry after a lost answer would store the messages twice
            return self.transport.call(self.transport.messaging.Send, request, retry=False)
        except TopicNotFoundError:
            self.router.forget(request.topic)
            raise


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
        """Send the batches that are ready now; returns how many."""
        batches = self.accumulator.ready(flush_all)
        for batch in batches:
            self.sender.send_batch(batch, self.accumulator)
        return len(batches)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # send_batch fails futures itself; this is a bug guard
                log.exception("producer timer failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
