"""Compression of a whole batch payload: none, LZ4 (frame format), Zstandard (one frame), or
zlib (RocketMQ's own: its Java clients compress a message body over 4 KiB so).

``Compression`` (RocketMQ's compression types, as SYSFLAG stores them) is the record
format's, ``rmq_wire.record``; this module compresses and decompresses.
"""

from __future__ import annotations

import threading
import zlib

import lz4.frame
import numpy as np
import pyarrow as pa
import zstandard

from rmq_wire.codec._bytes import read_at
from rmq_wire.errors import CodecError
from rmq_wire.record import Compression

# zstandard's (de)compressor objects are not thread safe, but are worth reusing (each holds
# a context that is costly to create): one of each per thread.
_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = _local.compressor = zstandard.ZstdCompressor(level=3, write_content_size=True)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def compress(data, compression: Compression) -> bytes:
    """``data`` (any bytes-like object) compressed as a whole: an LZ4 frame or a zstd frame.

    NONE returns the bytes unchanged (a copy only when ``data`` is not ``bytes``).
    """
    compression = Compression.parse(compression)
    if compression is Compression.LZ4:
        # The content size lets the reader allocate its output once; independent 64 KiB
        # blocks need no history buffer to decode, which makes decoding a copy-speed pass where
        # linked or larger blocks make LZ4 allocate (and first touch) buffers of a MiB or more.
        return lz4.frame.compress(data, store_size=True, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False)
    if compression is Compression.ZSTD:
        return _zstd_compressor().compress(data)
    if compression is Compression.ZLIB:
        return zlib.compress(data)
    return data if isinstance(data, bytes) else bytes(data)


def decompress(data, compression: Compression) -> "bytes | memoryview":
    """The payload ``data`` decompressed; NONE returns a memoryview of ``data`` (no copy).

    Raises CodecError when the data is not a valid frame of that compression.
    """
    compression = Compression.parse(compression)
    try:
        if compression is Compression.LZ4:
            return lz4.frame.decompress(data)
        if compression is Compression.ZSTD:
            return _zstd_decompress(data)
        if compression is Compression.ZLIB:
            return zlib.decompress(data)
    except (RuntimeError, zstandard.ZstdError, zlib.error) as err:
        raise CodecError(f"payload of {len(memoryview(data))} bytes is not a valid {compression.name.lower()} "
                         f"frame: {err}") from None
    return memoryview(data)


def decompress_bounded(data, compression: Compression, max_size: int) -> "bytes | memoryview":
    """``decompress``, refusing a frame of more than ``max_size`` bytes decompressed before
    allocating them (a small frame can claim gigabytes): the size in the frame's header is
    checked first, and a frame without one is decompressed only up to ``max_size + 1`` bytes.

    Raises CodecError saying what is wrong.
    """
    compression = Compression.parse(compression)
    view = memoryview(data).cast("B")
    if compression is Compression.NONE:
        return view
    size = _frame_size(view, compression)
    if size > max_size:
        raise CodecError(f"its {compression.name.lower()} frame says it decompresses to {size} bytes; the largest "
                         f"accepted is {max_size}: send smaller batches")
    if size < 0 and _larger_than(view, compression, max_size):
        raise CodecError(f"its {compression.name.lower()} frame decompresses to more than {max_size} bytes, the "
                         "largest accepted: send smaller batches")
    plain = decompress(view, compression)
    if size >= 0 and len(plain) != size:
        raise CodecError(f"its {compression.name.lower()} frame says {size} bytes decompressed but holds {len(plain)}")
    return plain


def _frame_size(view: memoryview, compression: Compression) -> int:
    """The decompressed size a frame's header gives (read without numpy: one frame is cheaper
    so); -1 when it gives none or is not a frame."""
    try:
        if compression is Compression.LZ4:
            return lz4.frame.get_frame_info(view)["content_size"] or -1
        if compression is Compression.ZLIB:
            return -1  # zlib's stream does not say
        return zstandard.frame_content_size(view)
    except (RuntimeError, zstandard.ZstdError):
        return -1  # not a frame: decompressing it says why


def _larger_than(view: memoryview, compression: Compression, max_size: int) -> bool:
    """Whether a frame whose header does not give its size decompresses to more than
    ``max_size`` bytes; it is decompressed no further than that."""
    try:
        if compression is Compression.LZ4:
            return len(lz4.frame.LZ4FrameDecompressor().decompress(view, max_length=max_size + 1)) > max_size
        if compression is Compression.ZLIB:
            return len(zlib.decompressobj().decompress(view, max_size + 1)) > max_size
        return len(_zstd_decompressor().stream_reader(view).read(max_size + 1)) > max_size
    except (RuntimeError, zstandard.ZstdError, zlib.error):
        return False  # not a valid frame: decompressing it says why


def _zstd_decompress(data) -> bytes:
    decompressor = _zstd_decompressor()
    try:
        return decompressor.decompress(data)
    except zstandard.ZstdError:
        # A frame written without its content size (by another producer) needs the stream API.
        if zstandard.frame_content_size(data) != -1:
            raise
    stream = decompressor.decompressobj()
    out = stream.decompress(data)
    if not stream.eof:
        raise CodecError(f"zstd frame of {len(memoryview(data))} bytes is truncated: it ends mid-frame")
    return out


