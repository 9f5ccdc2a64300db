"""Hostile inputs for every decoder a peer can reach, in one place: random bytes, valid
inputs of each kind, and those valid inputs mutated (bytes flipped, lengths set to extremes,
cut short, spliced). Mutating a valid input reaches past a decoder's first check, where random
bytes seldom get."""

from __future__ import annotations

import json
import struct
import time
import zlib

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from rmq_wire import record as fmt
from rmq_wire.codec import encode_messages
from rmq_wire.remoting import RemotingCommand, SerializeType, encode

# Lengths and counts a hostile peer declares: zero, negative, one past, the largest.
EXTREME_INTS = [0, 1, -1, 2, 3, 4, 7, 8, 22, 91, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
                0xFFFFFF, 0x1000000, 0x7FFFFFFF, -0x80000000]
_INT32 = struct.Struct(">i")
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_SHORT_TEXT = st.text("abcAZ09_-%@#:\x01\x02 ", max_size=8)


@st.composite
def mutated(draw, base: bytes, max_steps: int = 4) -> bytes:
    """``base`` changed in 1 to ``max_steps`` places."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, max_steps))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        kind = draw(st.sampled_from(["flip", "byte", "int32", "cut", "insert", "delete", "repeat"]))
        if kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        elif kind == "repeat":
            data[at:at] = data[at:at + draw(st.integers(1, 64))]
        elif not data:
            data += draw(st.binary(min_size=1, max_size=8))
        elif kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, ord("{"), ord("["), ord('"')]))
        else:  # a 4-byte length or count set to an extreme
            value = draw(st.sampled_from(EXTREME_INTS + [len(data), len(data) - at, len(data) - at - 4]))
            data[at:at + 4] = _INT32.pack(_int32(value))
    return bytes(data)


def _int32(value: int) -> int:
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def hostile(valid: st.SearchStrategy, max_random_bytes: int = 512) -> st.SearchStrategy:
    """Random bytes, inputs of ``valid`` as they are, or mutated."""
    return st.one_of(st.binary(max_size=max_random_bytes), valid, valid.flatmap(mutated))


# --- remoting --------------------------------------------------------------------------------

ANY_CODE = st.integers(-0x8000, 0x7FFF)  # a request code as the wire's signed short
ext_fields = st.dictionaries(st.one_of(_SHORT_TEXT, st.sampled_from(["topic", "queueId", "b", "e", "consumerGroup",
                                                                     "queueOffset", "maxMsgNums", "sysFlag"])),
                             st.one_of(_SHORT_TEXT, st.integers(-2**40, 2**40).map(str),
                                       st.sampled_from([str(v) for v in EXTREME_INTS])), max_size=6)


# Request bodies are JSON objects (HeartbeatData, LockBatchRequestBody, ...) of these names: JSON
# of their shape with values of any type reaches past "is it JSON".
_BODY_NAMES = ["clientID", "clientId", "producerDataSet", "consumerDataSet", "groupName", "subscriptionDataSet",
               "topic", "subString", "messageModel", "mqSet", "consumerGroup", "brokerName", "queueId",
               "consumeMessageOrderly", "topicConfigSerializeWrapper", "topicConfigTable", "writeQueueNums"]
_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), _SHORT_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(st.sampled_from(_BODY_NAMES), _SHORT_TEXT), inner, max_size=4)),
    max_leaves=16)
json_bodies = _json_values.map(lambda value: json.dumps(value).encode())
remoting_bodies = st.one_of(st.binary(max_size=64), json_bodies,
                            st.lists(st.tuples(st.binary(max_size=24), st.just({}), st.just(0)), min_size=1,
                                     max_size=3).map(fmt.encode_message_batch).flatmap(
                                         lambda batch: st.sampled_from([batch, zlib.compress(batch)])))


@st.composite
def remoting_commands(draw, codes: st.SearchStrategy = ANY_CODE) -> RemotingCommand:
    return RemotingCommand(code=draw(codes), opaque=draw(st.integers(-2**31, 2**31 - 1)),
                           flag=draw(st.sampled_from([0, 0, 0, 1, 2, 3])), ext_fields=draw(ext_fields),
                           body=draw(remoting_bodies), remark=draw(st.none() | _TEXT),
                           serialize_type=draw(st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])))


def frames(codes: st.SearchStrategy = ANY_CODE) -> st.SearchStrategy:
    """Whole remoting frames (their total length first), valid or not."""
    return hostile(remoting_commands(codes).map(encode))


def frame_bodies(codes: st.SearchStrategy = ANY_CODE) -> st.SearchStrategy:
    """What ``command.decode`` is given: a frame without its total length."""
    return hostile(remoting_commands(codes).map(lambda command: encode(command)[4:]))


# JSON and what fastjson writes: bare number keys, objects and arrays as keys.
json_texts = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _TEXT).map(json.dumps),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(inner, inner), max_size=4).map(
            lambda pairs: "{" + ",".join(f"{key}:{value}" for key, value in pairs) + "}")),
    max_leaves=20)
deep_nesting = st.tuples(st.sampled_from("[{"), st.integers(1, 200_000)).map(
    lambda pair: (pair[0] if pair[0] == "[" else '{"a":') * pair[1])


# --- batch payloads --------------------------------------------------------------------------

CODECS = ["rmq", "arrow"]
COMPRESSIONS = ["none", "lz4", "zstd", "zlib"]

_properties = st.dictionaries(st.text("abcXYZ_", min_size=1, max_size=6), st.text("abc xyz", max_size=6), max_size=3)
batch_messages = st.lists(st.tuples(st.binary(max_size=64), _properties, st.none() | st.text("k y", max_size=5),
                                    st.none() | st.text("tag", max_size=4), st.none() | st.integers(0, 2**41)),
                          min_size=1, max_size=6)


@st.composite
def batch_payloads(draw, codec: str, compression: str) -> tuple[bytes, int]:
    """A valid payload of ``codec`` and ``compression``, and how many messages it holds."""
    messages = draw(batch_messages)
    return encode_messages(messages, codec, compression), len(messages)


# --- stored records --------------------------------------------------------------------------

@st.composite
def stored_records(draw) -> bytes:
    """A record as the commitlog writes it (both CRCs right), as recovery and reads meet it: a
    single message, or an inner batch of either codec and any compression."""
    properties = draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "x"]), st.sampled_from(["a", "a b", ""]),
                                      max_size=2))
    if draw(st.booleans()):
        body, sys_flag = draw(st.binary(max_size=96)), 0
    else:
        codec, compression = draw(st.sampled_from(CODECS)), draw(st.sampled_from(COMPRESSIONS))
        body, count = draw(batch_payloads(codec, compression))
        properties.update(INNER_NUM=str(draw(st.sampled_from([count, count, 0, count + 1]))), BATCH_CODEC=codec)
        sys_flag = fmt.SysFlag.INNER_BATCH | fmt.Compression.parse(compression).sys_flag()
    return record_bytes(body, draw(st.text("abcT_%", min_size=1, max_size=12)), fmt.encode_properties(properties),
                        sys_flag, draw(st.integers(0, 2**40)))


def record_bytes(body: bytes, topic: str, properties: bytes, sys_flag: int, queue_offset: int) -> bytes:
    """The bytes the commitlog writes for one record (CommitLog._write)."""
    topic_raw = topic.encode()
    total = fmt.record_size(len(body), len(topic_raw), len(properties))
    header = fmt.HEADER.pack(total, fmt.MAGIC_V1, fmt.body_crc(body), 0, 0, queue_offset, 0, sys_flag,
                             int(time.time() * 1000), bytes(8), 0, bytes(8), 0, 0, len(body))
    after_body = (bytes([len(topic_raw)]) + topic_raw + struct.pack(">h", len(properties) + fmt.CRC_RESERVED_BYTES)
                  + properties)
    return header + body + after_body + fmt.crc_property(fmt.record_crc(header, after_body))


# --- receipt handles -------------------------------------------------------------------------

_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
handle_texts = st.one_of(st.text(max_size=80), st.text(_BASE64 + "#:", max_size=120))


# --- protobuf requests -----------------------------------------------------------------------

_SCALARS = {
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_STRING: st.one_of(_SHORT_TEXT, _TEXT, st.sampled_from(["fuzz", "%RETRY%g", "*", "a||b"])),
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=64),
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32, allow_nan=True),
}
_INT_RANGES = {FieldDescriptor.TYPE_INT32: 31, FieldDescriptor.TYPE_SINT32: 31, FieldDescriptor.TYPE_SFIXED32: 31,
               FieldDescriptor.TYPE_UINT32: 0, FieldDescriptor.TYPE_FIXED32: 0, FieldDescriptor.TYPE_INT64: 63,
               FieldDescriptor.TYPE_SINT64: 63, FieldDescriptor.TYPE_SFIXED64: 63, FieldDescriptor.TYPE_UINT64: 0,
               FieldDescriptor.TYPE_FIXED64: 0}


def _integers(field: FieldDescriptor) -> st.SearchStrategy:
    bits = _INT_RANGES[field.type]
    low, high = (-(1 << bits), (1 << bits) - 1) if bits else (0, (1 << (32 if "32" in _type_name(field) else 64)) - 1)
    edges = [v for v in EXTREME_INTS + [low, high, 10_000, 60_000] if low <= v <= high]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _type_name(field: FieldDescriptor) -> str:
    return {v: k for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}[field.type]


def _field_values(field: FieldDescriptor, depth: int) -> st.SearchStrategy:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return proto_messages(field.message_type, depth - 1)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 100))
    if field.type in _INT_RANGES:
        return _integers(field)
    return _SCALARS[field.type]


@st.composite
def proto_messages(draw, descriptor, depth: int = 3):
    """A message of ``descriptor`` with random fields set (nested ones to ``depth``), as dict
    kwargs are awkward for maps and oneofs: it is built field by field."""
    message = GetMessageClass(descriptor)()
    if depth <= 0:
        return message
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name
            key_field, value_field = entry["key"], entry["value"]
            pairs = st.tuples(_field_values(key_field, depth), _field_values(value_field, depth))
            for key, value in draw(st.lists(pairs, max_size=3)):
                target = getattr(message, field.name)
                if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                    target[key].CopyFrom(value)
                else:
                    target[key] = value
        elif _is_repeated(field):
            values = draw(st.lists(_field_values(field, depth), max_size=3))
            target = getattr(message, field.name)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                for value in values:
                    target.add().CopyFrom(value)
            else:
                target.extend(values)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(message, field.name).CopyFrom(draw(_field_values(field, depth)))
        else:
            setattr(message, field.name, draw(_field_values(field, depth)))
    return message


def _is_repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):  # protobuf 6.32+, where label is deprecated
        return field.is_repeated
    return field.label == FieldDescriptor.LABEL_REPEATED


def request_bytes(descriptor) -> st.SearchStrategy:
    """A request of ``descriptor`` as the wire carries it: random fields, mutated, or random bytes."""
    return hostile(proto_messages(descriptor).map(lambda message: message.SerializeToString()))
