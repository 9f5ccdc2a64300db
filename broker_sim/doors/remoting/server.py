"""The remoting door's TCP server: asyncio connections (no thread per connection), frames cut
and decoded, each request dispatched by its code to a handler, many in flight per connection.

A handler takes ``(request, connection)`` and returns the response command, None (answered
later, or a oneway request), or a coroutine (waits: long polling); handlers marked ``blocking``
(a sync flush, a pop that may wait) run in the door's thread pool, and reads too while they may
wait for the store's index (``Handler.waits_now``). A handler's refusal
(a BrokerFault; a HeaderFieldError for a bad or missing header field is SYSTEM_ERROR) becomes
the response's code and remark; the connection stays. A frame that cannot be cut (a length no
frame may have) closes the connection: nothing after it can be read.

Per-client limits (``ClientLimits``): a connection past the connections allowed (per address,
in all) has its first request answered SYSTEM_BUSY with a remark saying so, then is closed; a
request past the requests in flight allowed per connection is answered SYSTEM_BUSY at once;
answers waiting for a client that does not read them stop the reading of its requests above
the high water mark, and close its connection past ``max_buffered_bytes_per_connection`` or
after ``slow_reader_timeout_s`` above the mark. What a connection buffers (an unfinished
frame, answers waiting while its reading is paused, its parked pulls) is reserved in the
broker's memory budget (``MemoryBudget``): past its client's share, or when the budget is full
and its client holds the most, the connection is closed with a line in the log saying why. A
connection silent for ``idle_connection_timeout_s`` (no request, nothing in flight), or
inside one frame for ``unfinished_frame_timeout_s``, is closed. Connections closed for a
limit are logged at a bounded rate (``ThrottledLog``): a burst of refusals writes a few lines
and a count, not a line each.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from broker_sim.common.logs import ThrottledLog
from broker_sim.common.service_thread import ServiceTask
from broker_sim.core import BrokerFault
from broker_sim.core.errors import from_exception
from broker_sim.core.limits import ClientLimits, MemoryBudget, client_key, too_many_connections, too_many_requests
from broker_sim.core.metrics import NO_METRICS
from broker_sim.doors.remoting.errors import response_code
from broker_sim.doors.remoting.tls import TLS_HANDSHAKE_RECORD, TlsListener
from broker_sim.doors.remoting.wrong_door import GrpcClientAnswer
from rmq_wire.remoting import (
    FrameError,
    FrameReader,
    HeaderError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    WrongProtocolError,
    decode,
    encode,
)

log = logging.getLogger(__name__)
_STOP_TIMEOUT_S = 10.0
REFUSAL_WAIT_S = 2.0  # a refused connection waits this long for a request to answer with the refusal
MAX_REFUSALS_WAITING = 64  # refused connections waiting so, at most; past it they are closed at once
REFUSED_FRAME_BYTES = 64 << 10  # what a refused connection's first request may hold; a larger one closes it
SWEEP_INTERVAL_S = 1.0  # how often connections are looked over for the idle and unfinished frame timeouts
# The count of the lines left out of closing_log (5 per 10 s, whatever the reason).
CLOSED_FOR_LIMITS = ("%(dropped)d more connections were closed for limits in the last %(seconds).0f s (their lines "
                     "left out)")


@dataclass(frozen=True)
class Handler:
    call: Callable
    blocking: bool = False  # may wait (a disk flush, a long poll): runs in the pool, not on the loop
    # Asked at each request: True runs this one in the pool (a read while the index is behind).
    waits_now: Callable[[], bool] | None = None


class Connection(asyncio.Protocol):
    """One client's TCP connection: its frames in, its responses (and the broker's own
    requests, such as transaction checks) out."""

    def __init__(self, server: "RemotingServer"):
        self.server = server
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None
        self.address = ("", 0)
        self.closed = False
        self.admitted = False  # counted among the server's connections
        self.refusal = ""  # why the connection is refused: its first request is answered so
        self.in_flight = 0  # requests being served (touched on the loop only)
        self._slow_reader: asyncio.TimerHandle | None = None
        self.memory = None  # its holding in the broker's memory budget, once admitted
        self.last_active = server.loop.time()  # a read, a write, or a request answered
        self.frame_started = 0.0  # when the unfinished frame began (the loop's clock), if one has
        self._frame_held = 0  # bytes of the unfinished frame reserved in the memory budget
        self._answers_held = 0  # bytes of answers waiting, reserved while the reading is paused
        self.grpc_answer: GrpcClientAnswer | None = None  # a gRPC client here is told where gRPC is

    @property
    def remote(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    @property
    def client(self) -> str:
        """Who this client is, for per-client limits (limits.client_key)."""
        return client_key(self.address[0])

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.address = transport.get_extra_info("peername")[:2]
        limits = self.server.limits
        transport.set_write_buffer_limits(limits.write_buffer_high_bytes, limits.write_buffer_low_bytes)
        self.refusal = self.server.admit(self)
        if self.refusal:
            self.reader = FrameReader(REFUSED_FRAME_BYTES)
        else:
            loop = self.server.loop
            self.memory = self.server.memory.holding(
                self.client, f"its remoting connection {self.remote}",
                cut=lambda why: loop.call_soon_threadsafe(self._disconnect, why))

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._stop_slow_reader_timer()
        if not self.admitted:
            self.server.refusing.discard(self)
            return
        self.server.release(self)
        if self.reader.pending_bytes:
            log.debug("connection from %s closed inside a frame (%d bytes unread)", self.remote,
                      self.reader.pending_bytes)
        self.reader = FrameReader()  # its unfinished frame is freed now, not when the connection is collected
        self.memory.close()
        for listener in self.server.close_listeners:
            listener(self)

    def data_received(self, data: bytes) -> None:
        if self.grpc_answer is not None:
            self._answer_grpc_client(data)
            return
        try:
            frames = self.reader.feed(data)
        except WrongProtocolError as wrong:
            if wrong.peer_is_client:
                self._start_grpc_answer(wrong.received)
            else:
                self.transport.close()
            return
        except FrameError as bad:
            reason = bad
            if self.server.tls is None and data[:1] == bytes([TLS_HANDSHAKE_RECORD]):
                reason = ("it opened with a TLS handshake, and this port serves plain remoting: connect without TLS, "
                          "or start the broker with --tls-cert and --tls-key")
            self.server.closing_log.warning("closing the connection from %s: %s", self.remote, reason,
                                            extra={"client": self.remote})
            self.transport.close()
            return
        self.last_active = self.server.loop.time()
        if self.memory is not None and not self._hold_frame():
            return
        for frame in frames:
            if self.closed:  # disconnected while serving this read: the rest is not served
                return
            if self.refusal:
                self._answer_refusal(frame)
                return
            self.server.dispatch(self, frame)

    def _start_grpc_answer(self, received: bytes) -> None:
        """A gRPC (HTTP/2) client at this port: answered in HTTP/2 with the port it wants
        (``wrong_door``), and one line in the log."""
        port = self.transport.get_extra_info("sockname")[1]
        grpc_port = f"port {self.server.grpc_port}" if self.server.grpc_port else "the broker's --port"
        sentence = (f"broker_sim: port {port} serves RocketMQ's remoting protocol (the option nameServer, RocketMQ's "
                    f"remoting clients and mqadmin); gRPC (the option endpoint, RocketMQ 5's gRPC clients) is served "
                    f"on {grpc_port}")
        self.server.closing_log.warning("a gRPC (HTTP/2) client at %s reached the remoting port %d; it was told: "
                                        "gRPC is served on %s", self.remote, port, grpc_port,
                                        extra={"client": self.remote})
        self.grpc_answer = GrpcClientAnswer(sentence)
        self.transport.write(self.grpc_answer.start())
        self._answer_grpc_client(received)

    def _answer_grpc_client(self, data: bytes) -> None:
        self.transport.write(self.grpc_answer.feed(data))
        if self.grpc_answer.done:
            self.transport.close()

    def _hold_frame(self) -> bool:
        """Reserve what the unfinished frame holds (release what completed frames held); False
        when the memory budget refuses it: the connection is closed."""
        pending = self.reader.pending_bytes
        if pending and not self._frame_held:
            self.frame_started = self.server.loop.time()
        try:
            self.memory.reserve(pending - self._frame_held)
        except BrokerFault as refused:
            self._disconnect(f"its unfinished request of {pending} bytes so far: {refused.message}")
            return False
        self.memory.release(self._frame_held - pending)
        self._frame_held = pending
        return True

    def _answer_refusal(self, frame: bytes) -> None:
        """Answer a refused connection's first request with the refusal, then close."""
        try:
            request = decode(frame)
        except HeaderError:
            request = None
        if request is not None and not request.is_response and not request.is_oneway:
            self.transport.write(encode(request.response(ResponseCode.SYSTEM_BUSY, self.refusal)))
        self.transport.close()

    def close_refused(self) -> None:
        """A refused connection that sent no request in time: closed without an answer."""
        if not self.closed:
            self.server.closing_log.warning("closing the connection from %s without an answer: %s", self.remote,
                                            self.refusal, extra={"client": self.remote})
            self.transport.abort()

    def pause_writing(self) -> None:
        """The client is not reading its answers: read no more of its requests until it does,
        so that a slow client holds a bounded amount of the broker's memory; one that reads
        none of them for the slow reader timeout is disconnected."""
        self.transport.pause_reading()
        self._hold_answers(self.transport.get_write_buffer_size())
        self._stop_slow_reader_timer()
        timeout = self.server.limits.slow_reader_timeout_s
        self._slow_reader = self.server.loop.call_later(timeout, self._disconnect, (
            f"its answers waited over {self.server.limits.write_buffer_high_bytes} bytes for {timeout:g} s "
            "(--slow-reader-timeout-s): the client does not read them"))

    def resume_writing(self) -> None:
        self._stop_slow_reader_timer()
        if self.memory is not None:
            self.memory.release(self._answers_held)
        self._answers_held = 0
        if not self.closed:
            self.transport.resume_reading()

    def _stop_slow_reader_timer(self) -> None:
        if self._slow_reader is not None:
            self._slow_reader.cancel()
            self._slow_reader = None

    def send(self, command: RemotingCommand) -> None:
        """Write a command, from the loop's thread; dropped when the connection is gone. A
        client with more answers waiting than the broker keeps for one is disconnected."""
        if self.closed or self.transport.is_closing():  # asyncio logs a warning for each write past its end
            return
        waiting = self.transport.get_write_buffer_size()
        if waiting > self.server.limits.max_buffered_bytes_per_connection:
            self._disconnect(f"{waiting} bytes of answers wait for it, over the "
                             f"{self.server.limits.max_buffered_bytes_per_connection} a connection may hold "
                             "(--max-buffered-bytes-per-connection): the client does not read them")
            return
        data = encode(command)
        if self._slow_reader is not None and not self._hold_answers(waiting + len(data)):
            return
        self.last_active = self.server.loop.time()
        self.transport.write(data)

    def _hold_answers(self, waiting: int) -> bool:
        """While its reading is paused (answers wait above the high mark), reserve the answers
        waiting in the memory budget; False when it refuses them: the connection is closed."""
        if self.memory is None:
            return True
        try:
            self.memory.reserve(waiting - self._answers_held)
        except BrokerFault as refused:
            self._disconnect(f"{waiting} bytes of answers wait for it: {refused.message}")
            return False
        self._answers_held = max(self._answers_held, waiting)
        return True

    def send_threadsafe(self, command: RemotingCommand) -> None:
        self.server.loop.call_soon_threadsafe(self.send, command)

    def _disconnect(self, why: str) -> None:
        """Close at once, dropping the answers waiting (their memory is what is freed)."""
        if not self.closed:
            self.server.closing_log.warning("closing the connection from %s: %s", self.remote, why,
                                            extra={"client": self.remote})
            self.closed = True
            self.transport.abort()

    def timed_out(self, now: float) -> str:
        """Why the connection is to be closed now for a timeout, or "" (its server's sweep)."""
        limits = self.server.limits
        if self._frame_held and now - self.frame_started > limits.unfinished_frame_timeout_s:
            return (f"it began a request {now - self.frame_started:.0f} s ago and sent {self._frame_held} bytes of it "
                    f"(--unfinished-frame-timeout-s {limits.unfinished_frame_timeout_s:g}): send whole requests")
        if (not self.in_flight and not self._frame_held and now - self.last_active > limits.idle_connection_timeout_s
                and not self.transport.get_write_buffer_size()):
            return (f"it sent nothing for {now - self.last_active:.0f} s (--idle-connection-timeout-s "
                    f"{limits.idle_connection_timeout_s:g}); clients send heartbeats, or connect again when needed")
        return ""


