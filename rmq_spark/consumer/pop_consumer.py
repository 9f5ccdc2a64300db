"""PopConsumer: RocketMQ's pop consumption. Stateless: the broker keeps what each group has
popped, hides it until it is acked or its invisible time passes, and then delivers it again
(through the group's retry topic, and after the maximum retries to ``%DLQ%{group}``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

import pyarrow as pa

from ..client.transport import Transport, TransportConfig
from ..codec.records import decode_records
from ..errors import (ConfigError, InvalidReceiptHandleError, ReceiptHandleError, ReceiptHandleExpiredError,
                      RmqError)
from ..protocol.v1 import pop_pb2 as pb
from ..protocol.v1 import pop_pb2_grpc
from ..structs import Delivery

log = logging.getLogger(__name__)

_POLLING_FULL_BACKOFF_S = 0.05


class PopConsumer:
    """Pops messages of ``topics`` for consumer group ``group``; safe to share between threads.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    group : str
        The consumer group: consumers of one group share the messages.
    topics : str or list of str
        Popped in turn; each topic's retry queue of the group is popped along with its queues.
    tag_filter : str
        ``"TagA || TagB"``: only messages with one of these tags (default ``"*"``: all).
    invisible_ms : int
        How long popped messages stay invisible to the group unless acked (default 30 s).
    max_messages : int
        Deliveries per pop (default 32, the broker's maximum); a BatchCQ unit is one delivery
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
        Add the ``properties`` column to the records (and fill ``ReceivedMessage.properties``).
    transport : TransportConfig, optional
        Deadlines and retries.
    """

    def __init__(self, endpoint: str, group: str, topics, *, tag_filter: str = "*", invisible_ms: int = 30_000,
                 max_messages: int = 32, poll_ms: int = 5_000, orderly: bool = False, queue_id: int = -1,
                 include_properties: bool = False, transport: TransportConfig | None = None):
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
        self.tag_filter = tag_filter or "*"
        self.invisible_ms = invisible_ms
        self.max_messages = max_messages
        self.poll_ms = poll_ms
        self.orderly = orderly
        self.queue_id = queue_id
        self.include_properties = include_properties
        self._transport = Transport(endpoint, transport)
        self._stub = pop_pb2_grpc.PopStub(self._transport.channel)
        self._next_topic = 0
        self._lock = threading.Lock()

    # --- receiving ---------------------------------------------------------------------------

    def receive(self, max_messages: int | None = None, poll_ms: int | None = None) -> list[Delivery]:
        """Pop up to ``max_messages`` deliveries; with none ready, wait up to ``poll_ms`` for new
        ones. Returns an empty list when nothing came."""
        want = self.max_messages if max_messages is None else max_messages
        poll = self.poll_ms if poll_ms is None else poll_ms
        with self._lock:
            start = self._next_topic
            self._next_topic = (start + 1) % len(self.topics)
        order = self.topics[start:] + self.topics[:start]
        for topic in order[:-1]:  # the others without waiting, the last one with long polling
            found = self._pop(topic, want, 0)
            if found:
                return found
        return self._pop(order[-1], want, poll)

    def _pop(self, topic: str, want: int, poll_ms: int) -> list[Delivery]:
        request = pb.PopRequest(group=self.group, topic=topic, queue_id=self.queue_id, max_messages=want,
                                invisible_time_ms=self.invisible_ms, poll_time_ms=poll_ms,
                                tag_filter=self.tag_filter, orderly=self.orderly)
        response = self._transport.call(self._stub.Pop, request,
                                        timeout_ms=self._transport.config.timeout_ms + poll_ms)
        if response.polling_full:
            time.sleep(_POLLING_FULL_BACKOFF_S)  # the broker has enough waiting pops; look again shortly
        if not response.deliveries:
            return []
        return self._deliveries(response)

    def _deliveries(self, response: pb.PopResponse) -> list[Delivery]:
        rows = decode_records(response.records, 0, None, self.include_properties)
        out, row = [], 0
        for d in response.deliveries:
            records = rows.slice(row, d.count)
            row += d.count
            if d.retry:  # the retry topic's rows show the topic the message was sent to
                records = records.set_column(0, records.schema.field(0), pa.array([d.topic] * d.count, pa.string()))
            out.append(Delivery(d.receipt_handle, d.topic, d.queue_id, d.offset, d.count, d.reconsume_times,
                                d.invisible_until_ms, d.retry, records))
        if row != rows.num_rows:
            raise RmqError(f"the pop answer holds {rows.num_rows} messages but its deliveries count {row}: the broker "
                           "and this client disagree on the protocol")
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
        response = self._transport.call(self._stub.Ack, pb.AckRequest(group=self.group, receipt_handles=handles),
                                         retry=False)  # a repeat would find the first attempt's acks expired
        failed = {h: r for h, r in zip(handles, response.results) if r.status != pb.ACK_OK}
        if failed:
            invalid = any(r.status == pb.ACK_INVALID for r in failed.values())
            cls = InvalidReceiptHandleError if invalid else ReceiptHandleExpiredError
            first = next(iter(failed.values())).detail
            raise cls(f"{len(failed)} of {len(handles)} receipt handles were not acked (the rest were); the first: "
                      f"{first}", failed={h: r.detail for h, r in failed.items()})

    def change_invisible_duration(self, delivery: "Delivery | str", invisible_ms: int) -> Delivery | str:
        """Make a delivery invisible for ``invisible_ms`` from now (to extend the time to work
        on it, or to see it again sooner). Returns it with its new receipt handle (a handle
        given: the new handle); the old handle stops working."""
        handle = delivery.receipt_handle if isinstance(delivery, Delivery) else delivery
        if not isinstance(invisible_ms, int) or invisible_ms < 0:
            raise ConfigError(f"invisible_ms={invisible_ms!r}: must be 0 or more milliseconds")
        response = self._transport.call(self._stub.ChangeInvisibleDuration, pb.ChangeInvisibleDurationRequest(
            group=self.group, receipt_handle=handle, invisible_time_ms=invisible_ms), retry=False)
        if isinstance(delivery, Delivery):
            return Delivery(response.receipt_handle, delivery.topic, delivery.queue_id, delivery.offset,
                            delivery.count, delivery.reconsume_times, response.invisible_until_ms, delivery.retry,
                            delivery.records)
        return response.receipt_handle

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
        while (max_deliveries is None or seen < max_deliveries) and not (stop is not None and stop.is_set()):
            left_s = None if give_up is None else give_up - time.monotonic()
            if left_s is not None and left_s <= 0:
                break
            poll = self.poll_ms if left_s is None else min(self.poll_ms, int(left_s * 1000))
            want = self.max_messages if max_deliveries is None else min(self.max_messages, max_deliveries - seen)
            deliveries = self.receive(want, poll)
            done = []
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
            if done:
                try:
                    self.ack(done)
                except ReceiptHandleError as err:  # handled, but they come back: at least once
                    log.warning("%s", err)
                finished += len(done)
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


def _handles(items) -> list[str]:
    if isinstance(items, (Delivery, str)):
        items = [items]
    return [item.receipt_handle if isinstance(item, Delivery) else item for item in items]
