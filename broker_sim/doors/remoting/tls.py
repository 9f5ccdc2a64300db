"""The remoting port with TLS: connections that open with a TLS handshake get TLS; a plain
client is answered, once, with a remoting response that says the port needs TLS.

A TLS connection opens with a handshake record (first byte 0x16); a remoting frame opens with
its 4-byte length, below 16 MiB, so its first byte is 0x00. The first byte is peeked before
asyncio takes the socket, so that a TLS connection's handshake is left whole for asyncio's TLS.
RocketMQ's brokers look at the same byte in their "permissive" mode (plain and TLS on one port);
this door is "enforcing": plain requests are refused.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Callable

from broker_sim.common.logs import ThrottledLog
from rmq_wire.remoting import FrameError, FrameReader, HeaderError, ResponseCode, decode, encode

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
PLAIN_REFUSED = ("this port serves RocketMQ's remoting protocol over TLS only: connect with TLS (RocketMQ's Java "
                 "clients: -Dtls.enable=true; rmq_spark: TransportConfig(tls=True), rmq-admin --tls, the Spark "
                 "option tls=true)")
_FIRST_BYTE_TIMEOUT_S = 30.0  # a client that connects and says nothing is dropped after this
_HANDSHAKE_TIMEOUT_S = 10.0
_ACCEPT_RETRY_S = 0.1  # after a failed accept (out of file descriptors): the loop goes on


class TlsListener:
    """Accepts on ``sock`` (bound and listening) and serves each TLS connection with a protocol
    of ``connection_factory``; ``close`` stops accepting. Connections already served stay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, context: ssl.SSLContext,
                 connection_factory: Callable[[], asyncio.Protocol]):
        self.loop = loop
        self.socket = sock
        self.context = context
        self.connection_factory = connection_factory
        self._pending: set[asyncio.Task] = set()  # connections still deciding (a task is kept until done)
        self._accepting: asyncio.Task | None = None
        # Per connection (a plain client retrying, a scanner): 5 lines per 10 s per client host.
        self._connection_log = ThrottledLog(log)

    def start(self) -> None:
        self.socket.setblocking(False)
        self._accepting = self.loop.create_task(self._accept_forever())

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for task in self._pending:
            task.cancel()
        self.socket.close()

    async def _accept_forever(self) -> None:
        while True:
            try:
                client, address = await self.loop.sock_accept(self.socket)
            except OSError as err:
                self._connection_log.warning("the remoting port could not accept a connection: %s", err)
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            task = self.loop.create_task(self._serve(client, "%s:%s" % address[:2]))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _serve(self, client: socket.socket, remote: str) -> None:
        host, subject = remote.rsplit(":", 1)[0], {"client": remote}
        try:
            first = await asyncio.wait_for(self._first_byte(client), _FIRST_BYTE_TIMEOUT_S)
            if first and first[0] == TLS_HANDSHAKE_RECORD:
                await self.loop.connect_accepted_socket(self.connection_factory, client, ssl=self.context,
                                                        ssl_handshake_timeout=_HANDSHAKE_TIMEOUT_S)
            elif first:
                self._connection_log.info("a plain (not TLS) remoting client at %s connected to the TLS port: "
                                          "refused", remote, key=host, extra=subject)
                await self.loop.connect_accepted_socket(PlainRefusal, client)
            else:
                client.close()
        except asyncio.TimeoutError:
            self._connection_log.info("closing the connection from %s: it sent nothing for %.0f s", remote,
                                      _FIRST_BYTE_TIMEOUT_S, key=host, extra=subject)
            client.close()
        except OSError as err:  # ssl.SSLError is one
            self._connection_log.info("no TLS connection with %s: %s%s", remote, err, _hint(err), key=host,
                                      extra=subject)
            client.close()
        except asyncio.CancelledError:  # the server stops
            client.close()
            raise

    async def _first_byte(self, client: socket.socket) -> bytes:
        """The connection's first byte, left unread; b"" when the client closed first."""
        readable = self.loop.create_future()
        self.loop.add_reader(client.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            await readable
        finally:
            self.loop.remove_reader(client.fileno())
        return client.recv(1, socket.MSG_PEEK)


def _hint(err: Exception) -> str:
    if isinstance(err, ssl.SSLError) and "CERTIFICATE" in (err.reason or ""):
        return " (the client has no certificate signed by --tls-client-ca, or does not trust the broker's)"
    return ""


class PlainRefusal(asyncio.Protocol):
    """A plain client on the TLS port: its first request is answered with PLAIN_REFUSED, as a
    SYSTEM_ERROR response with the request's opaque (so that its client shows the remark),
    then the connection is closed."""

    def __init__(self):
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        asyncio.get_running_loop().call_later(_FIRST_BYTE_TIMEOUT_S, transport.close)  # no request: dropped

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
            if not frames:
                return
            request = decode(frames[0])
        except (FrameError, HeaderError):
            self.transport.close()
            return
        self.transport.write(encode(request.response(ResponseCode.SYSTEM_ERROR, PLAIN_REFUSED)))
        self.transport.close()
