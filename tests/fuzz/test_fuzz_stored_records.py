"""Records read back from disk: the store's record check and decoder (what recovery and reads
run on every record), the client's decoding of streamed records, the MessageBatch walk, and
recovery of a real store whose commitlog met garbage (in a record or past its tail). Nothing
raises but the documented errors, and every record the garbage did not touch reads back
byte-identical."""

import os
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from broker_sim.store import GetStatus, MessageStore, StoreConfig, decode_record
from broker_sim.store.paths import StorePaths
from rmq_spark.errors import CodecError
from rmq_wire import record as fmt
from rmq_wire.codec.records import decode_records
from strategies import EXTREME_INTS, hostile, mutated, stored_records
from support.budget import examples
from watch import quick

records = st.lists(stored_records(), min_size=1, max_size=4).map(b"".join)


@examples(120)
@given(hostile(records, 1024))
def test_the_record_check_says_what_any_bytes_are(data):
    pos = 0
    with quick():
        while pos < len(data):
            check, size, reason = fmt.check_record(data, pos, len(data))
            if check in (fmt.Check.INVALID,):
                assert reason and size == 0
                return
            assert 0 < size <= len(data) - pos
            if check is fmt.Check.OK:
                record = decode_record(data, pos)
                assert record.total_size == size
            pos += size


@examples(120)
@given(hostile(records, 1024), st.sampled_from([0, 1, 2**40]), st.booleans())
def test_the_client_decodes_streamed_records_or_refuses_with_codec_error(data, start, properties):
    with quick():
        try:
            decode_records(data, start, None, include_properties=properties)
        except CodecError:
            pass


batch_payload = st.lists(st.tuples(st.binary(max_size=40), st.dictionaries(st.sampled_from(["a", "TAGS"]),
                                                                            st.text("xy", max_size=3)),
                                   st.integers(0, 5)), min_size=1, max_size=5).map(fmt.encode_message_batch)


@examples(300)
@given(hostile(batch_payload), st.sampled_from([1, 3, 1000]))
def test_the_message_batch_walk_refuses_with_batch_format_error(payload, max_count):
    with quick():
        try:
            for _flag, _body, properties in fmt.iter_message_batch(payload, max_count):
                fmt.decode_properties(properties)
        except (fmt.BatchFormatError, UnicodeDecodeError):
            pass  # property bytes not UTF-8: the broker's send path names them (ValueError)


# --- recovery ------------------------------------------------------------------------------------

CONFIG = StoreConfig(segment_bytes=64 << 10, simple_cq_units_per_file=16, batch_cq_units_per_file=8,
                     flush_interval_ms=60_000, index_flush_interval_ms=60_000)
BODIES = [b"body-%02d-" % i + bytes([i]) * (i * 7 % 90) for i in range(24)]


@examples(30)
@given(st.data())
def test_recovery_keeps_every_record_garbage_did_not_touch(data):
    with tempfile.TemporaryDirectory(prefix="fuzz-recovery-") as root:
        places = _store_known(root)
        tail = places[-1][0] + places[-1][1]
        where = data.draw(st.one_of(st.integers(0, tail - 1), st.integers(tail, tail + 512)))
        garbage = data.draw(st.one_of(st.binary(min_size=1, max_size=300),
                                      st.builds(bytes, st.integers(1, 64)),  # zeros
                                      stored_records().flatmap(mutated),
                                      st.sampled_from(EXTREME_INTS).map(lambda n: (n & 0xFFFFFFFF).to_bytes(4, "big"))))
        _write(root, where, garbage)
        if data.draw(st.booleans()):
            StorePaths(root).abort.touch()  # as after a crash: recovery re-checks more
        touched = {i for i, (at, size) in enumerate(places) if at < where + len(garbage) and where < at + size}
        with quick(20.0):
            store = MessageStore(root, CONFIG)
            try:
                for offset, body in enumerate(BODIES):
                    result = store.get_messages("known", 0, offset, offset + 1)
                    if offset in touched:
                        continue  # refused, corrupted, or (a flipped unused field) read: never raised
                    assert result.status is GetStatus.FOUND, (offset, result.status, result.detail)
                    assert bytes(decode_record(result.batches[0].data).body) == body
            finally:
                store.close()


def _store_known(root: str) -> list[tuple[int, int]]:
    """Store BODIES in topic "known" and stop cleanly; where each record lies (position, size)."""
    store = MessageStore(root, CONFIG)
    try:
        store.create_topic("known", 1)
        positions = [store.put_message("known", 0, body, properties={"KEYS": "k"}).physical_offsets[0]
                     for body in BODIES]
        assert store.wait_dispatched(10.0)
    finally:
        store.close()
    ends = positions[1:] + [None]
    return [(at, (end if end is not None else _end_of_last(root, at)) - at) for at, end in zip(positions, ends)]


def _end_of_last(root: str, at: int) -> int:
    with open(_segment(root), "rb") as segment:
        segment.seek(at)
        return at + int.from_bytes(segment.read(4), "big")


def _segment(root: str) -> str:
    directory = StorePaths(root).commitlog
    return str(directory / sorted(os.listdir(directory))[0])


def _write(root: str, position: int, garbage: bytes) -> None:
    with open(_segment(root), "r+b") as segment:
        segment.seek(position)
        segment.write(garbage[:CONFIG.segment_bytes - position])
