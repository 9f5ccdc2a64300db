"""A remoting connection for clients: requests matched to their responses by opaque, many in
flight, read by one thread of its own. The broker's name-server registration, the tests and
the benchmarks use it; the SDK's remoting transport is built on it."""

from __future__ import annotations

import itertools
import socket
import ssl
import threading
from concurrent.futures import Future

from rmq_wire.remoting.codes import SerializeType
from rmq_wire.remoting.command import (
    FLAG_ONEWAY,
    FrameError,
    FrameReader,
    RemotingCommand,
    WrongProtocolError,
    decode,
    encode,
)
from rmq_wire.remoting.tls_stream import TlsStream
from rmq_wire.signing import sign_remoting

_READ_BYTES = 1 << 20
_TLS_READ_BYTES = 1 << 16


class RemotingConnection:
    """A TCP connection to ``address`` ("host:port"), over TLS with ``tls`` (a client context;
    the handshake is done here, and its failure raised as an ssl.SSLError or OSError).
    ``request`` returns a Future of the response; ``invoke`` waits for it. Closed by ``close``
    or as a context manager. With ``credentials`` (``rmq_spark.Credentials``), every request is
    signed as RocketMQ's AclClientRPCHook signs it."""

    def __init__(self, address: str, timeout_s: float = 10.0, language: str = "PYTHON",
                 serialize_type: SerializeType = SerializeType.JSON, tls: ssl.SSLContext | None = None,
                 credentials=None):
        host, _, port = address.rpartition(":")
        self.address = address
        self.language = language
        self.serialize_type = serialize_type
        self.credentials = credentials
        self._socket = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._stream = self._socket  # what is read and written: the socket, or TLS over it
        if tls is not None:
            try:
                self._stream = TlsStream(self._socket, tls, host.strip("[]"))
            except OSError:
                self._socket.close()
                raise
        self._socket.settimeout(None)
        self._opaques = itertools.count(1)
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed = False
        self._ended: Exception | None = None  # why the reader stopped: what a later request is told
        self.on_request = None  # called with requests the server sends (transaction checks)
        self.answered = False  # a response came: the server speaks our protocol (TLS or not, as we do)
        self._reader = threading.Thread(target=self._read, name=f"remoting-{address}", daemon=True)
        self._reader.start()

    def request(self, code: int, ext_fields: dict | None = None, body: bytes = b"") -> Future:
        command = RemotingCommand(code, next(self._opaques), 0, self._fields(ext_fields, body), body,
                                  language=self.language, serialize_type=self.serialize_type)
        future: Future = Future()
        future.opaque = command.opaque
        with self._lock:
            if self._closed:
                raise self._ended or ConnectionError(f"the connection to {self.address} is closed")
            self._pending[command.opaque] = future
        self.send(command)
        return future

    def request_many(self, code: int, many_ext_fields: list) -> list[Future]:
        """Requests of one code without bodies, written together (one write for them all):
        a Future of each one's answer, in order."""
        commands = [RemotingCommand(code, next(self._opaques), 0, self._fields(fields, b""), b"",
                                    language=self.language, serialize_type=self.serialize_type)
                    for fields in many_ext_fields]
        futures = []
        with self._lock:
            if self._closed:
                raise self._ended or ConnectionError(f"the connection to {self.address} is closed")
            for command in commands:
                future: Future = Future()
                future.opaque = command.opaque
                self._pending[command.opaque] = future
                futures.append(future)
        self.send_raw(b"".join(encode(command) for command in commands))
        return futures

    def invoke(self, code: int, ext_fields: dict | None = None, body: bytes = b"",
               timeout_s: float = 10.0) -> RemotingCommand:
        return self.request(code, ext_fields, body).result(timeout_s)

    def forget(self, future: Future) -> None:
        """Give up on a request's answer (its time is over): cancelled, and dropped when it comes."""
        if future.cancel():
            with self._lock:
                self._pending.pop(future.opaque, None)

    def oneway(self, code: int, ext_fields: dict | None = None, body: bytes = b"") -> None:
        self.send(RemotingCommand(code, next(self._opaques), FLAG_ONEWAY, self._fields(ext_fields, body), body,
                                  language=self.language, serialize_type=self.serialize_type))

    def _fields(self, ext_fields: dict | None, body: bytes) -> dict:
        """The header's fields as the wire carries them (strings), signed if there are credentials."""
        fields = {k: str(v) for k, v in (ext_fields or {}).items()}
        return sign_remoting(fields, body, self.credentials) if self.credentials is not None else fields

    def send(self, command: RemotingCommand) -> None:
        self.send_raw(encode(command))

    def send_raw(self, data: bytes) -> None:
        with self._send_lock:
            self._stream.sendall(data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        self._reader.join(5)

    def __enter__(self) -> "RemotingConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _read(self) -> None:
        reader = FrameReader()
        error: Exception = ConnectionError(f"the connection to {self.address} was closed")
        # A plain socket is read into one buffer kept for the connection: recv(1 MiB) would
        # allocate (and fault in) a fresh MiB for each read, most of a small answer's cost.
        received = memoryview(bytearray(_READ_BYTES)) if self._stream is self._socket else None
        try:
            while True:
                if received is not None:
                    count = self._socket.recv_into(received)
                    data = received[:count]
                else:  # TLS: a read returns at most a TLS record (16 KiB)
                    data = self._stream.recv(_TLS_READ_BYTES)
                    count = len(data)
                if not count:
                    break
                for frame in reader.feed(data):
                    self._deliver(decode(frame))
        except WrongProtocolError:
            error = ConnectionError(
                f"{self.address} speaks HTTP/2 (gRPC), not RocketMQ's remoting protocol: it is a gRPC port "
                "(broker_sim's --port, for the option endpoint; a RocketMQ proxy's gRPC port); give a name server's "
                "port instead (rmq-broker-sim --remoting-port; RocketMQ's name server listens on 9876)")
        except (OSError, FrameError, ValueError) as err:
            error = ConnectionError(f"the connection to {self.address} failed: {err}")
        with self._lock:
            if not self._closed:  # the peer ended it, not close()
                self._ended = error
            self._closed = True
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if future.set_running_or_notify_cancel():
                future.set_exception(error)

    def _deliver(self, command: RemotingCommand) -> None:
        if not command.is_response:
            if self.on_request is not None:
                self.on_request(command)
            return
        self.answered = True
        with self._lock:
            future = self._pending.pop(command.opaque, None)
        if future is not None and future.set_running_or_notify_cancel():  # not given up on (cancelled)
            future.set_result(command)