_LZ4_MAGIC = 0x184D2204  # little-endian
_LZ4_CONTENT_SIZE = 0x08  # FLG bit: an 8-byte content size follows the FLG and BD bytes


class PayloadError(CodecError):
    """A payload of several that does not decompress: ``index`` says which."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


def decompress_all(buf, starts: np.ndarray, lengths: np.ndarray,
                   compressions: list[Compression]) -> tuple[pa.Buffer, np.ndarray]:
    """The payloads ``buf[starts[i]:starts[i] + lengths[i]]`` decompressed one after another
    into one Arrow buffer; and where each starts (``len(starts) + 1`` offsets, the last the end).

    Each payload is copied in as soon as it is decompressed, so that the decompressor's output
    is a small buffer used again and again: holding every decompressed payload at once costs
    fresh pages for each (page faults dominate), while the Arrow pool recycles the large one.
    Raises PayloadError naming the payload that does not decompress.
    """
    view = memoryview(buf).cast("B")
    sizes = _decompressed_sizes(view, starts, lengths, compressions)
    ready = {}  # payloads that do not say their size, decompressed to learn it
    for index in np.flatnonzero(sizes < 0).tolist():
        ready[index] = _decompress_one(index, view[starts[index]:starts[index] + lengths[index]],
                                       compressions[index])
        sizes[index] = len(ready[index])
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = pa.allocate_buffer(int(offsets[-1]))
    into = memoryview(out).cast("B")
    for index, (start, length, compression, at, end) in enumerate(zip(
            starts.tolist(), lengths.tolist(), compressions, offsets[:-1].tolist(), offsets[1:].tolist())):
        plain = ready.get(index) if ready else None
        if plain is None:
            plain = _decompress_one(index, view[start:start + length], compression)
        if len(plain) != end - at:
            raise PayloadError(index, f"payload of {length} bytes is not a valid {compression.name.lower()} frame: "
                                      f"its header says {end - at} bytes, it holds {len(plain)}")
        into[at:end] = plain
    return out, offsets


def decompress_each(buf, starts: np.ndarray, lengths: np.ndarray, compressions: list[Compression]) -> list[pa.Buffer]:
    """The payloads ``buf[starts[i]:starts[i] + lengths[i]]`` decompressed, each into an Arrow
    buffer of its own (NONE: a view of ``buf``).

    Arrow's codecs write into buffers of the Arrow pool, which recycles their pages: holding
    many decompressed payloads at once costs no page faults, and no copy into one buffer.
    Raises PayloadError naming the payload that does not decompress.
    """
    view = memoryview(buf).cast("B")
    sizes = _decompressed_sizes(view, starts, lengths, compressions)
    out = []
    for index, (start, length, compression, size) in enumerate(zip(
            starts.tolist(), lengths.tolist(), compressions, sizes.tolist())):
        data = view[start:start + length]
        if compression is Compression.NONE or size < 0:  # Arrow's codecs need the size
            out.append(pa.py_buffer(_decompress_one(index, data, compression)))
            continue
        try:
            out.append(_ARROW_CODECS[compression].decompress(data, decompressed_size=size))
        except (OSError, pa.ArrowInvalid) as err:
            raise PayloadError(index, f"payload of {length} bytes is not a valid {compression.name.lower()} "
                                      f"frame: {err}") from None
    return out


_ARROW_CODECS = {Compression.LZ4: pa.Codec("lz4"), Compression.ZSTD: pa.Codec("zstd")}  # LZ4: the frame format


def _decompressed_sizes(view: memoryview, starts: np.ndarray, lengths: np.ndarray,
                        compressions: list[Compression]) -> np.ndarray:
    """The size each payload decompresses to, from its frame header (LZ4's read for all at
    once); -1 where the header does not say."""
    kinds = np.fromiter((c.value for c in compressions), dtype=np.int64, count=len(compressions))
    sizes = np.where(kinds == Compression.NONE, lengths, -1)
    lz4_frames = np.flatnonzero(kinds == Compression.LZ4)
    if len(lz4_frames):
        at, length = starts[lz4_frames], lengths[lz4_frames]
        size = read_at(view, at + 6, "<u8", padded=True).astype(np.int64)
        # LZ4 expands at most 255 times: a larger size is a corrupt header, not believed.
        known = ((length >= 14) & (read_at(view, at, "<u4", padded=True) == _LZ4_MAGIC)
                 & ((read_at(view, at + 4, "u1", padded=True) & _LZ4_CONTENT_SIZE) != 0)
                 & (size >= 0) & (size <= 255 * length))
        sizes[lz4_frames[known]] = size[known]
    for index in np.flatnonzero(kinds == Compression.ZSTD).tolist():
        try:
            sizes[index] = zstandard.frame_content_size(view[starts[index]:starts[index] + 18])
        except zstandard.ZstdError:
            pass  # not a frame: decompressing it says why
    return sizes


def _decompress_one(index: int, data, compression: Compression):
    try:
        return decompress(data, compression)
    except ValueError as err:
        raise PayloadError(index, str(err)) from None
