"""PopConsumer: RocketMQ's pop consumption. Stateless: the broker keeps what each group has
popped, hides it until it is acked or its invisible time passes, and then delivers it again
(through the group's retry topic, and after the maximum retries to ``%DLQ%{group}``)."""

from __future__ import annotations

import logging
import struct
import threading
import time
from typing import Callable, Iterable

import pyarrow as pa

from rmq_spark.client.connect import connect
from rmq_spark.client.transport import Popped, PopQuery, TransportConfig
from rmq_spark.consumer.tag_filter import normalize_tag_filter
from rmq_spark.errors import (
    ConfigError,
    InvalidReceiptHandleError,
    ReceiptHandleError,
    ReceiptHandleExpiredError,
    RmqError,
    UndecodableBatchError,
)
from rmq_spark.structs import ReceivedMessage
from rmq_wire.codec.properties import SYSTEM_PROPERTIES
from rmq_wire.codec.records import RecordFormatError, decode_records
from rmq_wire.record import HEADER, PROPERTY_KEYS, PROPERTY_TAGS, SysFlag, decode_properties

log = logging.getLogger(__name__)

_POLLING_FULL_BACKOFF_S = 0.05


class PopConsumer:
    """Pops messages of ``topics`` for consumer group ``group``; safe to share between threads.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of broker_sim's own door.
    group : str
        The consumer group: consumers of one group share the messages.
    topics : str or list of str
        Popped in turn; each topic's retry queue of the group is popped along with its queues.
    tag_filter : str
        ``"TagA || TagB"``: only messages with one of these tags (default ``"*"``: all); read
        as RocketMQ reads it (``normalize_tag_filter``).
    invisible_ms : int
        How long popped messages stay invisible to the group unless acked (default 30 s).
    max_messages : int
        Deliveries per pop (default 32, RocketMQ's maximum; broker_sim's is 1024: a pop call
        costs about as much as a few dozen SimpleCQ messages). A BatchCQ unit is one delivery
        carrying its whole batch.
    poll_ms : int
        Long polling: with nothing to pop, how long a ``receive`` waits on the broker for new
        messages (default 5 s; 0 answers at once).
    orderly : bool
        Orderly pop: a queue with invisible messages gives nothing else until they are acked
        or expire; expired ones come again first, with one more reconsume.
    queue_id : int
        Pop this queue only (default -1: every queue of each topic, in turn).
    include_properties : bool
        Add the ``properties`` column to ``Delivery.records`` (``Delivery.messages()`` always
        has them).
    transport : TransportConfig, optional
        Deadlines, retries and TLS.
    name_server : str
        Instead of ``endpoint``: RocketMQ's name servers, ``HOST:PORT;HOST:PORT``, popping
        through RocketMQ 5's pop over remoting (its brokers in turn, for a topic served by
        several; RocketMQ 5's broker needs ``timerWheelEnable``).
    """

    def __init__(self, endpoint: str | None = None, group: str = "", topics=None, *, tag_filter: str = "*",
                 invisible_ms: int = 30_000, max_messages: int = 32, poll_ms: int = 5_000, orderly: bool = False,
                 queue_id: int = -1, include_properties: bool = False, transport: TransportConfig | None = None,
                 name_server: str | None = None):
        topics = [topics] if isinstance(topics, str) else list(topics or [])
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise ConfigError(f"topics={topics!r}: name one topic or a list of topics")
        if not isinstance(group, str) or not group:
            raise ConfigError("group is empty: name the consumer group")
        for name, value in (("invisible_ms", invisible_ms), ("max_messages", max_messages)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r}: must be a positive integer")
        if not isinstance(poll_ms, int) or poll_ms < 0:
            raise ConfigError(f"poll_ms={poll_ms!r}: must be 0 or more milliseconds")
        if len(topics) > 1 and queue_id != -1:
            raise ConfigError(f"queue_id={queue_id} names one queue, but {len(topics)} topics are given: pop one "
                              "topic, or every queue (-1)")
        self.group = group
        self.topics = topics
        self.tag_filter = normalize_tag_filter(tag_filter) or "*"
        self.invisible_ms = invisible_ms
        self.max_messages = max_messages
        self.poll_ms = poll_ms
        self.orderly = orderly
        self.queue_id = queue_id
        self.include_properties = include_properties
        self._transport = connect(endpoint, transport, name_server=name_server)
        self._next_topic = 0
        self._lock = threading.Lock()

    # --- receiving ---------------------------------------------------------------------------

    def receive(self, max_messages: int | None = None, poll_ms: int | None = None,
                ack: "Delivery | str | Iterable[Delivery | str] | None" = None) -> list[Delivery]:
        """Pop up to ``max_messages`` deliveries; with none ready, wait up to ``poll_ms`` for new
        ones. Returns an empty list when nothing came.

        ``ack``: deliveries (or receipt handles) finished since the last receive, acked by the
        broker before it pops, in the same call (one call a round instead of two; through
        RocketMQ's remoting, a batch ack first). Handles that could not be acked are logged, as
        ``consume`` logs them (their messages come back after their invisible time: at least
        once); call ``ack`` to have them raised instead."""
        want = self.max_messages if max_messages is None else max_messages
        poll = self.poll_ms if poll_ms is None else poll_ms
        carried = tuple(_handles(ack)) if ack is not None else ()
        with self._lock:
            start = self._next_topic
            self._next_topic = (start + 1) % len(self.topics)
        order = self.topics[start:] + self.topics[:start]
        for topic in order[:-1]:  # the others without waiting, the last one with long polling
            found, carried = self._pop(topic, want, 0, carried), ()
            if found:
                return found
        return self._pop(order[-1], want, poll, carried)

    def _pop(self, topic: str, want: int, poll_ms: int, acks: tuple = ()) -> list[Delivery]:
        query = PopQuery(self.group, topic, self.queue_id, want, self.invisible_ms, poll_ms, self.tag_filter,
                         self.orderly, acks)
        try:
            popped = self._transport.pop(query)
        except RmqError as err:
            if not acks or not err.retriable:
                raise
            # not sent again with the acks (a repeat would find them acked and say "expired")
            log.warning("a pop carrying %d acks failed (%s): if they were not acked, their messages come back after "
                        "their invisible time; popping again without them", len(acks), err)
            popped = self._transport.pop(query._replace(ack_handles=()))
        if popped.ack_failures:
            first = popped.ack_failures[0]
            log.warning("%d of %d receipt handles carried by a pop were not acked (the rest were; theirs come back): "
                        "the first, %s: %s", len(popped.ack_failures), len(acks), acks[first.index], first.detail)
        if popped.polling_full:
            time.sleep(_POLLING_FULL_BACKOFF_S)  # the broker has enough waiting pops; look again shortly
        if not popped.receipt_handles:
            return []
        return self._deliveries(popped)

    def _deliveries(self, popped: Popped) -> list[Delivery]:
        records = popped.records
        answer = _Answer(records, self.include_properties, popped.topic)
        topic, until, out, row, at = popped.topic, popped.invisible_until_ms, [], 0, 0
        for handle, queue_id, offset, count, reconsume, retry, size in zip(
                popped.receipt_handles, popped.queue_ids, popped.offsets, popped.counts,
                popped.reconsume_times, popped.retry, popped.record_bytes):
            out.append(Delivery(handle, topic, queue_id, offset, count, reconsume, until, retry, answer, row, at, size,
                                popped.broker))
            row += count
            at += size
        if at != len(records):
            raise RmqError(f"the pop answer holds {len(records)} bytes of records but its deliveries count "
                           f"{at}: the broker and this client disagree on the protocol")
        answer.rows = row
        return out

    # --- acking ------------------------------------------------------------------------------

    def ack(self, deliveries: "Delivery | str | Iterable[Delivery | str]") -> None:
        """Ack deliveries (or receipt handles), all in one call: they are not delivered again.

        Raises ReceiptHandleExpiredError (or InvalidReceiptHandleError, for handles the broker
        did not issue to this group) naming the handles that failed; the others were acked.
        """
        handles = _handles(deliveries)
        if not handles:
            return
        failures = self._transport.ack(self.group, handles)
        if failures:
            invalid = any(f.invalid for f in failures)
            cls = InvalidReceiptHandleError if invalid else ReceiptHandleExpiredError
            raise cls(f"{len(failures)} of {len(handles)} receipt handles were not acked (the rest were); the first: "
                      f"{failures[0].detail}", failed={handles[f.index]: f.detail for f in failures})

    def change_invisible_duration(self, delivery: "Delivery | str", invisible_ms: int) -> Delivery | str:
        """Make a delivery invisible for ``invisible_ms`` from now (to extend the time to work
        on it, or to see it again sooner). Returns it with its new receipt handle (a handle
        given: the new handle); the old handle stops working."""
        handle = delivery.receipt_handle if isinstance(delivery, Delivery) else delivery
        if not isinstance(invisible_ms, int) or invisible_ms < 0:
            raise ConfigError(f"invisible_ms={invisible_ms!r}: must be 0 or more milliseconds")
        new_handle, invisible_until_ms = self._transport.change_invisible(self.group, handle, invisible_ms)
        if isinstance(delivery, Delivery):
            return delivery._moved(new_handle, invisible_until_ms)
        return new_handle

    # --- a consume loop ----------------------------------------------------------------------

    def consume(self, handler: Callable[[Delivery], object], *, max_deliveries: int | None = None,
                timeout_s: float | None = None, stop: threading.Event | None = None,
                retry_delay_ms: int | None = None) -> int:
        """Receive and hand each delivery to ``handler``; ack what it finishes (returns from),
        leave what it fails on (raises) to come back after its invisible time, or after
        ``retry_delay_ms`` when given. Runs until ``max_deliveries`` were handled, ``timeout_s``
        passed or ``stop`` is set (at least one of them is needed). Returns how many
        deliveries the handler finished.
        """
        if max_deliveries is None and timeout_s is None and stop is None:
            raise ConfigError("consume needs an end: pass max_deliveries, timeout_s or stop")
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        finished = 0
        seen = 0
        done: list[Delivery] = []  # finished since the last pop: acked by the next one
        while (max_deliveries is None or seen < max_deliveries) and not (stop is not None and stop.is_set()):
            left_s = None if give_up is None else give_up - time.monotonic()
            if left_s is not None and left_s <= 0:
                break
            poll = self.poll_ms if left_s is None else min(self.poll_ms, int(left_s * 1000))
            want = self.max_messages if max_deliveries is None else min(self.max_messages, max_deliveries - seen)
            deliveries, done = self.receive(want, poll, ack=done), []
            for delivery in deliveries:
                seen += 1
                try:
                    handler(delivery)
                except Exception:
                    log.warning("handler failed on %s queue %d offset %d (reconsume %d); it comes back later",
                                delivery.topic, delivery.queue_id, delivery.offset, delivery.reconsume_times,
                                exc_info=True)
                    if retry_delay_ms is not None:
                        self._retry_later(delivery, retry_delay_ms)
                else:
                    done.append(delivery)
            finished += len(done)
        if done:  # the last round's: no pop to carry them
            try:
                self.ack(done)
            except ReceiptHandleError as err:  # handled, but they come back: at least once
                log.warning("%s", err)
        return finished

    def _retry_later(self, delivery: Delivery, delay_ms: int) -> None:
        try:
            self.change_invisible_duration(delivery, delay_ms)
        except RmqError as err:
            log.warning("could not shorten the invisible time of a failed delivery: %s", err)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "PopConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Delivery:
    """One pop delivery: a message of a SimpleCQ topic, or a BatchCQ unit with its whole batch.

    Attributes
    ----------
    receipt_handle : str
        Acks it (``PopConsumer.ack``), or changes its invisible time.
    topic : str
        The topic it was sent to (also when it came from the group's retry queue).
    queue_id, offset : int
        Where it was popped: its queue and (base) offset there; the retry queue's when ``retry``.
    count : int
        Messages it carries: 1, or the batch size of a BatchCQ unit.
    reconsume_times : int
        Deliveries of it before this one.
    invisible_until_ms : int
        When it is delivered again unless acked (ms since the epoch, the broker's clock).
    retry : bool
        It came from the group's retry queue.
    broker : str
        The broker it was popped from, through name servers ("" through our door).
    records : pyarrow.RecordBatch
        Its messages in the read schema (``RangeReader``'s; decoded on first use, for the whole
        pop at once).
        Raises UndecodableBatchError for a stored batch that does not decode (the pop's other
        deliveries are not affected): ack it to drop it, or let it come back and, past the
        group's maximum retries, go to its DLQ, as any delivery whose consumption fails.
    """

    __slots__ = ("receipt_handle", "topic", "queue_id", "offset", "count", "reconsume_times", "invisible_until_ms",
                 "retry", "broker", "_answer", "_row", "_at", "_size")

    def __init__(self, receipt_handle: str, topic: str, queue_id: int, offset: int, count: int, reconsume_times: int,
                 invisible_until_ms: int, retry: bool, answer: "_Answer", row: int, at: int, size: int,
                 broker: str = ""):
        self.receipt_handle = receipt_handle
        self.topic = topic
        self.queue_id = queue_id
        self.offset = offset
        self.count = count
        self.reconsume_times = reconsume_times
        self.invisible_until_ms = invisible_until_ms
        self.retry = retry
        self.broker = broker
        self._answer, self._row, self._at, self._size = answer, row, at, size

    @property
    def records(self) -> pa.RecordBatch:
        records = self._answer.rows_of(self)
        if self.retry:  # the retry queue's rows show the topic the message was sent to
            records = records.set_column(0, records.schema.field(0), pa.repeat(pa.scalar(self.topic), self.count))
        return records.add_column(1, pa.field("broker", pa.string()),
                                  pa.repeat(pa.scalar(self.broker or None, pa.string()), self.count))

    def messages(self) -> list[ReceivedMessage]:
        """Its messages as structs (user properties only)."""
        single = _single_message(self._answer.data, self._at, self)
        if single is not None:
            return [single]
        columns = self._answer.rows_of(self, with_properties=True).to_pydict()
        return [ReceivedMessage(self.topic, columns["queue_id"][i], columns["queue_offset"][i], columns["body"][i],
                                columns["tags"][i], columns["keys"][i], _ms(columns["born_timestamp"][i]),
                                _ms(columns["store_timestamp"][i]), self.reconsume_times, self.receipt_handle,
                                dict(columns["properties"][i] or ()), self.broker) for i in range(self.count)]

    def _moved(self, receipt_handle: str, invisible_until_ms: int) -> "Delivery":
        return Delivery(receipt_handle, self.topic, self.queue_id, self.offset, self.count, self.reconsume_times,
                        invisible_until_ms, self.retry, self._answer, self._row, self._at, self._size, self.broker)

    def __repr__(self) -> str:
        return (f"Delivery(topic={self.topic!r}, queue_id={self.queue_id}, offset={self.offset}, count={self.count}, "
                f"reconsume_times={self.reconsume_times}, retry={self.retry})")


