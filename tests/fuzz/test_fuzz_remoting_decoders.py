"""The remoting protocol's decoders, in process: frames cut from a byte stream, command headers
(JSON and ROCKETMQ), fastjson bodies, and the broker's reading of header fields. Each refuses a
hostile input with its documented error only, quickly."""

import struct

from hypothesis import example, given
from hypothesis import strategies as st

from broker_sim.doors.remoting.errors import HeaderFieldError
from broker_sim.doors.remoting.fields import SEND_V2_NAMES, Fields
from rmq_wire.remoting import FrameError, FrameReader, HeaderError, RemotingCommand, decode, encode, fastjson
from strategies import deep_nesting, ext_fields, frame_bodies, frames, hostile, json_texts, remoting_commands
from support.budget import examples
from watch import quick

MAX_FRAME = 1 << 16


@examples(300)
@given(frames(), st.lists(st.integers(1, 64), max_size=8))
def test_frame_reader_cuts_any_stream_or_refuses_it(stream, cuts):
    reader = FrameReader(MAX_FRAME)
    chunks, at = [], 0
    for cut in cuts:
        chunks.append(stream[at:at + cut])
        at += cut
    chunks.append(stream[at:])
    with quick():
        try:
            for chunk in chunks:
                for frame in reader.feed(chunk):
                    assert 4 <= len(frame) <= MAX_FRAME
        except FrameError:
            return
    # what is held back is at most one frame not yet complete
    assert reader.pending_bytes <= 4 + MAX_FRAME


@examples(100)
@given(remoting_commands(), st.integers(1, 7))
def test_frame_reader_gives_back_a_valid_frame_however_it_is_cut(command, piece):
    frame = encode(command)
    reader = FrameReader()
    got = []
    for at in range(0, len(frame), piece):
        got += reader.feed(frame[at:at + piece])
    assert got == [frame[4:]] and reader.pending_bytes == 0


@examples(300)
@given(frame_bodies())
# ROCKETMQ header whose remark takes every byte: no room is left for the extFields length
@example(struct.pack(">i", 1 << 24 | 21) + struct.pack(">hbhii", 10, 0, 0, 1, 0) + struct.pack(">i", 4) + b"abcd")
def test_header_decode_refuses_with_header_error_only(frame):
    with quick():
        try:
            command = decode(frame)
        except HeaderError:
            return
    assert isinstance(command, RemotingCommand)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext_fields.items())


@examples(300)
@given(st.one_of(json_texts.map(str.encode), hostile(json_texts.map(str.encode)), deep_nesting.map(str.encode)))
@example(b'{{"a":[{}]}:1}')  # an object key holding an array: not hashable as it was read
@example(b"{{0:null,{}:null}:null}")  # an object key whose names mix a string and an object
@example(b"[" * 5000)  # nesting deeper than Python's recursion
def test_fastjson_refuses_with_value_error_only(body):
    with quick():
        try:
            fastjson.loads(body)
        except ValueError:
            pass


@examples(300)
@given(ext_fields, st.sampled_from(["topic", "queueId", "b", "e", "maxMsgNums", "sysFlag", "missing"]),
       st.booleans())
def test_header_fields_refuse_with_header_field_error_only(fields, name, short_names):
    request = RemotingCommand(code=310, ext_fields=fields)
    read = Fields(request, SEND_V2_NAMES if short_names else None)
    for get in (read.text, read.integer):
        try:
            get(name)
        except HeaderFieldError:
            pass
    assert isinstance(read.flag(name), bool)
    assert isinstance(read.integer(name, -1) if _is_number(read.values.get(name)) else 0, int)


def _is_number(text) -> bool:
    try:
        int(text)
        return True
    except (TypeError, ValueError):
        return False
