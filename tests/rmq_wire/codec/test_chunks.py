"""Decoding a read chunk's inner batches together: many payloads decompressed into one buffer
or each into its own, their entries found in one pass, the first and last batch cut."""

import os
import random
import struct

import lz4.frame
import numpy as np
import pytest
import zstandard

from codec_layout import inner_record, message_batch, properties
from rmq_wire.codec import Compression, compress, encode_messages
from rmq_wire.codec._bytes import ChainError, chains_entry_starts
from rmq_wire.codec.compression import PayloadError, decompress_all, decompress_each
from rmq_wire.codec.records import RecordFormatError, decode_records
from rmq_wire.codec.rmq import BatchFormatError, scan_payloads


def chain(sizes) -> bytes:
    return b"".join(struct.pack(">i", n) + os.urandom(n - 4) for n in sizes)


@pytest.mark.parametrize("chains", [1, 63, 64, 200])
def test_chains_are_walked_together(chains):
    rng = random.Random(chains)
    sizes = [[rng.choice([8, 9, 30]) for _ in range(rng.choice([1, 2, 40, 300]))] for _ in range(chains)]
    raw = b"".join(chain(s) for s in sizes)
    lengths = [sum(s) for s in sizes]
    begins = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    expected = np.cumsum([0] + [n for s in sizes for n in s])[:-1]
    assert chains_entry_starts(raw, begins, begins + lengths, 8).tolist() == expected.tolist()


@pytest.mark.parametrize("bad_chain", [0, 20, 99])
def test_a_broken_chain_is_named(bad_chain):
    parts = [chain([8, 12] * 3) for _ in range(100)]
    parts[bad_chain] = parts[bad_chain][:-1]  # its last entry runs past its end
    raw = b"".join(parts)
    begins = np.concatenate(([0], np.cumsum([len(p) for p in parts])[:-1]))
    with pytest.raises(ChainError) as info:
        chains_entry_starts(raw, begins, begins + [len(p) for p in parts], 8)
    assert info.value.index == bad_chain


def test_scan_payloads_names_the_payload_and_its_own_message():
    good = message_batch([(b"a", b""), (b"bb", b"")])
    bad = message_batch([(b"x", b""), (b"y", b"")])
    second = len(bad) - 23  # where message 1 (20 header bytes, 1 body byte, PROPLEN) starts
    bad = bad[:second + 16] + struct.pack(">i", 99) + bad[second + 20:]  # its BODYLEN
    parts = [good] * 70 + [bad] + [good]
    begins = np.concatenate(([0], np.cumsum([len(p) for p in parts])[:-1]))
    with pytest.raises(BatchFormatError, match=f"message 1 at byte {second}: BODYLEN 99") as info:
        scan_payloads(b"".join(parts), begins, begins + [len(p) for p in parts])
    assert info.value.payload == 70


FRAMES = {
    "none": lambda data: data,
    "lz4": lambda data: compress(data, "lz4"),
    "lz4 without its size": lambda data: lz4.frame.compress(data),
    "zstd": lambda data: compress(data, "zstd"),
    "zstd without its size": lambda data: zstandard.ZstdCompressor(write_content_size=False).compress(data),
}


@pytest.mark.parametrize("frame", FRAMES)
def test_decompress_all_and_each(frame):
    compression = Compression.parse(frame.split()[0])
    datas = [os.urandom(n) + b"z" * n for n in (0, 5, 3000, 70_000)]
    raw = b"".join(FRAMES[frame](d) for d in datas)
    lengths = np.array([len(FRAMES[frame](d)) for d in datas])  # lz4 and zstd frames are deterministic
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    joined, offsets = decompress_all(raw, starts, lengths, [compression] * len(datas))
    assert [joined.to_pybytes()[a:b] for a, b in zip(offsets[:-1], offsets[1:])] == datas
    each = decompress_each(raw, starts, lengths, [compression] * len(datas))
    assert [buffer.to_pybytes() for buffer in each] == datas


