"""A gRPC client at the remoting port: answered in its own protocol with one sentence naming the
port it wants, rather than a connection closed on bytes it cannot read.

The client opened with HTTP/2's preface (``rmq_wire.remoting.http2_peer``). The door
sends its SETTINGS, acknowledges the client's, and answers the client's first call with a
trailers-only response, grpc-status 14 (UNAVAILABLE) and the sentence as grpc-message, which
gRPC clients show as the call's error; then GOAWAY, and the connection closes. The headers are
written as HPACK literals without indexing or Huffman coding, which every HPACK decoder reads.
"""

from __future__ import annotations

import struct
from urllib.parse import quote

from rmq_wire.remoting import HTTP2_PREFACE

_HEADERS, _SETTINGS, _GOAWAY = 0x1, 0x4, 0x7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
_STATUS_200 = b"\x88"  # HPACK static table entry 8: ":status: 200"
_UNAVAILABLE = b"14"


class GrpcClientAnswer:
    """The bytes to answer a gRPC client with: ``start()`` once, then ``feed(data)`` for what it
    sends until ``done``."""

    def __init__(self, sentence: str):
        self.sentence = sentence
        self.done = False
        self._buffer = bytearray()
        self._preface_left = len(HTTP2_PREFACE)

    def start(self) -> bytes:
        return _frame(_SETTINGS, 0, 0, b"")

    def feed(self, data: bytes) -> bytes:
        """What to write back for ``data``: a SETTINGS acknowledgement, and at the client's first
        call the answer and GOAWAY (then ``done``)."""
        self._buffer += data
        if self._preface_left:
            skipped = min(self._preface_left, len(self._buffer))
            del self._buffer[:skipped]
            self._preface_left -= skipped
        out = bytearray()
        while not self.done and len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if len(self._buffer) < 9 + length:
                break
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
            del self._buffer[:9 + length]
            if kind == _SETTINGS and not flags & _ACK:
                out += _frame(_SETTINGS, _ACK, 0, b"")
            elif kind == _HEADERS and stream:
                block = (_STATUS_200 + _literal(b"content-type", b"application/grpc")
                         + _literal(b"grpc-status", _UNAVAILABLE)
                         + _literal(b"grpc-message", quote(self.sentence, safe=" ;:,/()'=-_.").encode()))
                out += _frame(_HEADERS, _END_STREAM | _END_HEADERS, stream, block)
                out += _frame(_GOAWAY, 0, 0, struct.pack(">II", stream, 0))
                self.done = True
        return bytes(out)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK header field, literal without indexing, a new name, no Huffman coding."""
    return b"\x00" + _hpack_length(len(name)) + name + _hpack_length(len(value)) + value


def _hpack_length(n: int) -> bytes:
    """HPACK's integer with a 7-bit prefix (the Huffman bit clear)."""
    if n < 127:
        return bytes([n])
    out, n = bytearray([127]), n - 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)
