"""The arrow batch encoding: one Arrow IPC stream holding one record batch.

Columns, as ``columns.BATCH_SCHEMA``: body binary, keys string, tags string, properties
map<string, string>, born_timestamp int64 (milliseconds since the Unix epoch, UTC; int64
rather than a timestamp type so that the payload needs no unit or zone conversion either way).
Nulls mean "absent". The stream is not compressed by Arrow: the whole payload is, by the codec.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from rmq_wire.codec.columns import BATCH_SCHEMA, to_batch_columns
from rmq_wire.errors import CodecError


class ArrowPayloadError(CodecError):
    """An arrow batch payload that does not read; the message says why, ``payload`` which of
    those decoded together."""

    payload = 0


def encode(batch: pa.RecordBatch) -> pa.Buffer:
    """The IPC stream of ``batch`` (in ``BATCH_SCHEMA``), uncompressed."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BATCH_SCHEMA) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _schema_message(schema: pa.Schema) -> pa.Buffer:
    """The metadata of the schema message that ``encode`` writes first."""
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, schema).close()
    return pa.ipc.MessageReader.open_stream(sink.getvalue()).read_next_message().metadata


# A payload of this SDK starts with this message: recognizing it skips parsing the schema.
_BATCH_SCHEMA_MESSAGE = _schema_message(BATCH_SCHEMA)


def _stream_head(schema: pa.Schema) -> bytes:
    """The bytes ``encode`` writes before the record batch: the framed schema message."""
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, schema).close()
    return sink.getvalue().to_pybytes()[:-len(_END_OF_STREAM)]


_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # continuation marker, length 0
_END_BUFFER = pa.py_buffer(_END_OF_STREAM)
_HEAD = _stream_head(BATCH_SCHEMA)
_HEAD_BUFFER = pa.py_buffer(_HEAD)


def decode(payload) -> pa.RecordBatch:
    """The record batch of an arrow payload (uncompressed), in ``BATCH_SCHEMA``.

    Zero copy: the columns are views of ``payload``, which must not change while they live.
    Raises ArrowPayloadError when the stream does not read, does not hold exactly one
    record batch, or lacks a body column.
    """
    try:
        messages = pa.ipc.MessageReader.open_stream(pa.py_buffer(payload))
        first = _next_message(messages, "schema")
        if first.metadata.equals(_BATCH_SCHEMA_MESSAGE):
            schema = BATCH_SCHEMA
        else:
            schema = pa.ipc.read_schema(first)
        batch = _read_record_batch(_next_message(messages, "record batch"), schema)
        try:
            messages.read_next_message()
        except StopIteration:
            pass
        else:
            raise ArrowPayloadError("arrow batch payload holds more than one record batch; the encoding has one")
    except (pa.ArrowException, OSError) as err:  # ArrowInvalid, and ArrowNotImplementedError for a type it lacks
        raise ArrowPayloadError(f"arrow batch payload of {len(memoryview(payload))} bytes is not a readable "
                                f"Arrow IPC stream: {err}") from None
    if schema is BATCH_SCHEMA:
        return batch
    try:
        return to_batch_columns(batch)
    except (ValueError, pa.ArrowException) as err:
        raise ArrowPayloadError(f"arrow batch payload: {err}") from None


def _next_message(messages: pa.ipc.MessageReader, expected: str) -> pa.ipc.Message:
    try:
        message = messages.read_next_message()
    except StopIteration:
        raise ArrowPayloadError(f"arrow batch payload ends before its {expected} message") from None
    if message.type != expected:
        raise ArrowPayloadError(f"arrow batch payload holds a {message.type} message where its {expected} "
                                "message should be (dictionary-encoded columns are not supported)")
    return message