@pytest.mark.parametrize("decompress", [decompress_all, decompress_each])
def test_a_bad_frame_is_named(decompress):
    frames = [compress(b"abc" * 100, "lz4")] * 3
    frames[1] = frames[1][:-6]
    raw = b"".join(frames)
    lengths = np.array([len(f) for f in frames])
    with pytest.raises(PayloadError, match="not a valid lz4 frame") as info:
        decompress(raw, np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths, [Compression.LZ4] * 3)
    assert info.value.index == 1


def chunk_of_batches(codec: str, compression: str, batches: int = 80):
    """Inner batch records of varied sizes, and the rows they hold (body, keys, tags)."""
    rng = random.Random(7)
    records, rows = [], []
    for b in range(batches):
        msgs = [(os.urandom(rng.choice([0, 3, 200])), None, f"k{len(rows) + i}" if i % 3 else None,
                 "own" if i % 4 == 0 else None, None) for i in range(rng.choice([1, 5, 32]))]
        records.append(inner_record(base=len(rows), count=len(msgs), payload=encode_messages(msgs, codec, compression),
                                    codec=codec, compression=compression, tags=f"rec{b}" if b % 2 else None))
        rows += [(body, keys, tags if tags is not None else (f"rec{b}" if b % 2 else None))
                 for body, _, keys, tags, _ in msgs]
    return b"".join(records), rows


@pytest.mark.parametrize("codec", ["rmq", "arrow"])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_many_batches_cut_anywhere(codec, compression):
    buf, rows = chunk_of_batches(codec, compression)
    for start, end in [(0, None), (3, 17), (1, len(rows) - 1), (40, 41), (len(rows) - 2, None)]:
        batch = decode_records(buf, start, end)
        got = list(zip(*(batch.column(name).to_pylist() for name in ("body", "keys", "tags"))))
        assert got == rows[start:end], (start, end)
        assert batch.column("queue_offset").to_pylist() == list(range(start, start + len(got)))


def test_rmq_and_arrow_batches_interleaved():
    msgs = [(b"body-%d" % i, None, None, None, None) for i in range(3)]
    records, rows, at = [], [], 0
    for i in range(150):  # arrow, rmq, arrow, ... : neither codec's rows are one slice
        codec = "arrow" if i % 2 else "rmq"
        records.append(inner_record(base=at, count=3, payload=encode_messages(msgs, codec, "lz4"), codec=codec,
                                    compression="lz4"))
        rows += [body for body, *_ in msgs]
        at += 3
    batch = decode_records(b"".join(records), 2, 440)
    assert batch.column("body").to_pylist() == rows[2:440]


def test_a_count_mismatch_among_many_batches_is_named():
    payload = message_batch([(b"a", properties([("TAGS", "t")]))] * 2)
    records = [inner_record(base=2 * i, count=2 if i != 25 else 3, payload=payload) for i in range(100)]
    with pytest.raises(RecordFormatError, match="record 25 at byte .*: the inner batch holds 2 messages but its "
                                                "INNER_NUM says 3"):
        decode_records(b"".join(records), 0, None)


def test_records_of_many_ranges_decode_together_with_bounds_of_their_own():
    """Two ranges' chunks joined (as RangeReader joins small ones): each record keeps its range's cut."""
    msgs = [(b"body-%d" % i, None, None, None, None) for i in range(4)]
    first = [inner_record(base=4 * i, count=4, payload=encode_messages(msgs, "arrow", "lz4"), codec="arrow",
                          compression="lz4", queue_id=0) for i in range(3)]  # offsets 0..11 of one queue
    second = [inner_record(base=4 * i, count=4, payload=encode_messages(msgs, "rmq", "none"), queue_id=1)
              for i in range(2)]  # offsets 0..7 of another
    starts = np.array([2] * 3 + [5] * 2)
    ends = np.array([9] * 3 + [np.iinfo(np.int64).max] * 2)
    batch = decode_records(b"".join(first + second), starts, ends)
    assert list(zip(batch.column("queue_id").to_pylist(), batch.column("queue_offset").to_pylist())) == (
        [(0, o) for o in range(2, 9)] + [(1, o) for o in range(5, 8)])
    with pytest.raises(ValueError, match="start gives bounds for 2 records; the buffer holds 5"):
        decode_records(b"".join(first + second), np.array([0, 0]), None)
