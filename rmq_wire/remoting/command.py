"""RocketMQ's remoting frame and command (RemotingCommand, RocketMQSerializable).

A frame on the wire::

    total length 4 | serialization type 1 | header length 3 | header | body

``total length`` counts everything after itself. The header is a JSON object (RocketMQ's
default) or RocketMQ's binary ROCKETMQ serialization; it holds the command's code, language,
version, opaque (a request's id, echoed by its response), flag (bit 0 response, bit 1 oneway),
remark and extFields, the request's or response's custom header as strings.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import orjson

from rmq_wire.remoting.codes import LANGUAGE_CODES, LANGUAGES, SerializeType

MAX_FRAME_BYTES = 16 * 1024 * 1024  # NettyDecoder's default frame maximum (frameMaxLength)
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
_FRAME_HEAD = struct.Struct(">iI")  # total length, serialization type << 24 | header length
_BINARY_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


class FrameError(ValueError):
    """The byte stream cannot be read on (a length no frame may have): close the connection."""


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what an HTTP/2 (gRPC) client sends first


class WrongProtocolError(FrameError):
    """The peer speaks HTTP/2 (gRPC), not RocketMQ's remoting protocol: a gRPC client at a
    remoting port (``peer_is_client``), or a remoting client at a gRPC port."""

    def __init__(self, message: str, peer_is_client: bool, received: bytes = b""):
        super().__init__(message)
        self.peer_is_client = peer_is_client
        self.received = received  # what the peer sent so far


def http2_peer(start: bytes) -> bool | None:
    """Whether the first bytes of a connection are HTTP/2's: True for a client's preface, False
    for a server's first SETTINGS frame (a header length of 0 or 1 << 24, which no remoting
    frame has), None for neither (or too few bytes to tell)."""
    if len(start) >= 4 and HTTP2_PREFACE.startswith(bytes(start[:len(HTTP2_PREFACE)])):
        return True
    if len(start) >= 9 and start[3] == 0x04 and start[4] in (0, 1) and bytes(start[5:9]) == b"\0\0\0\0":
        return False
    return None


class HeaderError(ValueError):
    """A whole frame was read but its header is not a command; ``opaque`` is the request's id
    when it could be read (answer it), else None."""

    def __init__(self, message: str, opaque: int | None = None):
        super().__init__(message)
        self.opaque = opaque


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are strings, as on the wire. ``account``
    is not on the wire: a broker that checks ACLs sets it to the access key that signed the request."""

    code: int
    opaque: int = 0
    flag: int = 0
    ext_fields: dict = field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    language: str = "JAVA"
    version: int = 0
    serialize_type: SerializeType = SerializeType.JSON
    account: str | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(self, code: int, remark: str | None = None, ext_fields: dict | None = None,
                 body: bytes = b"") -> "RemotingCommand":
        """The response to this request: its opaque and serialization, the response flag."""
        return RemotingCommand(code, self.opaque, FLAG_RESPONSE, ext_fields or {}, body, remark,
                               serialize_type=self.serialize_type, version=self.version)

    def field(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)


def encode(command: RemotingCommand) -> bytes:
    """The whole frame of ``command``, its total length first."""
    if command.serialize_type is SerializeType.ROCKETMQ:
        header = _encode_binary(command)
    else:
        header = _encode_json(command)
    body = command.body
    return b"".join((_FRAME_HEAD.pack(4 + len(header) + len(body), command.serialize_type << 24 | len(header)),
                     header, body))


def decode(frame) -> RemotingCommand:
    """The command in ``frame`` (the bytes after the total length). Raises HeaderError."""
    if len(frame) < 4:
        raise HeaderError(f"a frame of {len(frame)} bytes has no header length: a frame holds at least 4 bytes")
    (word,) = _INT.unpack_from(frame, 0)
    kind, header_len = (word >> 24) & 0xFF, word & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise HeaderError(f"the header length {header_len} is more than the {len(frame) - 4} bytes the frame holds")
    header = bytes(frame[4:4 + header_len])
    if kind == SerializeType.JSON:
        command = _decode_json(header)
    elif kind == SerializeType.ROCKETMQ:
        command = _decode_binary(header)
    else:
        raise HeaderError(f"serialization type {kind} is unknown: RocketMQ's are 0 (JSON) and 1 (ROCKETMQ)")
    command.body = bytes(frame[4 + header_len:])
    return command


