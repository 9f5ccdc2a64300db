"""Sends: a message alone (SEND_MESSAGE_V2) or a batch in RocketMQ's MessageBatch encoding
(SEND_BATCH_MESSAGE, which a BatchCQ topic stores as one inner batch), each to its queue's
broker, all of a ``send_many`` in flight at once; RocketMQ's properties string."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable

from rmq_spark.client.message_ids import UniqueKeys
from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NEW_TOPIC_QUEUES, NameServers
from rmq_spark.client.remoting.versions import BATCH_CQ
from rmq_spark.client.transport import InnerBatch, Send, SendAnswer, Stored
from rmq_spark.errors import BrokerUnavailableError, ConfigError, RequestTimeoutError, RmqError
from rmq_spark.structs import Message
from rmq_wire.record import AUTO_CREATE_TOPIC
from rmq_wire.remoting import RemotingCommand, RequestCode, ResponseCode

PRODUCER_GROUP = "rocketmq-batch-producer"  # RocketMQ's sends name a producer group
STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, 11, 12)  # 11, 12: the slave's lag: stored


class Sends:
    """``check_write(codec, compression, transaction_id)``: the transport's refusal of a form it
    cannot carry; ``write_form``: the form of a send's content that names none."""

    def __init__(self, calls: Calls, names: NameServers, unique_keys: UniqueKeys, check_write: Callable,
                 write_form: tuple):
        self.calls = calls
        self.names = names
        self.unique_keys = unique_keys
        self.check_write = check_write
        self.write_form = write_form

    def send_many(self, sends: list[Send], timeout_ms: int, answer: SendAnswer) -> None:
        """Each send a request to its queue's broker, all in flight at once; ``answer`` is
        called once every one is answered or its time is over (on a connection's thread, or
        a timer's)."""
        call = _SendCall(len(sends), answer)
        for index, send in enumerate(sends):
            try:
                address, code, fields, body, ids = self._request(send)
                future = self.calls.request(address, code, fields, body)
            except RmqError as error:
                call.done(index, error)
                continue
            except (TypeError, ValueError) as error:  # e.g. a property that is not a string
                call.done(index, ConfigError(f"the message cannot be sent: {error}"))
                continue
            call.watch(index, future, lambda result, s=send, i=ids, a=address: self._stored(s, result, i, a))
        call.start(timeout_ms / 1000)

    def _request(self, send: Send):
        """(address, code, fields, body, message ids) of one send."""
        content = send.content
        form = (content.codec, content.compression) if isinstance(content, InnerBatch) else self.write_form
        self.check_write(*form, send.transaction_id)
        route = self.names.send_route(send.topic)
        broker = route.named(send.broker)
        address = route.address(broker)
        born = int(time.time() * 1000)
        fields = {"a": PRODUCER_GROUP, "b": send.topic, "c": AUTO_CREATE_TOPIC, "d": NEW_TOPIC_QUEUES,
                  "e": send.queue_id, "g": born,
                  "h": 0, "j": 0, "k": "false", "n": broker}
        if isinstance(content, Message):
            unique_key = (content.properties or {}).get("UNIQ_KEY") or self.unique_keys.next()
            properties = {**(content.properties or {}), "UNIQ_KEY": unique_key, "WAIT": "true"}
            if content.tags:
                properties["TAGS"] = content.tags
            if content.keys:
                properties["KEYS"] = content.keys
            fields.update(f=0, i=properties_text(properties), m="false")
            return address, RequestCode.SEND_MESSAGE_V2, fields, bytes(content.body), (unique_key,)
        # The batch's own UNIQ_KEY makes it one inner batch. RocketMQ 4 has none, and copies a
        # batch's properties into each of its messages, where a second UNIQ_KEY would hide each
        # message's own from RocketMQ's clients (the last one wins): it is left out there.
        properties = {"UNIQ_KEY": self.unique_keys.next()} if self.calls.broker_version(address).has(BATCH_CQ) else {}
        properties["WAIT"] = "true"
        if isinstance(content, InnerBatch) and content.tags:
            properties["TAGS"] = content.tags  # a BatchCQ unit's tag
        ids = content.message_ids  # the producer's (a list, or an Arrow array of a batch of rows)
        fields.update(f=0, i=properties_text(properties), m="true")
        return address, RequestCode.SEND_BATCH_MESSAGE, fields, bytes(content.payload), ids

    def _stored(self, send: Send, answer: RemotingCommand, ids: tuple, address: str) -> Stored | RmqError:
        if answer.code not in STORED:
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                self.names.forget(send.topic)
            return refused(answer, f"the broker at {address} refused a send to {send.topic!r} queue "
                                   f"{send.queue_id}")
        head = answer.ext_fields
        count = 1 if isinstance(send.content, Message) else send.content.count
        if len(ids) == 0:
            offset_ids = (head.get("msgId") or "").split(",")
            ids = tuple(offset_ids) if len(offset_ids) == count else tuple(f"{offset_ids[0]}-{i}" for i in range(count))
        return Stored(int(head.get("queueId", send.queue_id)), int(head.get("queueOffset", -1)), count, ids, 0)


class _SendCall:
    """The answers of one send_many: outcomes filled as requests are answered, ``answer``
    called once, when the last is in or the time is over (those left then time out)."""

    def __init__(self, count: int, answer: SendAnswer):
        self.outcomes: list = [None] * count
        self.left = count
        self.answer = answer
        self.watched: list = []
        self._started = self._finished = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def watch(self, index: int, future: Future, convert: Callable) -> None:
        self.watched.append((index, future))

        def done(f: Future) -> None:
            if f.cancelled():
                return
            error = f.exception()
            self.done(index, convert(f.result()) if error is None else BrokerUnavailableError(str(error)))
        future.add_done_callback(done)

    def start(self, timeout_s: float) -> None:
        with self._lock:
            self._started = True
            if self.left:
                self._timer = threading.Timer(timeout_s, self._expire, (timeout_s,))
                self._timer.daemon = True
                self._timer.start()
        self._finish_if_done()

    def done(self, index: int, outcome) -> None:
        with self._lock:
            if self.outcomes[index] is not None:
                return
            self.outcomes[index] = outcome
            self.left -= 1
        self._finish_if_done()

    def _expire(self, timeout_s: float) -> None:
        for index, future in self.watched:
            if future.cancel():
                self.done(index, RequestTimeoutError(f"no answer to the send within {timeout_s:.0f} s"))

    def _finish_if_done(self) -> None:
        with self._lock:
            if not self._started or self.left or self._finished:
                return
            self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        self.answer(list(self.outcomes), None)


def properties_text(properties: dict) -> str:
    """RocketMQ's properties string; names and values are strings without its separators (checked on
    the whole string: one is made per message sent alone)."""
    try:
        text = "".join([name + "\x01" + value + "\x02" for name, value in properties.items()])
    except TypeError:
        wrong = next(name for name, value in properties.items()
                     if not (isinstance(name, str) and isinstance(value, str)))
        raise TypeError(f"property {wrong!r}: names and values are strings") from None
    if text.count("\x01") != len(properties) or text.count("\x02") != len(properties):
        wrong = next(name for name, value in properties.items() if any(c in name + value for c in "\x01\x02"))
        raise ValueError(f"property {wrong!r} holds \\x01 or \\x02, RocketMQ's property separators")
    return text
