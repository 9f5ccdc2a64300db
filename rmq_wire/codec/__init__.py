"""Batch codecs: how a batch of messages travels and is stored as one payload.

A batch is encoded by a codec (``rmq``: RocketMQ's MessageBatch encoding; ``arrow``: one
Arrow IPC record batch), then compressed as a whole (none, lz4, zstd or zlib). The broker stores
the payload as it is; readers decode it into Arrow columns (``BATCH_SCHEMA``), and stored
records into the read schema (``records.decode_records``).

    payload = encode_batch(table, "arrow", "lz4")
    batch = decode_batch(payload, "arrow", "lz4", count=table.num_rows)
"""

from __future__ import annotations

import enum

import pyarrow as pa

from rmq_wire.codec import arrow, rmq
from rmq_wire.codec.columns import BATCH_SCHEMA, PROPERTIES_TYPE, to_batch_columns
from rmq_wire.codec.compression import compress, decompress, decompress_bounded
from rmq_wire.codec.properties import SYSTEM_PROPERTIES
from rmq_wire.errors import CodecError
from rmq_wire.record import Compression

__all__ = [
    "BATCH_SCHEMA", "MAX_DECOMPRESSED_BYTES", "PROPERTIES_TYPE", "SYSTEM_PROPERTIES", "Codec", "Compression",
    "check_batch", "compress", "decode_batch", "decompress", "encode_batch", "encode_messages", "encode_pieces",
]

# The largest batch payload once decompressed: a few KiB of zstd can claim gigabytes.
MAX_DECOMPRESSED_BYTES = 64 << 20


class Codec(enum.Enum):
    """The encoding of a batch payload; the value is the stored BATCH_CODEC property."""

    RMQ = "rmq"
    ARROW = "arrow"

    @classmethod
    def parse(cls, value: "Codec | str | None") -> "Codec":
        """The codec named by ``value`` ("rmq" or "arrow", any case); ``None`` means rmq.

        Raises CodecError naming the accepted values.
        """
        if value is None:
            return cls.RMQ
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            codec = cls._value2member_map_.get(value.strip().lower())  # a lookup: the broker parses every batch's
            if codec is not None:
                return codec
        raise CodecError(f"unknown codec {value!r}; use one of: {', '.join(c.value for c in cls)}")


_ENCODERS = {Codec.RMQ: rmq.encode, Codec.ARROW: arrow.encode}
_DECODERS = {Codec.RMQ: rmq.decode, Codec.ARROW: arrow.decode}


def encode_batch(columns: "pa.Table | pa.RecordBatch", codec: "Codec | str", compression: "Compression | str") -> bytes:
    """The payload of one inner batch: ``columns`` encoded by ``codec``, then compressed.

    Parameters
    ----------
    columns : pyarrow.Table or pyarrow.RecordBatch
        A ``body`` column (binary or string, no nulls) and optionally ``keys``, ``tags``
        (string), ``properties`` (map<string, string>) and ``born_timestamp`` (int64 ms or a
        timestamp). Other columns are ignored.
    codec : Codec or str
    compression : Compression or str

    Returns
    -------
    bytes
        The payload to send; decode it with the same codec and compression.

    Raises
    ------
    CodecError
        For a missing or null body, columns of the wrong type, and (rmq) property names or
        values that RocketMQ's encoding cannot carry.
    """
    codec, compression = Codec.parse(codec), Compression.parse(compression)
    encoded = _ENCODERS[codec](to_batch_columns(columns))
    return compress(encoded, compression)


def encode_pieces(columns: pa.RecordBatch, bounds, codec: "Codec | str", compression: "Compression | str",
                  unique_keys: pa.Array | None = None) -> list:
    """The payloads of runs of rows of ``columns`` (in ``BATCH_SCHEMA``, see
    ``to_batch_columns``): one per ``(start, stop)`` of ``bounds``, each as ``encode_batch``
    of those rows would make it. The rows are encoded once (rmq) or sliced without copying
    (arrow), so cutting a large batch into many small ones costs no per-piece pass over it.
    ``unique_keys`` (rmq only): each row's UNIQ_KEY.
    """
    codec, compression = Codec.parse(codec), Compression.parse(compression)
    if unique_keys is not None and codec is not Codec.RMQ:
        raise CodecError("unique keys (UNIQ_KEY) are properties of RocketMQ's encoding: use the rmq codec")
    if codec is Codec.RMQ:
        data, offsets = rmq.encode_with_offsets(columns, unique_keys)
        view = memoryview(data)
        return [compress(view[int(offsets[a]):int(offsets[b])], compression) for a, b in bounds]
    return [compress(arrow.encode(columns.slice(a, b - a)), compression) for a, b in bounds]


