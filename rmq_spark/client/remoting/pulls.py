"""Range reads over RocketMQ's remoting protocol: each range is read by PULL_MESSAGE requests,
several of one range in flight at once, ranges side by side, up to ``MAX_IN_FLIGHT`` pulls in
flight on the brokers' connections. Each answer's records (the stored records, inner batches
whole) become a ``RangeChunk``, as our door's ReadRanges streams them, so that the range reader
is the same over both protocols.

A RocketMQ broker answers a pull with little: at most ``maxTransferCountOnMessageInMemory``
messages (32 by default; 8 read from disk) or one stored batch of a BatchCQ topic, so that one
pull after another (the next from where the last ended, ``nextBeginOffset``) waits a round trip
per 32 messages. The offsets ahead are known, though: a range's first pull tells how far one
answer reaches (its ``span``) and the queue's max offset, and what is stored below it can be
pulled from any offset. So after its first answer a range is cut into slices of about one
answer each, up to ``PULLS_PER_QUEUE`` of them pulled at once, each from its own start and, when
an answer ends short of it, on to its end. A pull that starts inside a stored batch is answered
with the whole batch: each chunk carries its slice's bounds (``cut_start`` / ``cut_end``), which
the range reader cuts the rows to, so that every message comes once and in order; and once a
range's pull lands inside a batch (batches of varying size), its later slices span
``WIDEN`` answers, so that a batch met twice costs a quarter of the reading, not half. A slice's
chunks are handed on in the range's order: those of a slice that is answered before the slices
ahead of it wait for them. Anything but records (the end of what is stored, offsets not served)
is judged only when every slice before it is read, as one pull after another would have met it.

A broker that cannot be reached (restarting, say) is asked again, with backoff, until the
read's deadline (the transport's ``timeout_ms``): a read waits for it rather than fail, and says
so once per broker. So does a range whose topic has no route at the name servers while its
cluster restarts (no broker registered, or the range names a broker the route lacks now: it was
there when the range was planned): the route is asked again until the deadline.

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
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers
from rmq_spark.client.transport import RangeChunk, ReadStatus
from rmq_spark.errors import BrokerUnavailableError, CodecError, RequestTimeoutError, TopicNotFoundError
from rmq_wire.codec._bytes import ChainError, entry_starts
from rmq_wire.record import FIXED_BYTES
from rmq_wire.remoting import RequestCode, ResponseCode

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32  # pulls in flight in one read, over every range
PULLS_PER_QUEUE = 8  # slices of one range pulled at once (1: one pull after another)
WIDEN = 4  # a range whose pulls land inside stored batches: slices of this many answers
FIRST_SPAN = 32  # a slice's size before any answer said how far one reaches (RocketMQ's count)
NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # the remark of a pull whose records the filter all left out
MAX_MESSAGES = 32767  # a pull's maxMsgNums: the broker stops at its byte (and count) limit first
PULL_SUSPEND = 0x2  # PullSysFlag: the broker may hold the pull until messages arrive (suspendTimeoutMillis)
PULL_SUBSCRIPTION = 0x4  # PullSysFlag: the request carries its subscription (a tag filter)
_QUEUE_OFFSET = struct.Struct(">q")  # a stored record's QUEUEOFFSET, at byte 20
_QUEUE_OFFSET_AT = 20


@dataclass(eq=False)
class _Range:
    """A range being read: its slices in order, and how far slices reach."""

    index: int
    topic: str
    broker: str
    queue_id: int
    address: str
    start: int
    end: int | None  # None: up to what is stored, pinned at the first answer
    read_any: bool = False
    min_offset: int = 0
    max_offset: int = 0
    slices: deque = field(default_factory=deque)  # not yet handed on whole, the first one's chunks handed on
    frontier: int | None = None  # every offset below it is in a slice (None: until the first answer is in)
    span: int = 0  # the most messages one answer reached over
    widen: int = 1
    done: bool = False


@dataclass(eq=False)
class _Slice:
    """Offsets ``start`` .. ``end`` - 1 of a range, pulled from ``next_offset``, one pull at a time."""

    range: _Range
    start: int
    next_offset: int
    end: int | None
    first: bool = False  # the range's first pull, from its start
    status: ReadStatus | None = None  # set when the slice is done
    skipped_from: int = 0  # RECORD_CORRUPTED: offsets skipped_from .. next_offset - 1 were not served
    detail: str = ""  # and why, as the broker said
    retry_at: float = 0.0  # its broker could not be reached: not asked again before this (monotonic)
    failures: int = 0
    chunks: list = field(default_factory=list)  # answered before the slices ahead were read
    held: object = None  # an answer without records, judged when the slices ahead are read
    dropped: bool = False  # its range ended before it: its answers are not wanted


class Pulls:
    """``pull_group``: the consumer group the pulls name (settable: the transport's)."""

    def __init__(self, calls: Calls, names: NameServers, pull_group: str, pulls_per_queue: int = PULLS_PER_QUEUE):
        self.calls = calls
        self.names = names
        self.pull_group = pull_group
        self.pulls_per_queue = pulls_per_queue

    def read(self, ranges: Sequence, max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        """``Transport.read_ranges``: chunks of each range's records as the pulls are answered
        (a range's in order), then a done chunk per range; at most about ``max_bytes`` in all
        (a range the budget stopped ends FOUND where it got to, or BUDGET_EXHAUSTED)."""
        deadline = time.monotonic() + self.calls.config.timeout_ms / 1000
        brokers: dict = {}  # (topic, broker named) -> (its address, the broker): asked once a read, not a range
        read = []
        for index, r in enumerate(ranges):
            key = (r.topic, getattr(r, "broker", ""))
            if key not in brokers:
                brokers[key] = self._broker(*key, deadline)
            address, broker = brokers[key]
            read.append(_Range(index, r.topic, broker, r.queue_id, address, r.start, r.end))
        return _Read(self, read, max_bytes, tag_filter, max(1, self.pulls_per_queue), deadline).run()

    def _broker(self, topic: str, named: str, deadline: float) -> tuple[str, str]:
        """The address and name of the broker a topic's range is read from, waited for while the
        topic has no route to it (said once)."""
        failures = 0
        while True:
            try:
                route = self.names.route(topic, refresh=failures > 0)
                if named and all(entry.broker != named for entry in route.brokers):
                    raise TopicNotFoundError(f"topic {topic!r} has no route to broker {named} at the name servers "
                                             f"now (its brokers: {', '.join(b.broker for b in route.brokers)})")
                broker = route.named(named)
                return route.address(broker), broker
            except (BrokerUnavailableError, RequestTimeoutError, TopicNotFoundError) as away:
                # a topic without a route is waited for only where the range names its broker: it
                # was there when the range was planned, and is away while its broker restarts
                if (isinstance(away, TopicNotFoundError) and not named) or time.monotonic() >= deadline:
                    raise
                if not failures:
                    log.warning("topic %s has no route to its broker %s now (%s): asked again until the read's "
                                "deadline", topic, named or "(its only one)", away)
                time.sleep(min(self.calls.backoff_s(min(failures, 5)), max(0.0, deadline - time.monotonic())))
                failures += 1


class _Read:
    """One ``Pulls.read``: its ranges, the slices ready to be pulled, what was received."""

    def __init__(self, pulls: Pulls, ranges: list, max_bytes: int, tag_filter: str, depth: int, deadline: float):
        self.pulls = pulls
        self.calls = pulls.calls
        self.deadline = deadline
        self.unreachable: set[str] = set()  # brokers whose failure was logged, until they answer again
        self.ranges = ranges
        self.max_bytes = max_bytes
        self.subscription = tag_filter or "*"
        self.depth = depth
        self.received = 0
        self.refusal: BrokerUnavailableError | None = None  # why the last pulls could not be sent
        self.ready: list = []  # slices to pull, popped from the end: ranges in order, a range's slices in order
        for r in reversed(ranges):
            first = _Slice(r, r.start, r.start, r.end, first=True)
            r.slices.append(first)
            self.ready.append(first)

    def run(self) -> Iterator[RangeChunk]:
        answers: queue.SimpleQueue = queue.SimpleQueue()
        in_flight = 0
        deadline = self.deadline
        while True:
            due: dict[str, list] = {}  # the pulls to send now, by broker: written together
            while self.ready and in_flight < MAX_IN_FLIGHT and self.received < self.max_bytes:
                piece = self._next_due()
                if piece is None:
                    break
                due.setdefault(piece.range.address, []).append(piece)
                in_flight += 1
            for address, pieces in due.items():
                if not self._pull(address, pieces, answers):
                    in_flight -= len(pieces)
                    for piece in pieces:
                        self._unreachable(piece, self.refusal, deadline)
            if not in_flight:
                self.ready = [s for s in self.ready if not s.dropped]
                if self.ready and self.received < self.max_bytes:  # only brokers that cannot be reached now
                    time.sleep(max(0.0, min(s.retry_at for s in self.ready) - time.monotonic()))
                    continue
                break
            answered = [answers.get()]
            while True:  # and every other answer in: the pulls they make go out together
                try:
                    answered.append(answers.get_nowait())
                except queue.Empty:
                    break
            in_flight -= len(answered)
            for piece, future in answered:
                if piece.dropped:
                    continue
                r = piece.range
                try:
                    answer = self.calls.wait(future, r.address, RequestCode.PULL_MESSAGE)
                except (BrokerUnavailableError, RequestTimeoutError) as err:
                    self._unreachable(piece, err, deadline)
                    continue
                piece.failures = 0
                self.unreachable.discard(r.address)
                yield from self._answered(piece, answer)
        for r in self.ranges:  # stopped by the budget
            if not r.done:
                reached = r.slices[0].next_offset if r.slices else r.frontier
                yield self._end(r, ReadStatus.FOUND if r.read_any else ReadStatus.BUDGET_EXHAUSTED, reached)

    # --- slices ------------------------------------------------------------------------------

    def _answered(self, piece: _Slice, answer) -> Iterator[RangeChunk]:
        r = piece.range
        if r.slices[0] is piece or _records_or_filtered(answer):
            chunk = self._apply(piece, answer)
            if chunk is not None:
                self.received += len(chunk.records)
                if r.slices[0] is piece:
                    yield chunk
                else:
                    piece.chunks.append(chunk)
            self._settle(piece)
        else:
            piece.held = answer
        yield from self._advance(r)

    def _settle(self, piece: _Slice) -> None:
        """After an answer: the range's first slice ends where its first answer did (the slices
        ahead start there); a slice not done is pulled on."""
        if piece.status is None and piece.first and self.depth > 1:
            piece.end, piece.status = piece.next_offset, ReadStatus.FOUND
        if piece.status is None:
            self.ready.append(piece)

    def _advance(self, r: _Range) -> Iterator[RangeChunk]:
        """Hand on what the range's first slices hold, in order; end the range where a slice
        ended short of its end; cut new slices ahead."""
        while r.slices:
            piece = r.slices[0]
            if piece.chunks:
                yield from piece.chunks
                piece.chunks = []
            if piece.held is not None:
                answer, piece.held = piece.held, None
                self._apply(piece, answer)  # no records: a held answer had none
                self._settle(piece)
            if piece.status is None:
                return  # still being pulled
            if piece.status is ReadStatus.FOUND and piece.end is not None and piece.next_offset >= piece.end:
                r.slices.popleft()
                if piece.first:
                    r.frontier = piece.end
                continue
            yield self._end(r, piece.status, piece.next_offset, piece.skipped_from, piece.detail)
            return
        yield from self._extend(r)

    def _extend(self, r: _Range) -> Iterator[RangeChunk]:
        """Cut slices from the range's frontier: up to ``depth`` at once, beyond the first only
        below the queue's max offset (stored: any of them may be pulled)."""
        if r.done or r.frontier is None:
            return
        size = (r.span or FIRST_SPAN) * r.widen
        cut = []
        while len(r.slices) < self.depth and r.frontier < r.end and self.received < self.max_bytes:
            if r.slices and r.frontier >= r.max_offset:
                break
            piece = _Slice(r, r.frontier, r.frontier, min(r.frontier + size, r.end))
            r.slices.append(piece)
            cut.append(piece)
            r.frontier = piece.end
        self.ready.extend(reversed(cut))
        if not r.slices and r.frontier >= r.end:
            yield self._end(r, ReadStatus.FOUND, r.frontier)

    def _end(self, r: _Range, status: ReadStatus, next_offset: int, skipped_from: int = 0,
             detail: str = "") -> RangeChunk:
        r.done = True
        for piece in r.slices:
            piece.dropped = True
        r.slices.clear()
        return RangeChunk(r.index, b"", 0, True, status, next_offset, r.min_offset, r.max_offset, skipped_from, detail)

    def _next_due(self) -> _Slice | None:
        """The next slice whose broker may be asked now (in order otherwise)."""
        now = time.monotonic()
        ready = self.ready
        for at in range(len(ready) - 1, -1, -1):
            piece = ready[at]
            if piece.dropped:
                del ready[at]
            elif piece.retry_at <= now:
                return ready.pop(at)
        return None

    def _unreachable(self, piece: _Slice, error, deadline: float) -> None:
        """A pull's broker could not be reached: ask again after a backoff, or raise at the deadline."""
        if time.monotonic() >= deadline:
            raise error
        r = piece.range
        if r.address not in self.unreachable:  # once per broker, however many of its queues wait
            log.warning("broker %s (%s) cannot be reached (%s); its pulls are retried until the read's deadline",
                        r.broker, r.address, error)
            self.unreachable.add(r.address)
        piece.retry_at = time.monotonic() + self.calls.backoff_s(min(piece.failures, 5))
        piece.failures += 1
        self.ready.append(piece)

    # --- pulls and answers -------------------------------------------------------------------

    def _pull(self, address: str, pieces: list, answers: queue.SimpleQueue) -> bool:
        """Send the pulls of ``pieces`` to the broker at ``address``; False when it cannot be
        reached (``self.refusal`` says why)."""
        many = []
        for piece in pieces:
            r = piece.range
            wanted = MAX_MESSAGES if piece.end is None else max(1, min(MAX_MESSAGES, piece.end - piece.next_offset))
            many.append({"consumerGroup": self.pulls.pull_group, "topic": r.topic, "queueId": r.queue_id,
                         "queueOffset": piece.next_offset, "maxMsgNums": wanted, "sysFlag": PULL_SUBSCRIPTION,
                         "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": self.subscription,
                         "subVersion": int(time.time() * 1000), "expressionType": "TAG"})
        try:
            futures = self.calls.request_many(address, RequestCode.PULL_MESSAGE, many)
        except BrokerUnavailableError as err:
            self.refusal = err
            return False
        for piece, future in zip(pieces, futures):
            future.add_done_callback(lambda done, piece=piece: answers.put((piece, done)))
        return True

    def _apply(self, piece: _Slice, answer) -> RangeChunk | None:
        """Move the slice by a pull's answer; the chunk of its records, if any."""
        r = piece.range
        head = answer.ext_fields
        r.min_offset = int(head.get("minOffset", r.min_offset))
        r.max_offset = int(head.get("maxOffset", r.max_offset))
        if r.end is None and answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY,
                                             ResponseCode.PULL_NOT_FOUND):
            r.end = piece.end = r.max_offset  # "up to what is stored": pinned at the first answer
        if answer.code == ResponseCode.SUCCESS:
            r.read_any = True
            return self._found(piece, answer)
        if answer.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND):
            next_offset = int(head.get("nextBeginOffset", piece.next_offset))
            if next_offset > piece.next_offset and answer.remark != NO_MATCHED_MESSAGE:
                self._skipped(piece, next_offset, answer.remark or "no remark")
                return None
        if answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY:  # read, but nothing passed the filter
            r.read_any = True
            self._move(piece, int(head["nextBeginOffset"]))
            return None
        if answer.code == ResponseCode.PULL_NOT_FOUND:  # nothing (more) stored at the offset
            piece.status = ReadStatus.FOUND if r.read_any else ReadStatus.NO_MESSAGE
            return None
        if answer.code == ResponseCode.PULL_OFFSET_MOVED and not r.read_any:
            if piece.next_offset < r.min_offset:
                piece.status, piece.next_offset = ReadStatus.OFFSET_TOO_SMALL, r.min_offset
            else:
                piece.status, piece.next_offset = ReadStatus.OFFSET_OVERFLOW, r.max_offset
            return None
        if answer.code == ResponseCode.TOPIC_NOT_EXIST:
            self.pulls.names.forget(r.topic)
        raise refused(answer, f"broker {r.broker} refused a pull of {r.topic!r} queue "
                                             f"{r.queue_id} at offset {piece.next_offset}")

    def _found(self, piece: _Slice, answer) -> RangeChunk | None:
        r = piece.range
        body = answer.body
        try:
            count = len(entry_starts(body, FIXED_BYTES, "record"))
        except ChainError as err:
            raise CodecError(f"broker {r.broker} answered a pull of {r.topic!r} queue "
                             f"{r.queue_id} with records that do not parse: {err}") from None
        pulled_at = piece.next_offset
        first_offset = _QUEUE_OFFSET.unpack_from(body, _QUEUE_OFFSET_AT)[0] if count else pulled_at
        if first_offset > pulled_at and self.subscription == "*":
            # Nothing filtered, yet the first record is past the offset asked: RocketMQ's store
            # steps over units it cannot serve (their commitlog gone) when it finds records after.
            self._skipped(piece, first_offset, f"the broker's answer to a pull at {pulled_at} starts at {first_offset}")
            return None
        if first_offset < pulled_at and not piece.first:
            r.widen = WIDEN  # it landed inside a stored batch: the batches are not of one size
        self._move(piece, int(answer.ext_fields["nextBeginOffset"]))
        r.span = max(r.span, piece.next_offset - min(first_offset, pulled_at))
        return RangeChunk(r.index, body, count, False, None, piece.next_offset, r.min_offset, r.max_offset, 0, "",
                          piece.start, piece.end)

    @staticmethod
    def _skipped(piece: _Slice, next_offset: int, remark: str) -> None:
        """The broker stepped over offsets ``piece.next_offset`` .. ``next_offset - 1`` without
        serving them: the range ends there, RECORD_CORRUPTED."""
        r = piece.range
        piece.status, piece.skipped_from = ReadStatus.RECORD_CORRUPTED, piece.next_offset
        piece.detail = (f"broker {r.broker} cannot serve offsets {piece.next_offset} to {next_offset - 1} of "
                        f"{r.topic!r} queue {r.queue_id}: {remark}")
        piece.next_offset = next_offset

    @staticmethod
    def _move(piece: _Slice, next_offset: int) -> None:
        if next_offset <= piece.next_offset:  # the broker did not move on: nothing more now
            piece.status = ReadStatus.FOUND
            return
        r = piece.range
        r.span = max(r.span, next_offset - piece.next_offset)
        piece.next_offset = next_offset
        if piece.end is not None and next_offset >= piece.end:
            piece.status = ReadStatus.FOUND


def _records_or_filtered(answer) -> bool:
    """An answer that only moves its slice on (records, or messages the filter left out), which
    may be taken before the slices ahead of it are read; any other is judged after them."""
    return answer.code == ResponseCode.SUCCESS or (answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                                                   and answer.remark == NO_MATCHED_MESSAGE)
