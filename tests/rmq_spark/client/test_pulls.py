"""Pipelined pulls (rmq_spark/client/pulls.py) against a broker played in this process: it
answers pulls as RocketMQ's DefaultMessageStore.getMessage does (at most 32 messages, or one
stored batch, from the unit holding the offset; filtered units not counted) and in a shuffled
order, so that the slices of a range are answered out of order. Every message once and in
order, whatever the stored batches, the ranges' cuts, the byte budget, the tag filter, a hole
the broker cannot serve, a broker that fails requests for a while."""

from __future__ import annotations

import random
import threading
from concurrent.futures import Future

import pytest

from rmq_spark import CorruptedRecordError, DataLossError, OffsetRange, RangeReader
from rmq_spark.client.remoting.routes import PERM_READ, BrokerQueues, TopicRoute
from rmq_spark.errors import BrokerUnavailableError
from rmq_wire.record import SysFlag, encode_message, encode_message_batch, encode_properties
from rmq_wire.remoting import RemotingCommand, ResponseCode

TOPIC = "pulled"
BROKER = "broker-a"


class Queue:
    """A queue's stored units: (base offset, count, tag, record bytes)."""

    def __init__(self, sizes, tags=("A",), first: int = 0, unserved=()):
        self.units, offset = [], first
        for i, count in enumerate(sizes):
            tag = tags[i % len(tags)]
            self.units.append((offset, count, tag, _record(offset, count, tag)))
            offset += count
        self.min, self.max = first, offset
        self.unserved = set(unserved)  # unit indexes the broker cannot serve (MESSAGE_WAS_REMOVING)

    def tag_of(self, offset: int) -> str:
        return next(tag for base, count, tag, _ in self.units if base <= offset < base + count)

    def answer(self, fields: dict, count_limit: int) -> RemotingCommand:
        offset, wanted = int(fields["queueOffset"]), int(fields["maxMsgNums"])
        tags = {t.strip() for t in fields["subscription"].split("||")}
        head = {"minOffset": str(self.min), "maxOffset": str(self.max)}
        if offset < self.min or offset > self.max:
            return RemotingCommand(ResponseCode.PULL_OFFSET_MOVED, ext_fields={**head, "nextBeginOffset": str(offset)})
        if offset == self.max:
            return RemotingCommand(ResponseCode.PULL_NOT_FOUND, ext_fields={**head, "nextBeginOffset": str(offset)})
        at = next(i for i, (base, count, *_) in enumerate(self.units) if base <= offset < base + count)
        records, messages, next_offset, status = [], 0, offset, "NO_MATCHED_MESSAGE"
        for index in range(at, len(self.units)):
            base, count, tag, raw = self.units[index]
            if base - offset >= max(800, wanted):  # maxFilterMessageSize, in units
                break
            if records and (messages + count > wanted or messages >= count_limit):  # isTheBatchFull
                break
            next_offset = base + count
            if "*" not in tags and tag not in tags:
                continue
            if index in self.unserved:
                if not records:
                    status = "MESSAGE_WAS_REMOVING"
                continue
            records.append(raw)
            messages += count
        head["nextBeginOffset"] = str(next_offset)
        if records:
            return RemotingCommand(ResponseCode.SUCCESS, ext_fields=head, body=b"".join(records))
        return RemotingCommand(ResponseCode.PULL_RETRY_IMMEDIATELY, ext_fields=head, remark=status)


def _record(base: int, count: int, tag: str) -> bytes:
    properties = encode_properties({"TAGS": tag})
    if count == 1:
        return encode_message(topic=TOPIC, queue_id=0, body=b"o%d" % base, properties=properties, queue_offset=base)
    payload = encode_message_batch([(b"o%d" % (base + i), {}, 0) for i in range(count)])
    properties += encode_properties({"INNER_NUM": str(count), "INNER_BASE": str(base)})
    return encode_message(topic=TOPIC, queue_id=0, body=payload, properties=properties, queue_offset=base,
                          sys_flag=SysFlag.INNER_BATCH | SysFlag.NEED_UNWRAP)


