"""Stored batches that pass their CRCs but do not decode (stored by a broker before payloads
were checked, issue 15): a read fails only their range, naming topic, queue and offsets, and
delivers every other range; with on_data_loss='skip' their offsets are skipped with a warning."""

import logging

import pytest

import broker_sim
from broker_sim.store import BatchPut, MessageStore
from rmq_spark import OffsetRange, RangeReader, UndecodableBatchError
from rmq_wire.codec import compress, encode_messages


def payload(first: int, count: int, compression: str = "none") -> bytes:
    return encode_messages([(b"m%d" % i, None, None, None, None) for i in range(first, first + count)], "rmq",
                           compression)


# A payload and the count stored with it, that do not agree or do not decode.
POISON = {
    "count wrong": (payload(3, 2), 3, "none"),
    "not lz4": (payload(3, 3), 3, "lz4"),
    "garbage lz4": (compress(b"\x00" * 40, "lz4"), 3, "lz4"),
}


@pytest.fixture(params=sorted(POISON))
def endpoint(request, tmp_path):
    """A broker over a store holding, in queue 0 of BatchCQ topic "p", a good batch (offsets
    0-2), a poison one (3-5) and a good one (6-8); in queue 1 two good batches (0-5)."""
    bad, count, compression = POISON[request.param]
    with MessageStore(tmp_path / "data") as store:  # no payload check: as stored before it
        store.create_topic("p", 2, "BatchCQ")
        for queue_id, data, n, packed in ((0, payload(0, 3), 3, "none"), (0, bad, count, compression),
                                          (0, payload(6, 3, "lz4"), 3, "lz4"), (1, payload(0, 3), 3, "none"),
                                          (1, payload(3, 3), 3, "none")):
            assert store.put_inner_batch("p", queue_id, BatchPut(data, n, compression=packed)).ok
    with broker_sim.embedded(tmp_path / "data") as endpoint:
        yield endpoint


def read_until_failure(reader, ranges):
    rows, failure = [], None
    try:
        for batch in reader.read(ranges):
            rows += zip(batch.column("queue_id").to_pylist(), batch.column("queue_offset").to_pylist(),
                        batch.column("body").to_pylist())
    except UndecodableBatchError as err:
        failure = err
    return sorted(rows), failure


RANGES = [OffsetRange("p", 0, 0, 9), OffsetRange("p", 1, 0, 6)]
QUEUE_1 = [(1, i, b"m%d" % i) for i in range(6)]


def test_a_batch_that_does_not_decode_fails_only_its_range(endpoint):
    with RangeReader(endpoint) as reader:
        rows, failure = read_until_failure(reader, RANGES)
    assert rows == [(0, i, b"m%d" % i) for i in range(3)] + QUEUE_1
    assert failure is not None and "p queue 0: the stored batch at offsets 3 to 5 does not decode" in str(failure)
    assert "on_data_loss='skip'" in str(failure)


def test_skip_reads_around_a_batch_that_does_not_decode(endpoint, caplog):
    with caplog.at_level(logging.WARNING), RangeReader(endpoint, on_data_loss="skip") as reader:
        rows, failure = read_until_failure(reader, RANGES)
    assert failure is None
    assert rows == [(0, i, b"m%d" % i) for i in (0, 1, 2, 6, 7, 8)] + QUEUE_1
    assert "p queue 0: the stored batch at offsets 3 to 5 does not decode" in caplog.text


def test_a_range_after_the_bad_batch_reads(endpoint):
    with RangeReader(endpoint) as reader:
        rows, failure = read_until_failure(reader, [OffsetRange("p", 0, 6, 9)])
    assert (rows, failure) == ([(0, i, b"m%d" % i) for i in range(6, 9)], None)
