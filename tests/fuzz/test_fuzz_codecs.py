"""Batch payloads as the broker checks them before storing (``check_batch``) and as readers
decode them, for both codecs and every compression: valid payloads mutated, cut short, given
extreme lengths, random bytes, and decompression bombs. The check refuses with CodecError only,
quickly, within bounded memory; what it accepts, readers decode into the count it checked."""

import functools
import zlib

import lz4.frame
import pyarrow as pa
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.errors import CodecError
from rmq_wire.codec import BATCH_SCHEMA, MAX_DECOMPRESSED_BYTES, check_batch, decode_batch
from strategies import CODECS, COMPRESSIONS, batch_payloads, hostile, mutated
from support.budget import examples
from watch import bounded_memory, quick

COMBINATIONS = [(codec, compression) for codec in CODECS for compression in COMPRESSIONS]
# The largest payload a check may inflate to, plus the interpreter's and Arrow's own allocations.
BOMB_MEMORY_MIB = (MAX_DECOMPRESSED_BYTES >> 20) + 96
BOMB_BYTES = 256 << 20  # what each bomb expands to: four times the largest accepted


@pytest.mark.parametrize("codec, compression", COMBINATIONS)
@examples(60)
@given(data=st.data())
def test_the_broker_check_refuses_with_codec_error_and_readers_decode_what_it_accepts(codec, compression, data):
    valid = batch_payloads(codec, compression)
    payload, count = data.draw(st.one_of(valid, hostile(valid.map(lambda found: found[0])).map(lambda p: (p, 1))))
    count = data.draw(st.sampled_from([count, count, 0, count + 1, -1]))
    refused_or_read(payload, codec, compression, count)


def refused_or_read(payload: bytes, codec: str, compression: str, count: int) -> None:
    """The broker's check refuses ``payload`` with CodecError, or readers decode what it accepted."""
    with quick():
        try:
            check_batch(payload, codec, compression, count)
        except CodecError:
            return
        assert decode_batch(payload, codec, compression, count).num_rows == count


@pytest.mark.parametrize("codec, compression", COMBINATIONS)
@examples(20)
@given(data=st.data())
def test_a_payload_compressed_after_it_was_mutated_is_refused_or_read(codec, compression, data):
    """Mutations under the compression: the codec's parser meets them, not the decompressor."""
    plain, count = data.draw(batch_payloads(codec, "none"))
    payload = _compress(data.draw(mutated(plain)), compression)
    refused_or_read(payload, codec, compression, count)


def _compress(data: bytes, compression: str) -> bytes:
    if compression == "lz4":
        return lz4.frame.compress(data)
    if compression == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return zlib.compress(data) if compression == "zlib" else data


# --- decompression bombs -----------------------------------------------------------------------

def _zeros(chunks: int = BOMB_BYTES >> 20):
    return (bytes(1 << 20) for _ in range(chunks))


def zstd_bomb(content_size: bool) -> bytes:
    """BOMB_BYTES of zeros in a few KiB; with ``content_size`` its header says so."""
    compressor = zstandard.ZstdCompressor(level=1, write_content_size=content_size)
    if content_size:
        writer = compressor.chunker(size=BOMB_BYTES)
        return b"".join(b"".join(writer.compress(chunk)) for chunk in _zeros()) + b"".join(writer.finish())
    stream = compressor.compressobj()
    return b"".join(stream.compress(chunk) for chunk in _zeros()) + stream.flush()


def lz4_bomb(content_size: bool) -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB, content_checksum=False)
    head = compressor.begin(source_size=BOMB_BYTES if content_size else 0)
    return head + b"".join(compressor.compress(chunk) for chunk in _zeros()) + compressor.flush()


def zlib_bomb() -> bytes:
    stream = zlib.compressobj(9)
    return b"".join(stream.compress(chunk) for chunk in _zeros()) + stream.flush()


def lying_zstd_header() -> bytes:
    """A tiny zstd frame whose header claims 1 TiB."""
    frame = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(bytes(100_000)))
    return _with_zstd_content_size(frame, 1 << 40)


def _with_zstd_content_size(frame: bytearray, size: int) -> bytes:
    descriptor = frame[4]
    assert descriptor >> 6 == 2, "the sample frame keeps its size in 4 bytes"
    frame[4] = (descriptor & 0x3F) | (3 << 6)  # an 8-byte content size field instead
    at = 5 + (0 if descriptor & 0x20 else 1) + [0, 1, 2, 4][descriptor & 3]
    return bytes(frame[:at]) + size.to_bytes(8, "little") + bytes(frame[at + 4:])


@functools.cache
def _made(make) -> bytes:
    return make()


BOMBS = {"zstd with its size": ("zstd", lambda: zstd_bomb(True)), "zstd without": ("zstd", lambda: zstd_bomb(False)),
         "lz4 with its size": ("lz4", lambda: lz4_bomb(True)), "lz4 without": ("lz4", lambda: lz4_bomb(False)),
         "zlib": ("zlib", zlib_bomb), "zstd claiming 1 TiB": ("zstd", lying_zstd_header)}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_decompression_bomb_is_refused_within_bounded_memory(bomb, codec):
    compression, make = BOMBS[bomb]
    payload = _made(make)
    assert len(payload) < 8 << 20
    with bounded_memory(BOMB_MEMORY_MIB), quick(10.0):
        with pytest.raises(CodecError):
            check_batch(payload, codec, compression, 1)


def arrow_ipc_bomb() -> bytes:
    """An arrow payload whose body column Arrow's own IPC compression (zstd) shrank from 300 MiB
    to some KiB: the payload compression (none here) is not what inflates it."""
    rows = [pa.array([bytes(300 << 20)], pa.binary())] + [pa.nulls(1, field.type) for field in BATCH_SCHEMA][1:]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BATCH_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(rows, schema=BATCH_SCHEMA))
    return sink.getvalue().to_pybytes()


def test_an_arrow_payload_compressed_by_arrow_itself_is_refused_before_it_inflates():
    payload = arrow_ipc_bomb()
    assert len(payload) < 1 << 20
    with bounded_memory(BOMB_MEMORY_MIB), quick(10.0):
        with pytest.raises(CodecError, match="Arrow's own IPC compression"):
            check_batch(payload, "arrow", "none", 1)
        with pytest.raises(CodecError, match="Arrow's own IPC compression"):
            decode_batch(payload, "arrow", "none", 1)