class RemotingServer:
    """Serves ``handlers`` ({request code: Handler}) on ``host:port`` with an event loop of
    its own thread, within ``limits``. ``close_listeners`` are called with each connection
    that closes. With ``tls`` (a server context) the port serves TLS only (tls.py)."""

    def __init__(self, handlers: dict, host: str, port: int, pool_threads: int = 32, name: str = "rmq-remoting",
                 limits: ClientLimits | None = None, tls: ssl.SSLContext | None = None):
        self.handlers = handlers
        self.check_request: Callable[[RemotingCommand], None] | None = None  # raises to refuse one (ACLs)
        self.host, self.port = host, port
        self.limits = limits or ClientLimits()
        self.memory: MemoryBudget | None = None  # the broker's one budget (the core's), given before ``start``
        self.closing_log = ThrottledLog(log, shared=True, summary=CLOSED_FOR_LIMITS)
        self.metrics = NO_METRICS  # the broker's, once the door serves a core
        self.tls = tls
        self.grpc_port: int | None = None  # the broker's gRPC port, named to gRPC clients that come here
        self.connections: set[Connection] = set()
        self.per_client: dict[str, int] = {}  # client -> connections admitted
        self.refusing: set[Connection] = set()  # refused, waiting for a request to answer
        self.close_listeners: list[Callable] = []
        self.pool = ThreadPoolExecutor(max_workers=pool_threads, thread_name_prefix=f"{name}-pool")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"{name}-loop", daemon=True)
        self._server: asyncio.AbstractServer | TlsListener | None = None
        self._socket: socket.socket | None = None
        self._sweeper = ServiceTask(f"{name}-sweep", SWEEP_INTERVAL_S, self._sweep,
                                    task="closing the connections past their timeouts")

    def bind(self) -> int:
        """Take the address (before serving: the port is known early); the bound port.
        Raises OSError when the address cannot be bound."""
        self._socket = socket.create_server((self.host, self.port), reuse_port=False)
        self.port = self._socket.getsockname()[1]
        return self.port

    def start(self) -> int:
        """Serve (binding first unless ``bind`` did); the port. ``memory`` must be given first."""
        if self.memory is None:
            raise RuntimeError("the remoting server starts with the broker's memory budget: set memory first")
        if self._socket is None:
            self.bind()
        self._thread.start()
        try:
            self._server = self.run(self._listen())
        except BaseException:
            self._socket.close()
            self._stop_loop()
            raise
        return self.port

    async def _listen(self) -> asyncio.AbstractServer | TlsListener:
        self._sweeper.start(self.loop)
        if self.tls is None:
            return await self.loop.create_server(lambda: Connection(self), sock=self._socket)
        listener = TlsListener(self.loop, self._socket, self.tls, lambda: Connection(self))
        listener.start()
        return listener

    def run(self, coroutine, timeout: float | None = _STOP_TIMEOUT_S):
        """Run ``coroutine`` on the loop from another thread; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call_soon(self, function, *args) -> None:
        self.loop.call_soon_threadsafe(function, *args)

    def stop(self) -> None:
        """Stop listening, close every connection, stop the loop and the pool."""
        if self._server is None and self._socket is not None:
            self._socket.close()  # bound, never served
        if self._server is not None:
            try:
                self.run(self._close_all())
            except (concurrent.futures.TimeoutError, RuntimeError):
                log.warning("the remoting server did not close within %.0f s", _STOP_TIMEOUT_S)
        self._stop_loop()

    async def _close_all(self) -> None:
        self._sweeper.stop()
        self._server.close()
        for connection in list(self.connections) + list(self.refusing):
            connection.transport.close()
        await asyncio.sleep(0)  # let connection_lost run
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_STOP_TIMEOUT_S / 2)

    def _sweep(self) -> None:
        """Close the connections idle or inside one frame past their timeouts (every second)."""
        now = self.loop.time()
        for connection in list(self.connections):
            why = connection.timed_out(now)
            if why:
                connection._disconnect(why)
        self.closing_log.roll()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_STOP_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # --- connections -----------------------------------------------------------------------

    def admit(self, connection: Connection) -> str:
        """Count the connection in, or the reason it is refused ("" when admitted)."""
        client = connection.client
        held = self.per_client.get(client, 0)
        if held >= self.limits.max_connections_per_ip:
            refusal = too_many_connections(f"client {client} has {held} connections open to this broker",
                                           "max-connections-per-ip")
        elif len(self.connections) >= self.limits.max_connections:
            refusal = too_many_connections(f"this broker has {len(self.connections)} connections open from all "
                                           "clients", "max-connections")
        else:
            self.connections.add(connection)
            self.per_client[client] = held + 1
            connection.admitted = True
            return ""
        if len(self.refusing) >= MAX_REFUSALS_WAITING:
            self.closing_log.warning("closing the connection from %s at once: %s", connection.remote, refusal,
                                     extra={"client": connection.remote})
            connection.transport.abort()
        else:
            self.refusing.add(connection)
            self.loop.call_later(REFUSAL_WAIT_S, connection.close_refused)
        return refusal

    def release(self, connection: Connection) -> None:
        """A connection admitted has closed: its room is free."""
        self.connections.discard(connection)
        held = self.per_client.pop(connection.client, 1) - 1
        if held:
            self.per_client[connection.client] = held

    # --- dispatch --------------------------------------------------------------------------

    def dispatch(self, connection: Connection, frame: bytes) -> None:
        started = time.perf_counter()
        try:
            request = decode(frame)
        except HeaderError as bad:
            log.info("unreadable request header from %s: %s", connection.remote, bad)
            answer = RemotingCommand(ResponseCode.SYSTEM_ERROR, bad.opaque or 0, 1,
                                     remark=f"the request could not be read: {bad}")
            connection.send(answer)
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("from %s: code %d, %s, %d body bytes, %s", connection.remote, request.code, request.ext_fields,
                      len(request.body), request.serialize_type.name)
        if request.is_response:
            return  # answers to the broker's oneway requests: nothing waits for them
        if self.check_request is not None and not self._checked(connection, request, started):
            return
        handler = self.handlers.get(request.code)
        if handler is None:
            self._refuse(connection, request, started,
                         request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, _unsupported(request.code)))
            return
        limit = self.limits.max_requests_in_flight_per_connection
        if connection.in_flight >= limit:  # answered at once, never queued
            self._refuse(connection, request, started, refusal(request, too_many_requests(
                connection.in_flight, f"connection {connection.remote}", "max-requests-in-flight-per-connection")))
            return
        connection.in_flight += 1
        if handler.blocking or (handler.waits_now is not None and handler.waits_now()):
            future = self.loop.run_in_executor(self.pool, _answer, handler.call, request, connection)
            future.add_done_callback(lambda done: self._respond(connection, request, done.result(), started))
            return
        self._respond(connection, request, _answer(handler.call, request, connection), started)

    def _checked(self, connection: Connection, request: RemotingCommand, started: float) -> bool:
        try:
            self.check_request(request)
            return True
        except Exception as err:
            refused = refusal(request, err)
            log.debug("refused request code %d from %s: %s", request.code, connection.remote, refused.remark)
            self._refuse(connection, request, started, refused)
            return False

    def _refuse(self, connection: Connection, request: RemotingCommand, started: float,
                answer: RemotingCommand) -> None:
        """Answer a request refused before any handler ran (and count it)."""
        self._answered(request, answer, started)
        if not request.is_oneway:
            connection.send(answer)

    def _respond(self, connection: Connection, request: RemotingCommand, answer, started: float) -> None:
        if asyncio.iscoroutine(answer):
            task = self.loop.create_task(_answer_later(answer, request))
            task.add_done_callback(lambda done: self._respond(connection, request, done.result(), started))
            return
        connection.in_flight -= 1
        connection.last_active = self.loop.time()
        self._answered(request, answer, started)
        if answer is not None and not request.is_oneway:
            connection.send(answer)

    def _answered(self, request: RemotingCommand, answer: RemotingCommand | None, started: float) -> None:
        """The request in the broker's metrics: its code and the answer's, as RocketMQ names them
        (RemotingHelper: the codes' names in lower case; ``oneway`` for a request not answered,
        ``cancelled`` for a held pull the broker let go)."""
        response = "oneway" if request.is_oneway else "cancelled" if answer is None else _code_name(
            _RESPONSE_NAMES, ResponseCode, answer.code)
        self.metrics.answered("remoting", _code_name(_REQUEST_NAMES, RequestCode, request.code), response,
                              time.perf_counter() - started)


_REQUEST_NAMES: dict[int, str] = {}
_RESPONSE_NAMES: dict[int, str] = {}


def _code_name(names: dict[int, str], codes, code: int) -> str:
    """``code``'s name in lower case, remembered; ``unknown`` for a code RocketMQ has no name for
    (not remembered: made-up codes must not grow the metrics' series nor this table)."""
    name = names.get(code)
    if name is None:
        try:
            name = codes(code).name.lower()
        except ValueError:
            return "unknown"
        names[code] = name
    return name


def _answer(call: Callable, request: RemotingCommand, connection: Connection):
    """The handler's answer, or its refusal as a response."""
    try:
        return call(request, connection)
    except Exception as err:  # a handler's fault answers its request; the connection goes on
        return refusal(request, err)


async def _answer_later(coroutine, request: RemotingCommand):
    try:
        return await coroutine
    except asyncio.CancelledError:
        return None
    except Exception as err:
        return refusal(request, err)


def refusal(request: RemotingCommand, err: Exception) -> RemotingCommand:
    """A refusal as RocketMQ's response code and a remark the user can act on."""
    refused = from_exception(err)
    return request.response(response_code(refused), refused.message)


def _unsupported(code: int) -> str:
    return f"request code {code} is not supported by broker_sim's remoting door"


__all__ = ["BrokerFault", "Connection", "Handler", "RemotingServer", "refusal"]