class Broker:
    """Answers the reader's pulls from another thread, in a shuffled order; ``failures``
    requests of offsets past the first are refused as a broker that cannot be reached."""

    def __init__(self, queue: Queue, count_limit: int = 32, failures: int = 0, seed: int = 7):
        self.queue, self.count_limit, self.failures = queue, count_limit, failures
        self.random = random.Random(seed)
        self.pending: list = []
        self.pulled: list = []  # (offset, maxMsgNums) of each pull answered
        self.most_in_flight = 0
        self.changed = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._answer, daemon=True)
        self.thread.start()

    def request(self, address: str, code: int, fields: dict) -> Future:
        future: Future = Future()
        with self.changed:
            self.pending.append((future, {k: str(v) for k, v in fields.items()}))
            self.most_in_flight = max(self.most_in_flight, len(self.pending))
            self.changed.notify()
        return future

    def request_many(self, address: str, code: int, many: list) -> list[Future]:
        if self.failures and any(int(fields["queueOffset"]) > self.queue.min for fields in many):
            self.failures -= 1
            raise BrokerUnavailableError(f"cannot connect to {address}: refused")
        return [self.request(address, code, fields) for fields in many]

    def _answer(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.pending or self.stopped, timeout=5)
                if self.stopped:
                    return
                if not self.pending:
                    continue
                future, fields = self.pending.pop(self.random.randrange(len(self.pending)))
                self.pulled.append((int(fields["queueOffset"]), int(fields["maxMsgNums"])))
            future.set_result(self.queue.answer(fields, self.count_limit))

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.notify()
        self.thread.join(5)


@pytest.fixture
def reader_of():
    """A RangeReader through name servers whose transport's pulls this process's Broker answers."""
    made = []

    def make(queue: Queue, pulls_per_queue: int | None = None, **options):
        broker = Broker(queue, **{k: options.pop(k) for k in ("count_limit", "failures") if k in options})
        reader = RangeReader(name_server="127.0.0.1:9", transport=None, **options)
        transport = reader._transport
        route = TopicRoute(TOPIC, (BrokerQueues(BROKER, "127.0.0.1:10911", 1, 1, PERM_READ),))
        transport.names.route = lambda topic, refresh=False, last_known=True: route
        transport.calls.request_many = broker.request_many
        transport.calls.wait = lambda future, address, code, timeout_ms=None: _result(future)
        transport.calls.backoff_s = lambda attempt: 0.001
        if pulls_per_queue is not None:
            transport.pulls.pulls_per_queue = pulls_per_queue
        made.append((reader, broker))
        return reader, broker

    yield make
    for reader, broker in made:
        broker.stop()
        reader.close()


def _result(future: Future):
    return future.result(10)


def offsets_read(reader, ranges) -> list[int]:
    table = reader.read_table(ranges)
    offsets = table.column("queue_offset").to_pylist()
    assert table.column("body").to_pylist() == [b"o%d" % o for o in offsets]
    return offsets


LAYOUTS = {
    "SimpleCQ, a message a record": [1] * 700,
    "BatchCQ, batches of 32": [32] * 25,
    "BatchCQ, batches of many sizes": [1, 7, 40, 3, 64, 13, 32, 2, 90, 5, 31, 33] * 3,
    "BatchCQ, batches of 8 (more than one per answer)": [8] * 90,
}


@pytest.mark.parametrize("sizes", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("cut", ["whole", "open end", "inside batches", "small budget"])
def test_every_message_once_in_order_whatever_the_batches_and_cuts(reader_of, sizes, cut):
    queue = Queue(sizes, first=100)
    start, end, options = queue.min, queue.max, {}
    if cut == "open end":
        end = None
    elif cut == "inside batches":
        start, end = queue.min + 5, queue.max - 9
    elif cut == "small budget":
        options["max_bytes_per_fetch"] = 6000
    reader, broker = reader_of(queue, **options)
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, start, end, BROKER)]) == list(range(start, end or queue.max))
    assert broker.most_in_flight > 1  # pulls of the one queue were in flight together


