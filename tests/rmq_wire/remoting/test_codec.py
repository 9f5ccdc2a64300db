"""RocketMQ's remoting frames: both header serializations round-trip, and every malformed
frame or header is a clear error (FrameError: the stream cannot go on; HeaderError: answerable)."""

import struct

import pytest

from rmq_wire.remoting import (
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    HeaderError,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
)


@pytest.mark.parametrize("kind", list(SerializeType))
def test_a_command_round_trips(kind):
    command = RemotingCommand(310, 77, 0, {"a": "group", "b": "Tü", "i": "TAGS\x01x\x02"}, b"\x00body", "why",
                              "CPP", 473, kind)
    frame = encode(command)
    (total,) = struct.unpack_from(">i", frame)
    assert total == len(frame) - 4
    assert frame[4] == kind
    back = decode(frame[4:])
    assert back == command


def test_java_codes_above_a_short_wrap_in_the_binary_header_as_java_writes_them():
    back = decode(encode(RemotingCommand(200050, serialize_type=SerializeType.ROCKETMQ))[4:])
    assert back.code == struct.unpack(">h", struct.pack(">H", 200050 & 0xFFFF))[0]


def test_json_headers_from_other_clients_are_read_leniently():
    header = b'{"code":34,"opaque":5,"flag":0,"language":"CPP","extFields":{"n":7,"b":true}}'
    frame = struct.pack(">i", len(header)) + header + b"body"
    command = decode(frame)
    assert (command.code, command.opaque, command.language, command.body) == (34, 5, "CPP", b"body")
    assert command.ext_fields == {"n": "7", "b": "true"}


def test_the_reader_cuts_frames_across_reads_and_together():
    frames = b"".join(encode(RemotingCommand(i, i)) for i in range(3))
    reader = FrameReader()
    got = reader.feed(frames[:7]) + reader.feed(frames[7:-1]) + reader.feed(frames[-1:])
    assert [decode(f).opaque for f in got] == [0, 1, 2]
    assert reader.pending_bytes == 0


@pytest.mark.parametrize("length", [0, 3, -1, MAX_FRAME_BYTES + 1])
def test_a_length_no_frame_may_have_cannot_be_read_on(length):
    with pytest.raises(FrameError, match="frames hold 4 to"):
        FrameReader().feed(struct.pack(">i", length) + b"x" * 8)


@pytest.mark.parametrize("frame, says", [
    (struct.pack(">I", 9) + b"{}", "header length 9 is more than"),
    (struct.pack(">I", 2 << 24 | 2) + b"{}", "serialization type 2 is unknown"),
    (struct.pack(">I", 5) + b"{code", "not valid JSON"),
    (struct.pack(">I", 2) + b"[]", "not an object"),
    (struct.pack(">I", 12) + b'{"opaque":3}', "code is None"),
    (struct.pack(">I", 1 << 24 | 4) + b"\x00\x01\x00\x00", "cut short"),
    (b"\x00", "no header length"),
])
def test_a_malformed_header_says_what_is_wrong(frame, says):
    with pytest.raises(HeaderError, match=says):
        decode(frame)


def test_a_binary_header_whose_strings_overrun_it_is_refused_with_its_opaque():
    fixed = struct.pack(">hbhii", 10, 0, 0, 42, 0)
    header = fixed + struct.pack(">i", 1000) + b"x" * 8
    with pytest.raises(HeaderError, match="remark is 1000 bytes long") as raised:
        decode(struct.pack(">I", 1 << 24 | len(header)) + header)
    assert raised.value.opaque == 42


def test_a_binary_header_whose_remark_leaves_no_room_for_the_extfields_length_is_refused():
    header = struct.pack(">hbhii", 10, 0, 0, 42, 0) + struct.pack(">i", 4) + b"abcd"  # found by tests/fuzz
    with pytest.raises(HeaderError, match="inside the length of its extFields") as raised:
        decode(struct.pack(">I", 1 << 24 | len(header)) + header)
    assert raised.value.opaque == 42