class _Answer:
    """The records of one pop answer, decoded into Arrow once (with or without the properties
    column), when first asked for."""

    __slots__ = ("data", "include_properties", "topic", "rows", "_decoded", "_lock")

    def __init__(self, data: bytes, include_properties: bool, topic: str):
        self.data = data
        self.include_properties = include_properties
        self.topic = topic
        self.rows = 0
        self._decoded: dict[bool, pa.RecordBatch | None] = {}
        self._lock = threading.Lock()

    def rows_of(self, delivery: Delivery, with_properties: bool | None = None) -> pa.RecordBatch:
        """The delivery's messages: a slice of the whole answer decoded, or, when some record
        of the answer does not decode, its own records decoded alone."""
        with_properties = self.include_properties if with_properties is None else with_properties
        whole = self._decoded_whole(with_properties)
        if whole is not None:
            return whole.slice(delivery._row, delivery.count)
        try:
            return decode_records(self.data[delivery._at:delivery._at + delivery._size], 0, None, with_properties)
        except RecordFormatError as err:
            raise UndecodableBatchError(
                f"{delivery.topic} queue {delivery.queue_id}: the stored batch at offsets {delivery.offset} to "
                f"{delivery.offset + delivery.count - 1} does not decode ({err}). Ack it to drop it, or leave it: it "
                "comes back after its invisible time and, past the group's maximum retries, goes to its DLQ") from None

    def _decoded_whole(self, with_properties: bool) -> pa.RecordBatch | None:
        """Every record of the answer decoded at once; None when some record does not decode."""
        with self._lock:
            if with_properties not in self._decoded:
                try:
                    batch = decode_records(self.data, 0, None, with_properties)
                except RecordFormatError:
                    batch = None
                if batch is not None and batch.num_rows != self.rows:
                    raise RmqError(f"the pop answer holds {batch.num_rows} messages but its deliveries count "
                                   f"{self.rows}: the broker and this client disagree on the protocol")
                self._decoded[with_properties] = batch
            return self._decoded[with_properties]