class FrameReader:
    """Cuts a byte stream into frames (each without its total length)."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._started = False  # the connection's first frame is checked for HTTP/2

    def feed(self, data) -> list[bytes]:
        """The frames completed by ``data`` (bytes, or a buffer such as a memoryview, which
        is not kept). Raises FrameError on a length no frame may have, WrongProtocolError when
        the connection opens in HTTP/2 (gRPC)."""
        buffer = self._buffer
        if buffer or not self._started:
            buffer += data
            source = buffer
            if not self._started and len(buffer) >= 9:
                self._started = True
                peer_is_client = http2_peer(buffer)
                if peer_is_client is not None:
                    raise WrongProtocolError("the peer speaks HTTP/2 (gRPC), not RocketMQ's remoting protocol",
                                             peer_is_client, bytes(buffer))
        else:  # nothing held back: frames are cut from ``data`` itself, each copied once
            source = data
        frames, pos = [], 0
        with memoryview(source) as view:
            end = len(view)
            while end - pos >= 4:
                (length,) = _INT.unpack_from(view, pos)
                if length < 4 or length > self.max_frame_bytes:
                    raise FrameError(f"a frame of {length} bytes: frames hold 4 to {self.max_frame_bytes} bytes "
                                     "after their length")
                if end - pos - 4 < length:
                    break
                frames.append(bytes(view[pos + 4:pos + 4 + length]))
                pos += 4 + length
            if source is not buffer and pos < end:
                buffer += view[pos:]  # a frame's start: held until the rest comes
        if source is buffer and pos:
            del buffer[:pos]
        return frames

    @property
    def pending_bytes(self) -> int:
        """Bytes of a frame not yet complete (a connection closing with these was cut short)."""
        return len(self._buffer)


# --- JSON ------------------------------------------------------------------------------------

def _encode_json(command: RemotingCommand) -> bytes:
    header = {"code": command.code, "language": command.language, "version": command.version,
              "opaque": command.opaque, "flag": command.flag, "serializeTypeCurrentRPC": "JSON"}
    if command.remark is not None:
        header["remark"] = command.remark
    if command.ext_fields:
        header["extFields"] = command.ext_fields
    return orjson.dumps(header)


def _decode_json(header: bytes) -> RemotingCommand:
    try:
        parsed = orjson.loads(header)
    except orjson.JSONDecodeError as bad:
        raise HeaderError(f"the header is not valid JSON ({bad})") from None
    if not isinstance(parsed, dict):
        raise HeaderError(f"the header is JSON {type(parsed).__name__}, not an object with code, opaque and flag")
    opaque = parsed.get("opaque", 0)
    opaque = opaque if _is_int(opaque) else None
    code = parsed.get("code")
    if not _is_int(code):
        raise HeaderError(f"the header's code is {code!r}: give the request code as an integer", opaque)
    if opaque is None:
        raise HeaderError(f"the header's opaque is {parsed.get('opaque')!r}: give the request id as an integer")
    flag, version = parsed.get("flag", 0), parsed.get("version", 0)
    if not (_is_int(flag) and _is_int(version)):
        raise HeaderError(f"the header's flag {flag!r} and version {version!r} must be integers", opaque)
    ext = parsed.get("extFields") or {}
    if not isinstance(ext, dict):
        raise HeaderError(f"the header's extFields is {type(ext).__name__}: give an object of strings", opaque)
    remark = parsed.get("remark")
    language = parsed.get("language", "JAVA")
    return RemotingCommand(code, opaque, flag, {str(k): _text(v) for k, v in ext.items() if v is not None}, b"",
                           remark if isinstance(remark, str) else None,
                           language if isinstance(language, str) else "OTHER", version, SerializeType.JSON)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value) -> str:
    """An extFields value as Java's clients write it: strings, and true/false for booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


# --- ROCKETMQ binary -------------------------------------------------------------------------

def _encode_binary(command: RemotingCommand) -> bytes:
    language = LANGUAGE_CODES.get(command.language, LANGUAGE_CODES["OTHER"])
    parts = [_BINARY_FIXED.pack(_short(command.code), language, command.version, command.opaque, command.flag)]
    remark = (command.remark or "").encode()
    parts += [_INT.pack(len(remark)), remark]
    ext = []
    for name, value in command.ext_fields.items():
        key, val = str(name).encode(), str(value).encode()
        ext += [_SHORT.pack(len(key)), key, _INT.pack(len(val)), val]
    ext_bytes = b"".join(ext)
    parts += [_INT.pack(len(ext_bytes)), ext_bytes]
    return b"".join(parts)


def _short(code: int) -> int:
    """Codes travel as a signed short, as Java writes them (wrapping the codes above 32767)."""
    return ((code + 0x8000) & 0xFFFF) - 0x8000


def _decode_binary(header: bytes) -> RemotingCommand:
    if len(header) < _BINARY_FIXED.size + 8:
        raise HeaderError(f"a ROCKETMQ header of {len(header)} bytes is cut short: it holds at least "
                          f"{_BINARY_FIXED.size + 8}")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    pos = _BINARY_FIXED.size
    remark, pos = _binary_string(header, pos, _INT, "remark", opaque)
    if len(header) - pos < _INT.size:
        raise HeaderError(f"the header ends {len(header) - pos} bytes after its remark, inside the length of its "
                          "extFields: write the extFields length (4 bytes, 0 for none) after the remark", opaque)
    (ext_len,) = _INT.unpack_from(header, pos)
    pos += 4
    if ext_len < 0 or ext_len > len(header) - pos:
        raise HeaderError(f"the extFields length {ext_len} does not fit the {len(header) - pos} header bytes left",
                          opaque)
    ext, end = {}, pos + ext_len
    while pos < end:
        name, pos = _binary_string(header, pos, _SHORT, "extFields name", opaque, end)
        value, pos = _binary_string(header, pos, _INT, f"extFields value of {name!r}", opaque, end)
        ext[name] = value
    name = LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER"
    return RemotingCommand(code, opaque, flag, ext, b"", remark or None, name, version, SerializeType.ROCKETMQ)


def _binary_string(header: bytes, pos: int, length: struct.Struct, what: str, opaque: int,
                   end: int | None = None) -> tuple[str, int]:
    end = len(header) if end is None else end
    if end - pos < length.size:
        raise HeaderError(f"the header ends inside the length of its {what}", opaque)
    (size,) = length.unpack_from(header, pos)
    pos += length.size
    if size < 0 or size > end - pos:
        raise HeaderError(f"the {what} is {size} bytes long; only {end - pos} are left in the header", opaque)
    try:
        return header[pos:pos + size].decode(), pos + size
    except UnicodeDecodeError:
        raise HeaderError(f"the {what} is not UTF-8", opaque) from None
