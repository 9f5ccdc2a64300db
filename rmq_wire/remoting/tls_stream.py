"""TLS over a connected socket, for one reading thread and many writing threads.

OpenSSL's state of a connection may not be used by two threads at once, and ``ssl.SSLSocket``
runs its reads and writes unlocked: a read that meets a post-handshake message (TLS 1.3 session
tickets) while a write is under way fails the connection. Here the TLS state (an ``SSLObject``
over memory buffers) is used under one lock, and the socket is read and written outside it.
"""

from __future__ import annotations

import socket
import ssl
import threading

_CHUNK = 1 << 20


class TlsStream:
    """``sock`` (connected) with TLS of ``context``; the handshake is done here, within the
    socket's timeout, and its failure raised (ssl.SSLError, or OSError for a closed socket)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str):
        self.socket = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._lock = threading.Lock()  # the TLS state
        self._send_lock = threading.Lock()  # the socket's writes, whole and in order
        self._handshake()

    def _handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._receive():
                    raise ConnectionResetError("the connection was closed during the TLS handshake") from None
        self._flush()

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                view = memoryview(data)
                while view:
                    view = view[self._tls.write(view):]
                encrypted = self._outgoing.read()
            self.socket.sendall(encrypted)

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes; b"" once the broker closed the connection."""
        while True:
            with self._lock:
                try:
                    return self._tls.read(size)
                except ssl.SSLWantReadError:
                    answer_pending = self._outgoing.pending
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
            # A read may have something to answer (a key update). A writer busy on the socket takes
            # it along with its own bytes; waiting for that writer here could deadlock with a broker
            # that stops reading until its answers are read.
            if answer_pending and self._send_lock.acquire(blocking=False):
                try:
                    self._flush_locked()
                finally:
                    self._send_lock.release()
            if not self._receive():
                return b""

    def _receive(self) -> bool:
        data = self.socket.recv(_CHUNK)
        if data:
            with self._lock:
                self._incoming.write(data)
        return bool(data)

    def _flush(self) -> None:
        with self._send_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        with self._lock:
            encrypted = self._outgoing.read()
        if encrypted:
            self.socket.sendall(encrypted)