def _single_message(data: memoryview, at: int, delivery: Delivery) -> ReceivedMessage | None:
    """The message of a single-message record, decoded in Python (cheaper than Arrow for one);
    None for an inner batch."""
    (_total, _magic, _crc, queue_id, _flag, queue_offset, _physical, sys_flag, born, _born_host, stored, _store_host,
     _reconsume, _prepared, body_length) = HEADER.unpack_from(data, at)
    if sys_flag & (SysFlag.INNER_BATCH | SysFlag.COMPRESSED):  # a batch, or a body to decompress: the Arrow path
        return None
    body_at = at + HEADER.size
    topic_at = body_at + body_length
    props_at = topic_at + 1 + data[topic_at] + 2
    (props_length,) = struct.unpack_from(">h", data, props_at - 2)
    properties = decode_properties(data[props_at:props_at + props_length])
    tags, keys = properties.get(PROPERTY_TAGS), properties.get(PROPERTY_KEYS)
    user = {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTIES}
    return ReceivedMessage(delivery.topic, queue_id, queue_offset, bytes(data[body_at:topic_at]), tags, keys, born,
                           stored, delivery.reconsume_times, delivery.receipt_handle, user, delivery.broker)


def _ms(value) -> int:
    return 0 if value is None else int(value.timestamp() * 1000)


def _handles(items) -> list[str]:
    if isinstance(items, (Delivery, str)):
        items = [items]
    return [item.receipt_handle if isinstance(item, Delivery) else item for item in items]
