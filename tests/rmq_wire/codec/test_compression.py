"""Compression: names, SYSFLAG bits, round trips, and clear errors for bad frames."""

import os
import random
import threading

import lz4.frame
import pytest
import zstandard

from rmq_wire.codec import Compression, compress, decompress

# Incompressible then compressible; the same bytes in every run and every pytest-xdist worker.
DATA = random.Random(7).randbytes(50_000) + b"abc" * 100_000


@pytest.mark.parametrize("value, expected", [
    ("none", Compression.NONE), ("LZ4", Compression.LZ4), (" zstd ", Compression.ZSTD), (None, Compression.NONE),
    (0, Compression.NONE), (1, Compression.LZ4), (2, Compression.ZSTD), (Compression.ZSTD, Compression.ZSTD),
    ("zlib", Compression.ZLIB), (3, Compression.ZLIB),
])
def test_parse(value, expected):
    assert Compression.parse(value) is expected


@pytest.mark.parametrize("value", ["gzip", "", 4, -1, True, 1.0])
def test_parse_rejects_with_the_accepted_names(value):
    with pytest.raises(ValueError, match="use one of: none, lz4, zstd, zlib"):
        Compression.parse(value)


def test_values_are_rocketmq_compression_types_in_sysflag_bits_8_to_10():
    assert [c.value for c in Compression] == [0, 1, 2, 3]
    assert Compression.NONE.sys_flag() == 0
    assert Compression.LZ4.sys_flag() == 0x101
    assert Compression.ZSTD.sys_flag() == 0x201
    assert Compression.ZLIB.sys_flag() == 0x301
    for c in Compression:
        assert Compression.from_sys_flag(c.sys_flag() | 0x80 | 0x40) is c
    assert Compression.from_sys_flag(0x200) is Compression.NONE  # type bits without COMPRESSED: not compressed
    assert Compression.from_sys_flag(0x001) is Compression.ZLIB  # COMPRESSED alone: RocketMQ 4.x's zlib


@pytest.mark.parametrize("sys_flag", [0x401, 0x501, 0x701])
def test_from_sys_flag_rejects_types_this_client_cannot_read(sys_flag):
    with pytest.raises(ValueError, match=f"compression type {(sys_flag >> 8) & 7}, unknown"):
        Compression.from_sys_flag(sys_flag)


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one-byte", "mixed"])
def test_round_trip(compression, data):
    packed = compress(data, compression)
    assert bytes(decompress(packed, compression)) == data
    assert bytes(decompress(memoryview(b"ab" + packed)[2:], compression)) == data  # from a view of a buffer


def test_frames_are_standard_and_smaller():
    assert lz4.frame.decompress(compress(DATA, "lz4")) == DATA
    assert lz4.frame.get_frame_info(compress(DATA, "lz4"))["content_size"] == len(DATA)
    assert zstandard.ZstdDecompressor().decompress(compress(DATA, "zstd")) == DATA
    assert len(compress(DATA, "lz4")) < len(DATA) and len(compress(DATA, "zstd")) < len(DATA)


def test_none_is_zero_copy_on_decompress():
    out = decompress(DATA, Compression.NONE)
    assert isinstance(out, memoryview) and out.obj is DATA


def test_frames_of_other_producers_decode():
    linked = lz4.frame.compress(DATA, block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX4MB, store_size=False)
    assert decompress(linked, "lz4") == DATA
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert decompress(no_size, "zstd") == DATA


@pytest.mark.parametrize("compression", [Compression.LZ4, Compression.ZSTD])
def test_bad_frames_raise_value_errors(compression):
    packed = compress(DATA, compression)
    with pytest.raises(ValueError, match=f"not a valid {compression.name.lower()} frame"):
        decompress(b"certainly not a frame", compression)
    with pytest.raises(ValueError, match="valid .* frame|truncated"):
        decompress(packed[:-7], compression)


def test_zstd_without_content_size_truncated():
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    with pytest.raises(ValueError, match="truncated"):
        decompress(no_size[:-9], "zstd")


def test_threads_get_their_own_zstd_contexts():
    packed = [compress(os.urandom(1000) * (i + 1), "zstd") for i in range(8)]
    expected = [bytes(decompress(p, "zstd")) for p in packed]
    failures = []

    def work():
        for _ in range(50):
            if [bytes(decompress(p, "zstd")) for p in packed] != expected:
                failures.append(1)
            compress(b"y" * 10_000, "zstd")
    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
