"""The Producer facade: single messages and batches, sent as the topic's queue type wants."""

from __future__ import annotations

from ..client.transport import Transport, TransportConfig
from ..codec import Codec, Compression, encode_messages
from ..errors import ClosedError, ConfigError, TopicNotFoundError
from ..protocol.v1 import broker_pb2 as pb
from ..structs import Message, QueueType, SendResult
from .routing import Router

PB_CODECS = {Codec.RMQ: pb.CODEC_RMQ, Codec.ARROW: pb.CODEC_ARROW}
PB_COMPRESSIONS = {Compression.NONE: pb.COMPRESSION_NONE, Compression.LZ4: pb.COMPRESSION_LZ4,
                   Compression.ZSTD: pb.COMPRESSION_ZSTD}


class Producer:
    """Sends messages to one broker.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    codec : {"rmq", "arrow"}
        Encoding of batches sent to BatchCQ topics (default "rmq", RocketMQ's MessageBatch).
    compression : {"none", "lz4", "zstd"}
        Compression of those batches, over the whole payload (default "none").
    queue_selector : {"hash", "round_robin"}
        How a queue is chosen when a message names none (see ``Router``).
    transport : TransportConfig, optional
        Deadlines and retries. Sends are not retried: a retry after a lost answer would store
        the message twice.
    """

    def __init__(self, endpoint: str, *, codec: str = "rmq", compression: str = "none",
                 queue_selector: str = "hash", transport: TransportConfig | None = None):
        try:
            self.codec = Codec.parse(codec)
            self.compression = Compression.parse(compression)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self._transport = Transport(endpoint, transport)
        self._router = Router(self._transport, queue_selector)
        self._closed = False

    def send(self, message: Message) -> SendResult:
        """Send one message; returns where it was stored."""
        self._check_open()
        route, queue_id = self._router.queue_for(message)
        single = pb.SingleMessage(body=message.body, properties=message.properties, tags=message.tags or "",
                                  keys=message.keys or "")
        response = self._send(pb.SendRequest(topic=message.topic, queue_id=queue_id, single=single))
        return SendResult(message.topic, response.queue_id, response.base_offset, response.message_ids[0],
                          response.store_timestamp_ms)

    def send_batch(self, messages: list[Message]) -> list[SendResult]:
        """Send messages of one topic to one queue as one batch: one inner batch (one stored
        record) on a BatchCQ topic, an early batch (a record per message) on a SimpleCQ topic.
        The queue is the first message's (its queue_id, or the selector's choice)."""
        self._check_open()
        if not messages:
            raise ConfigError("send_batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ConfigError(f"a batch goes to one topic; got {sorted({m.topic for m in messages})}")
        route, queue_id = self._router.queue_for(messages[0])
        rows = [(m.body, m.properties, m.keys, m.tags, None) for m in messages]
        request = pb.SendRequest(topic=topic, queue_id=queue_id)
        if route.queue_type is QueueType.BATCH_CQ:
            tags = {m.tags for m in messages}
            request.inner_batch.CopyFrom(pb.InnerBatch(
                payload=encode_messages(rows, self.codec, self.compression), count=len(messages),
                codec=PB_CODECS[self.codec], compression=PB_COMPRESSIONS[self.compression],
                tags=(next(iter(tags)) or "") if len(tags) == 1 else ""))
        else:
            request.early_batch.CopyFrom(pb.EarlyBatch(
                payload=encode_messages(rows, Codec.RMQ, Compression.NONE), count=len(messages)))
        response = self._send(request)
        return [SendResult(topic, response.queue_id, response.base_offset + i, message_id,
                           response.store_timestamp_ms) for i, message_id in enumerate(response.message_ids)]

    def _send(self, request: pb.SendRequest) -> pb.SendResponse:
        try:
            return self._transport.call(self._transport.messaging.Send, request, retry=False)
        except TopicNotFoundError:
            self._router.forget(request.topic)
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the producer is closed: create a new one to send")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._transport.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