def decode_payloads(payloads: list[pa.Buffer]) -> list[pa.RecordBatch]:
    """The record batch of each arrow payload (uncompressed), as ``decode``.

    A payload laid out as ``encode`` writes it is read as one message, with no stream reader
    and no schema to parse; any other goes through ``decode``. Zero copy: the batches are views
    of the payloads. Raises ArrowPayloadError with ``payload`` set to the index of the bad one.
    """
    batches = []
    for index, payload in enumerate(payloads):
        try:
            batch = _read_as_encoded(payload)
            batches.append(_valid(batch if batch is not None else decode(payload)))
        except ArrowPayloadError as err:
            err.payload = index
            raise
    return batches


def _valid(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` once its offsets are known to lie inside their buffers, in order, and its
    strings to be UTF-8 (~40 ns a row): the columns are gathered by those offsets, and a payload
    from a broker is a peer's input like any other (the broker checks the same at its door)."""
    try:
        batch.validate(full=True)
    except pa.ArrowException as err:
        raise ArrowPayloadError(f"arrow batch payload has invalid columns: {err}") from None
    return batch


def _read_as_encoded(payload: pa.Buffer) -> pa.RecordBatch | None:
    """The record batch of a payload that is ``_HEAD``, one record batch message and the end of
    stream marker; None for any other (``decode`` then reads it or says what is wrong)."""
    rest = payload.size - len(_HEAD) - len(_END_OF_STREAM)
    if (rest < 8 or not payload.slice(0, len(_HEAD)).equals(_HEAD_BUFFER)
            or not payload.slice(payload.size - len(_END_OF_STREAM)).equals(_END_BUFFER)):
        return None
    try:
        message = pa.ipc.read_message(payload.slice(len(_HEAD), rest))
        # continuation and length (8 bytes), metadata, body: the message must fill ``rest``
        if message.type != "record batch" or 8 + message.metadata.size + message.body.size != rest \
                or _body_compressed(message.metadata):
            return None
        return pa.ipc.read_record_batch(message, BATCH_SCHEMA)
    except (pa.ArrowInvalid, OSError):
        return None


def _read_record_batch(message: pa.ipc.Message, schema: pa.Schema) -> pa.RecordBatch:
    """The record batch of ``message``, refused when Arrow's own IPC compression shrank its
    buffers: each declares its inflated size (a few KiB can claim gigabytes, past the payload's
    bounded decompression), and this encoding leaves compression to the payload."""
    if _body_compressed(message.metadata):
        raise ArrowPayloadError("arrow batch payload compresses its buffers with Arrow's own IPC compression, which "
                                "this encoding does not use: write the stream without IpcWriteOptions(compression=...) "
                                "and choose the batch's compression (lz4, zstd) instead")
    return pa.ipc.read_record_batch(message, schema)


# Slots of the flatbuffer tables of Arrow's Message.fbs: Message.header (after its union type)
# and RecordBatch.compression (a BodyCompression, absent when the buffers are not compressed).
_MESSAGE_HEADER_SLOT = 2
_RECORD_BATCH_COMPRESSION_SLOT = 3


def _body_compressed(metadata: pa.Buffer) -> bool:
    """Whether a record batch message's metadata (a flatbuffer Arrow has verified) names a
    body compression."""
    buf = memoryview(metadata)
    try:
        (root,) = struct.unpack_from("<I", buf, 0)
        header_at = root + _field_offset(buf, root, _MESSAGE_HEADER_SLOT)
        record_batch = header_at + struct.unpack_from("<I", buf, header_at)[0]
        return _field_offset(buf, record_batch, _RECORD_BATCH_COMPRESSION_SLOT) != 0
    except struct.error:
        return True  # not a flatbuffer we can read: never inflate it


def _field_offset(buf: memoryview, table: int, slot: int) -> int:
    """Where field ``slot`` of the flatbuffer table at ``table`` lies, relative to it; 0 when absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    if vtable < 0:
        raise struct.error("a vtable before the buffer")
    (vtable_size,) = struct.unpack_from("<H", buf, vtable)
    at = 4 + 2 * slot
    return struct.unpack_from("<H", buf, vtable + at)[0] if at < vtable_size else 0
