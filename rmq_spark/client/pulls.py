"""Range reads over RocketMQ's remoting protocol: each range is read by PULL_MESSAGE requests
from its start (the next from where the last one ended, ``nextBeginOffset``), ranges side by
side, up to ``MAX_IN_FLIGHT`` pulls in flight on the brokers' connections. Each answer's
records (the stored records, inner batches whole) become a ``RangeChunk``, as our door's
ReadRanges streams them, so that the range reader is the same over both protocols.

A broker that cannot be reached (restarting, say) is asked again, with backoff, until the
read's deadline (the transport's ``timeout_ms``): a read waits for it rather than fail.

A pull answered with no records but a ``nextBeginOffset`` past its offset has stepped over
offsets. Over messages its tag filter left out (remark NO_MATCHED_MESSAGE), that is a read;
otherwise the broker could not serve them (RocketMQ's MESSAGE_WAS_REMOVING / OFFSET_FOUND_NULL:
the commitlog or the index is gone under them; broker_sim's sentence: a damaged record), and
the range ends RECORD_CORRUPTED naming them, as our door's ReadRanges does, for the range
reader to fail or skip as its ``on_data_loss`` says, never read on past them silently.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from rmq_spark.client.transport import RangeChunk, ReadStatus
from rmq_spark.errors import BrokerUnavailableError, CodecError, RequestTimeoutError
from rmq_wire.codec._bytes import ChainError, entry_starts
from rmq_wire.record import FIXED_BYTES
from rmq_wire.remoting import RequestCode, ResponseCode

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # the remark of a pull whose records the filter all left out
MAX_MESSAGES = 32767  # a pull's maxMsgNums: the broker stops at its byte (and count) limit first
PULL_SUBSCRIPTION = 0x4  # PullSysFlag: the request carries its subscription (a tag filter)


@dataclass
class _Range:
    """A range being pulled: where the next pull starts, and how it ended."""

    index: int
    topic: str
    broker: str
    queue_id: int
    address: str
    next_offset: int
    end: int | None
    read_any: bool = False
    min_offset: int = 0
    max_offset: int = 0
    status: ReadStatus | None = None  # set when the range is done
    skipped_from: int = 0  # RECORD_CORRUPTED: offsets skipped_from .. next_offset - 1 were not served
    detail: str = ""  # and why, as the broker said
    retry_at: float = 0.0  # its broker could not be reached: not asked again before this (monotonic)
    failures: int = 0


class Pulls:
    def __init__(self, transport):
        self.transport = transport

    def read(self, ranges: Sequence, max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        """``Transport.read_ranges``: chunks of each range's records as the pulls are answered
        (a range's in order), then a done chunk per range; at most about ``max_bytes`` in all
        (a range the budget stopped ends FOUND where it got to, or BUDGET_EXHAUSTED)."""
        states = [self._state(index, r) for index, r in enumerate(ranges)]
        ready = list(reversed(states))  # popped from the end: in order
        answers: queue.Queue = queue.Queue()
        in_flight, received = 0, 0
        deadline = time.monotonic() + self.transport.config.timeout_ms / 1000
        while True:
            while ready and in_flight < MAX_IN_FLIGHT and received < max_bytes:
                state = self._next_due(ready)
                if state is None:
                    break
                try:
                    self._pull(state, tag_filter, answers)
                    in_flight += 1
                except BrokerUnavailableError as err:
                    self._unreachable(state, err, deadline, ready)
            if not in_flight:
                if ready and received < max_bytes:  # only ranges of brokers that cannot be reached now
                    time.sleep(max(0.0, min(s.retry_at for s in ready) - time.monotonic()))
                    continue
                break
            state, future = answers.get()
            in_flight -= 1
            try:
                answer = self.transport.wait(future, state.address, RequestCode.PULL_MESSAGE)
            except (BrokerUnavailableError, RequestTimeoutError) as err:
                self._unreachable(state, err, deadline, ready)
                continue
            state.failures = 0
            chunk = self._apply(state, answer)
            if chunk is not None:
                received += len(chunk.records)
                yield chunk
            if state.status is None:
                ready.append(state)
            else:
                yield self._done(state)
        for state in reversed(ready):  # stopped by the budget
            state.status = ReadStatus.FOUND if state.read_any else ReadStatus.BUDGET_EXHAUSTED
            yield self._done(state)

    @staticmethod
    def _next_due(ready: list) -> _Range | None:
        """The next range whose broker may be asked now (ranges in order otherwise)."""
        now = time.monotonic()
        for at in range(len(ready) - 1, -1, -1):
            if ready[at].retry_at <= now:
                return ready.pop(at)
        return None

    def _unreachable(self, state: _Range, error, deadline: float, ready: list) -> None:
        """A pull's broker could not be reached: ask again after a backoff, or raise at the deadline."""
        if time.monotonic() >= deadline:
            raise error
        if not state.failures:
            log.warning("broker %s (%s) cannot be reached (%s); its pulls are retried until the read's deadline",
                        state.broker, state.address, error)
        state.retry_at = time.monotonic() + self.transport.backoff_s(min(state.failures, 5))
        state.failures += 1
        ready.append(state)

    def _state(self, index: int, r) -> _Range:
        route = self.transport.route(r.topic)
        broker = self.transport.broker_of(route, getattr(r, "broker", ""))
        return _Range(index, r.topic, broker, r.queue_id, route.address(broker), r.start, r.end)

    def _pull(self, state: _Range, tag_filter: str, answers: queue.Queue) -> None:
        wanted = MAX_MESSAGES if state.end is None else max(1, min(MAX_MESSAGES, state.end - state.next_offset))
        fields = {"consumerGroup": self.transport.pull_group, "topic": state.topic, "queueId": state.queue_id,
                  "queueOffset": state.next_offset, "maxMsgNums": wanted, "sysFlag": PULL_SUBSCRIPTION,
                  "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": tag_filter or "*",
                  "subVersion": int(time.time() * 1000), "expressionType": "TAG"}
        future = self.transport.request(state.address, RequestCode.PULL_MESSAGE, fields)
        future.add_done_callback(lambda done: answers.put((state, done)))

    def _apply(self, state: _Range, answer) -> RangeChunk | None:
        """Move the range by a pull's answer; the chunk of its records, if any."""
        head = answer.ext_fields
        state.min_offset = int(head.get("minOffset", state.min_offset))
        state.max_offset = int(head.get("maxOffset", state.max_offset))
        if state.end is None and answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY,
                                                 ResponseCode.PULL_NOT_FOUND):
            state.end = state.max_offset  # "up to what is stored": pinned at the first answer
        if answer.code == ResponseCode.SUCCESS:
            state.read_any = True
            return self._found(state, answer)
        if answer.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND):
            next_offset = int(head.get("nextBeginOffset", state.next_offset))
            if next_offset > state.next_offset and answer.remark != NO_MATCHED_MESSAGE:
                self._skipped(state, next_offset, answer.remark or "no remark")
                return None
        if answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY:  # read, but nothing passed the filter
            state.read_any = True
            self._move(state, int(head["nextBeginOffset"]))
            return None
        if answer.code == ResponseCode.PULL_NOT_FOUND:  # nothing (more) stored at the offset
            state.status = ReadStatus.FOUND if state.read_any else ReadStatus.NO_MESSAGE
            return None
        if answer.code == ResponseCode.PULL_OFFSET_MOVED and not state.read_any:
            if state.next_offset < state.min_offset:
                state.status, state.next_offset = ReadStatus.OFFSET_TOO_SMALL, state.min_offset
            else:
                state.status, state.next_offset = ReadStatus.OFFSET_OVERFLOW, state.max_offset
            return None
        if answer.code == ResponseCode.TOPIC_NOT_EXIST:
            self.transport.names.forget(state.topic)
        raise self.transport.refused(answer, f"broker {state.broker} refused a pull of {state.topic!r} queue "
                                             f"{state.queue_id} at offset {state.next_offset}")

    def _found(self, state: _Range, answer) -> RangeChunk:
        body = answer.body
        try:
            count = len(entry_starts(body, FIXED_BYTES, "record"))
        except ChainError as err:
            raise CodecError(f"broker {state.broker} answered a pull of {state.topic!r} queue "
                                        f"{state.queue_id} with records that do not parse: {err}") from None
        self._move(state, int(answer.ext_fields["nextBeginOffset"]))
        return RangeChunk(state.index, body, count, False, None, state.next_offset, state.min_offset,
                          state.max_offset, 0, "")

    @staticmethod
    def _skipped(state: _Range, next_offset: int, remark: str) -> None:
        """The broker stepped over offsets ``state.next_offset`` .. ``next_offset - 1`` without
        serving them: the range ends there, RECORD_CORRUPTED."""
        state.status, state.skipped_from = ReadStatus.RECORD_CORRUPTED, state.next_offset
        state.detail = (f"broker {state.broker} cannot serve offsets {state.next_offset} to {next_offset - 1} of "
                        f"{state.topic!r} queue {state.queue_id}: {remark}")
        state.next_offset = next_offset

    @staticmethod
    def _move(state: _Range, next_offset: int) -> None:
        if next_offset <= state.next_offset:  # the broker did not move on: nothing more now
            state.status = ReadStatus.FOUND
            return
        state.next_offset = next_offset
        if state.end is not None and next_offset >= state.end:
            state.status = ReadStatus.FOUND

    @staticmethod
    def _done(state: _Range) -> RangeChunk:
        return RangeChunk(state.index, b"", 0, True, state.status, state.next_offset, state.min_offset,
                          state.max_offset, state.skipped_from, state.detail)

