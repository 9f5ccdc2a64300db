"""Answers serialized by hand where protobuf would copy large payloads several times.

A large bytes field (stored records) made through protobuf is copied into the message, then
again by serialization. Protobuf's wire format lets fields come in any order and be
concatenated, so the bytes field is written here, FIRST, copied once, straight from the
store's views, and the other fields are serialized by protobuf after it. (First, so that a
client can take the field as a slice of what it received, without a copy: see
rmq_spark/consumer/pop_consumer.py.) Handlers return such ``bytes``; the broker's serializer
passes bytes through as they are.
"""

from __future__ import annotations

_LENGTH_DELIMITED = 2


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def with_bytes_field(message, field_number: int, parts: list) -> bytes:
    """``message`` serialized, with bytes field ``field_number`` set to the concatenated
    ``parts`` (bytes-like) and written first; the field must be unset in ``message``."""
    size = sum(len(part) for part in parts)
    if not size:
        return message.SerializeToString()
    key = varint(field_number << 3 | _LENGTH_DELIMITED)
    return b"".join([key, varint(size), *parts, message.SerializeToString()])


def serializer(message_type):
    """The response serializer of a handler: messages as protobuf does, bytes as they are."""
    serialize = message_type.SerializeToString

    def serialize_response(response) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serialize_response