@pytest.mark.parametrize("sizes", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_one_pull_after_another_reads_the_same(reader_of, sizes):
    queue = Queue(sizes)
    reader, broker = reader_of(queue, pulls_per_queue=1)
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, queue.max, BROKER)]) == list(range(queue.max))
    assert broker.most_in_flight == 1
    pulled = [offset for offset, _ in broker.pulled]
    assert pulled == sorted(set(pulled))  # each from where the last ended


def test_slices_of_a_range_meet_each_batch_about_once(reader_of):
    """Batches of 32, one an answer: the slices start where batches start, and no batch is
    pulled twice; batches of many sizes: a slice spans several answers, so that a batch met
    by two slices costs at most one more pull in four."""
    uniform = Queue([32] * 40)
    reader, broker = reader_of(uniform)
    offsets_read(reader, [OffsetRange(TOPIC, 0, 0, uniform.max, BROKER)])
    assert sorted(offset for offset, _ in broker.pulled) == list(range(0, uniform.max, 32))
    varied = Queue([5, 40, 17, 33, 64, 9, 28, 31] * 8)
    reader, broker = reader_of(varied)
    offsets_read(reader, [OffsetRange(TOPIC, 0, 0, varied.max, BROKER)])
    assert len(broker.pulled) <= 1.5 * len(varied.units)


def test_many_ranges_in_one_read(reader_of):
    queue = Queue([1] * 300)
    reader, broker = reader_of(queue)
    ranges = [OffsetRange(TOPIC, 0, start, start + 60, BROKER) for start in range(0, 300, 60)]
    offsets = offsets_read(reader, ranges)  # ranges side by side: each in its order
    assert sorted(offsets) == list(range(300))
    assert all([o for o in offsets if start <= o < start + 60] == list(range(start, start + 60))
               for start in range(0, 300, 60))


def test_a_tag_filter_reads_exactly_those_tags(reader_of):
    queue = Queue([1] * 500, tags=("A", "B", "B", "C"))
    reader, _ = reader_of(queue, tag_filter="B || C")
    wanted = [o for o in range(500) if queue.tag_of(o) in ("B", "C")]
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, 500, BROKER)]) == wanted
    rare = Queue([1] * 2000, tags=("A",) * 199 + ("B",))  # answers with nothing that passed the filter
    reader, _ = reader_of(rare, tag_filter="B")
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, 2000, BROKER)]) == list(range(199, 2000, 200))
    batches = Queue([16] * 60, tags=("A", "B"))
    reader, _ = reader_of(batches, tag_filter="B")
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 3, 950, BROKER)]) == [
        o for o in range(3, 950) if batches.tag_of(o) == "B"]


def test_offsets_the_broker_cannot_serve_fail_or_are_skipped_exactly(reader_of):
    queue = Queue([32] * 30, unserved={15})  # offsets 480 to 511, far past the first answer
    reader, _ = reader_of(queue)
    with pytest.raises(CorruptedRecordError, match="offsets 480 to 511") as failed:
        reader.read_table([OffsetRange(TOPIC, 0, 0, queue.max, BROKER)])
    assert (failed.value.first_offset, failed.value.end_offset) == (480, 512)
    reader, _ = reader_of(queue, on_data_loss="skip")
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, queue.max, BROKER)]) == [
        o for o in range(queue.max) if not 480 <= o < 512]


def test_a_range_past_what_is_stored_reads_what_is(reader_of):
    queue = Queue([1] * 200)
    reader, _ = reader_of(queue)
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, 10_000, BROKER)]) == list(range(200))


def test_a_range_below_what_is_stored_fails_or_reads_from_the_first_stored(reader_of):
    queue = Queue([1] * 200, first=50)
    reader, _ = reader_of(queue)
    with pytest.raises(DataLossError, match="offset 0 is no longer stored"):
        reader.read_table([OffsetRange(TOPIC, 0, 0, 250, BROKER)])
    reader, _ = reader_of(queue, on_data_loss="skip")
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, 250, BROKER)]) == list(range(50, 250))


def test_pulls_refused_for_a_while_are_asked_again(reader_of):
    queue = Queue([1] * 400)
    reader, broker = reader_of(queue, failures=12)
    assert offsets_read(reader, [OffsetRange(TOPIC, 0, 0, 400, BROKER)]) == list(range(400))
    assert broker.failures == 0