def encode_messages(messages, codec: "Codec | str", compression: "Compression | str") -> bytes:
    """``encode_batch`` for a list of ``(body, properties, keys, tags, born_timestamp_ms)``.

    ``body`` is bytes (or str, encoded UTF-8); ``properties`` a dict of strings or None;
    ``keys``, ``tags`` str or None; ``born_timestamp_ms`` int or None.
    """
    codec, compression = Codec.parse(codec), Compression.parse(compression)
    bodies, properties, keys, tags, born = [], [], [], [], []
    for index, message in enumerate(messages):
        try:
            body, props, key, tag, born_ms = message
        except (TypeError, ValueError):
            raise CodecError(f"message {index}: expected (body, properties, keys, tags, born_timestamp_ms), "
                             f"got {message!r:.80}") from None
        if not isinstance(body, (bytes, bytearray, memoryview, str)):
            raise CodecError(f"message {index}: the body must be bytes or str, got {type(body).__name__}")
        bodies.append(body.encode() if isinstance(body, str) else body)
        properties.append(list(props.items()) if props else [])
        keys.append(key)
        tags.append(tag)
        born.append(born_ms)
    if codec is Codec.RMQ:  # rmq carries no born timestamp
        return compress(rmq.encode_rows(zip(bodies, properties, keys, tags)), compression)
    table = pa.RecordBatch.from_arrays([
        pa.array(bodies, pa.binary()), pa.array(keys, pa.string()), pa.array(tags, pa.string()),
        pa.array(properties, PROPERTIES_TYPE), pa.array(born, pa.int64()),
    ], schema=BATCH_SCHEMA)
    return encode_batch(table, codec, compression)


def decode_batch(payload, codec: "Codec | str", compression: "Compression | str", count: int | None) -> pa.RecordBatch:
    """The messages of one inner batch payload, as a record batch in ``BATCH_SCHEMA``.

    Parameters
    ----------
    payload : bytes-like
        The payload, compressed as ``compression`` says.
    codec : Codec or str
    compression : Compression or str
    count : int or None
        The number of messages the batch must hold (its INNER_NUM); None skips the check.

    Returns
    -------
    pyarrow.RecordBatch
        body (binary), keys and tags (string, null when absent), properties (the user's
        properties: never TAGS, KEYS or broker properties), born_timestamp (int64 ms, null
        when the codec does not carry it: rmq). An uncompressed arrow payload is decoded
        without copying: the result then refers to ``payload``'s memory.

    Raises
    ------
    CodecError
        For a payload that does not decompress or parse (saying where and why), or whose
        message count differs from ``count``.
    """
    codec, compression = Codec.parse(codec), Compression.parse(compression)
    batch = _DECODERS[codec](decompress(payload, compression))
    if count is not None:
        _check_count(codec, batch.num_rows, count)
    return batch


def check_batch(payload, codec: "Codec | str", compression: "Compression | str | int", count: int, *,
                max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES) -> None:
    """Check that an inner batch payload decodes as ``decode_batch`` and the readers decode
    it, into exactly ``count`` messages, without building its columns: the broker runs it on
    every inner batch it is sent, before storing it.

    It decompresses (refusing more than ``max_decompressed_bytes``), then rmq: every entry's
    TOTALSIZE, BODYLEN and PROPLEN agree and the last entry ends at the payload's end; arrow:
    one IPC stream of one record batch with a body column, whose buffers are valid.

    Raises CodecError saying what is wrong.
    """
    codec, compression = Codec.parse(codec), Compression.parse(compression)
    plain = decompress_bounded(payload, compression, max_decompressed_bytes)
    if codec is Codec.RMQ:
        found = rmq.count(plain)
    else:
        batch = arrow.decode(plain)
        try:
            batch.validate(full=True)  # offsets inside their buffers, valid UTF-8: what readers rely on
        except pa.ArrowException as err:
            raise CodecError(f"arrow batch payload has invalid columns: {err}") from None
        found = batch.num_rows
    _check_count(codec, found, count)


def _check_count(codec: Codec, found: int, count: int) -> None:
    if found != count:
        raise CodecError(f"{codec.value} batch holds {found} messages where {count} were expected "
                         "(its INNER_NUM): the payload or the count is wrong")
