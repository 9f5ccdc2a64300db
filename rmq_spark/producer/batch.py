"""A batch being filled: its messages, the futures of their results, and its one answer.

A batch holds one answer for all its messages; each message's future is a small view of it
(the batch and the message's index), so a message costs no lock, event or future of its own.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Callable, NamedTuple

from rmq_spark.errors import ResultTimeoutError
from rmq_spark.structs import InnerBatchIds, Message, QueueType, SendResult
from rmq_wire.codec import Codec, Compression

log = logging.getLogger(__name__)


class BatchKey(NamedTuple):
    """Messages are grouped by topic, queue and tag (RocketMQ's ProduceAccumulator key); a
    queue is (broker, queue id), the broker "" through our door."""

    topic: str
    queue_id: int
    tags: str | None
    broker: str = ""


class BatchForm(NamedTuple):
    """How a batch is sent: as one inner batch, or as an early batch; its payload's encoding."""

    inner: bool
    codec: Codec
    compression: Compression


# The broker unpacks an early batch into a record per message: RocketMQ's encoding, uncompressed.
EARLY_BATCH = BatchForm(False, Codec.RMQ, Compression.NONE)


def batch_form(queue_type: QueueType, codec: Codec, compression: Compression) -> BatchForm:
    """The one place that decides early versus inner batch, for messages and Arrow rows alike:
    on a BatchCQ topic one inner batch (one stored record and index unit, one tag) in the
    producer's codec and compression; on a SimpleCQ topic an early batch (a record and an index
    unit per message, each with its own tag)."""
    return BatchForm(True, codec, compression) if queue_type is QueueType.BATCH_CQ else EARLY_BATCH


class ProducerBatch:
    """Messages of one key that go out together, and their shared answer.

    ``alone``: one message sent as a single message (not as a batch of one). ``encoded``:
    a payload made from columns, sent as it is (``messages`` is then empty). ``sequence`` is
    the producer's stamp, given when the batch is first encoded; retries reuse it, so the
    broker stores the batch once.
    """

    __slots__ = ("key", "created_ms", "messages", "body_bytes", "alone", "encoded", "sequence", "deadline_ms",
                 "attempts", "maybe_stored", "refusal", "response", "error", "_finished", "_callbacks", "_indexes",
                 "_lock")

    def __init__(self, key: BatchKey, created_ms: float = 0.0, alone: bool = False):
        self.key = key
        self.created_ms = created_ms
        self.messages: list[Message] = []
        self.body_bytes = 0
        self.alone = alone
        self.encoded = None  # (payload, count, codec, compression): rows encoded by columns.py
        self.sequence = -1
        self.deadline_ms = 0.0  # when its delivery timeout runs out: set at its first attempt
        self.attempts = 0
        self.maybe_stored = False  # an attempt ended without the broker's word (a timeout, a lost answer)
        self.refusal = None  # the last attempt the broker refused (told why, nothing stored)
        self.response = None  # where the broker stored it: the transport's Stored
        self.error: BaseException | None = None
        self._finished = threading.Event()
        # Callbacks, and the index of each one's message (None: a batch-level callback): two
        # lists rather than a tuple per message, which the garbage collector would track.
        self._callbacks: list[Callable] = []
        self._indexes: list[int | None] = []
        self._lock = threading.Lock()

    @classmethod
    def of(cls, key: BatchKey, messages: list[Message], alone: bool = False) -> "ProducerBatch":
        batch = cls(key, alone=alone)
        for message in messages:
            batch.append(message)
        return batch

    def append(self, message: Message, callback=None) -> "SendFuture":
        """Add a message, and its ``callback(result, error)``; the batch is not sent yet, so
        no lock of its own is needed (the accumulator's is held)."""
        index = len(self.messages)
        self.messages.append(message)
        self.body_bytes += len(message.body)
        if callback is not None:
            self._callbacks.append(callback)
            self._indexes.append(index)
        return new_future((self, index))

    def age_ms(self, now_ms: float) -> float:
        return now_ms - self.created_ms

    # --- the answer ------------------------------------------------------------------------

    def complete(self, response) -> None:
        self.response = response
        self._finish()

    def fail(self, error: BaseException) -> None:
        """Every message of the batch fails with the same error."""
        self.error = error
        self._finish()

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout_s: float | None) -> bool:
        return self._finished.wait(timeout_s)

    def result_of(self, index: int) -> SendResult:
        return self._results_of([index])[0]

    def results(self) -> list[SendResult]:
        """Every message's result; raises the batch's error if it failed."""
        if self.error is not None:
            raise self.error
        return self._results_of(range(len(self.messages)))

    def _results_of(self, indexes) -> list[SendResult]:
        """The results of the messages at ``indexes``, made together: one is made for every
        message sent with a callback, so each costs a tuple and its id, not method calls."""
        response, topic, broker = self.response, self.key.topic, self.key.broker
        queue_id, stored_ms, ids = response.queue_id, response.store_timestamp_ms, response.message_ids
        if not ids:  # prepared under a transaction: offsets come at the commit
            return [_new_result((topic, queue_id, -1, "", stored_ms, broker)) for _ in indexes]
        base = response.base_offset
        named = ids.at(indexes) if isinstance(ids, InnerBatchIds) else [ids[i] for i in indexes]
        return [_new_result((topic, queue_id, base + i, message_id, stored_ms, broker))
                for i, message_id in zip(indexes, named)]

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once the batch is answered (now, if it is); in the order added."""
        with self._lock:
            if not self._finished.is_set():
                self._callbacks.append(callback)
                self._indexes.append(None)
                return
        self._run(callback, None)

    def _finish(self) -> None:
        with self._lock:
            self._finished.set()
            callbacks, indexes, self._callbacks, self._indexes = self._callbacks, self._indexes, [], []
        if self.error is None and callbacks and None not in indexes:  # the common case: a callback per message
            for callback, result in zip(callbacks, self._results_of(indexes)):
                try:  # _run, written out: a call per message less
                    callback(result, None)
                except Exception:
                    log.exception("a send callback failed")
            return
        for callback, index in zip(callbacks, indexes):
            self._run(callback, index)

    def _run(self, callback, index: int | None) -> None:
        """A message's ``callback(result, error)`` (``index``: the message's), or a
        batch-level ``callback()``."""
        if index is None:
            _run(callback)
        elif self.error is not None:
            _run(callback, None, self.error)
        else:
            _run(callback, self.result_of(index), None)


def _run(callback, *args) -> None:
    """Run a callback; one that raises must not stop the others, nor the sender."""
    try:
        callback(*args)
    except Exception:
        log.exception("a send callback failed")


# SendResult((...)) without the Python-level __new__ of a NamedTuple: a result per message sent.
_new_result = functools.partial(tuple.__new__, SendResult)


class SendFuture(tuple):
    """The future of one message's ``SendResult``: ``result(timeout)``, ``exception(timeout)``,
    ``done()`` and ``add_done_callback(fn)`` as ``concurrent.futures.Future``'s. (A tuple of its
    batch and its message's index: one is made per message sent, ``new_future``, without a
    Python-level ``__init__``.)"""

    __slots__ = ()

    def __new__(cls, batch: ProducerBatch, index: int):
        return tuple.__new__(cls, (batch, index))

    @property
    def _batch(self) -> ProducerBatch:
        return self[0]

    @property
    def _index(self) -> int:
        return self[1]

    def done(self) -> bool:
        return self._batch.finished

    def result(self, timeout: float | None = None) -> SendResult:
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._batch.result_of(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait(timeout):
            raise ResultTimeoutError(f"no answer for the message's batch within {timeout} s; the send goes on: "
                                     "wait again, or flush() the producer")
        return self._batch.error

    def add_done_callback(self, fn: Callable[["SendFuture"], None]) -> None:
        self._batch.add_callback(lambda: fn(self))


new_future = functools.partial(tuple.__new__, SendFuture)  # SendFuture((batch, index)), the quick way
