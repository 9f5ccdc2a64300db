"""Broker: the broker core and its gRPC door (our contract), started and stopped together.

The store host written into records (and so into message ids) is the broker's listening
address: its IPv4 address and bound port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import logging
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from google.protobuf.message import DecodeError

from broker_sim.acl import Guard
from broker_sim.common.faults import BrokerFault
from broker_sim.core import AUTO_CREATE_TOPICS, AutoCreateTopics, BrokerCore, CoreOptions
from broker_sim.core.limits import ClientLimits
from broker_sim.core.metrics import NO_METRICS, BrokerMetrics
from broker_sim.doors import BROKER_NAME
from broker_sim.doors.checks import DEFAULT_CHECKS, CheckSettings
from broker_sim.doors.contract.pop_servicer import PopServicer
from broker_sim.doors.contract.serialized import serializer
from broker_sim.doors.contract.servicers import STREAM_WRITE_TIMEOUT_S, make_servicers
from broker_sim.doors.contract.txn_servicer import TransactionsServicer
from broker_sim.doors.grpc_acl import GrpcAdmission, demands_of
from broker_sim.doors.grpc_common import MalformedRequest, timed
from broker_sim.doors.grpc_limits import CallsInFlight, max_streams_per_connection
from broker_sim.doors.metrics_http import METRICS_AUTH, MetricsServer
from broker_sim.doors.remoting import RemotingDoor, RemotingOptions
from broker_sim.doors.rocketmq_v2 import MessagingService
from broker_sim.doors.rocketmq_v2.acl import DEMANDS as V2_DEMANDS
from broker_sim.doors.tls import TlsOptions
from broker_sim.pop import PopConfig
from broker_sim.store import DEFAULT_FLUSH_INTERVAL_MS, FlushMode, StoreConfig, wall_clock_ms
from broker_sim.txn import TransactionConfig
from rmq_wire.codec import check_batch
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import pop_pb2, txn_pb2
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2_pb2

log = logging.getLogger(__name__)

MAX_GRPC_MESSAGE_BYTES = 64 << 20
# Room for a request's own fields around a payload of max_message_bytes.
_ENVELOPE_BYTES = 64 << 10
_DRAIN_TIMEOUT_S = 10.0


class BindError(BrokerFault, OSError):
    """The broker cannot listen on its address (in use, or not an address of this machine)."""


class Broker:
    """A broker on ``data_dir``, listening on ``host:port`` (port 0: any free port).

    The gRPC server is asyncio's, on an event loop thread of the broker's own: unary calls run
    in a pool of ``max_workers`` threads, which each leaves once its answer is made (sending it
    to a slow client costs no thread); ReadRanges streams run on the loop and read the store in
    that pool, one step at a time, so a stream waiting for its client holds no thread either. A
    client that takes no response of its stream for ``stream_write_timeout_s`` has the stream
    ended (STREAM_STALLED). Long-polling pops wait in the pool: at most
    ``pop_config.max_waiting_pops`` of them, fewer than ``max_workers``.

    ``start()`` opens the store (running recovery), binds and serves; it returns the bound
    port. ``stop(grace)`` stops serving (calls in flight get ``grace`` seconds), then closes
    the offsets and the store cleanly (no ``abort`` marker is left). ``transaction_config``
    and ``transaction_clock_ms`` (tests inject a clock) set up the transaction service;
    ``pop_config`` and ``pop_now_ms`` (a clock, for tests) the pop service; ``transaction_checks``
    how both RocketMQ doors check their producers' open transactions back, and ``broker_name`` how
    both name the broker in routes (RocketMQ's brokerName). ``limits`` bounds
    what one client may hold (core/limits.py): calls in flight per address on this port,
    connections, requests and unread answers on the remoting port, topics and queues created.
    With ``acl`` (the accounts of an ACL file), every door checks each request's signature and
    permissions. With ``tls`` both ports, gRPC and remoting, serve TLS only (mutual TLS when it
    has a client CA). State found lost or damaged at start (a consumer offsets file, a pop or
    transaction RocksDB) is refused with ``StateLossError``, unless ``accept_state_loss``,
    which logs the loss and starts (store/state_marks.py). With ``metrics_port`` (0: any free
    port) the broker serves its metrics in Prometheus' text format at ``/metrics`` on ``host``
    (core/metrics.py; HTTPS with the broker's certificate when ``tls``); without it nothing is
    counted.
    """

    def __init__(self, data_dir, host: str = "127.0.0.1", port: int = 0, store_config: StoreConfig | None = None,
                 *, max_workers: int = 16, offsets_flush_interval_ms: int = DEFAULT_FLUSH_INTERVAL_MS,
                 transaction_config: TransactionConfig | None = None, transaction_clock_ms=wall_clock_ms,
                 pop_config: PopConfig | None = None, pop_now_ms=wall_clock_ms,
                 stream_write_timeout_s: float = STREAM_WRITE_TIMEOUT_S, remoting: RemotingOptions | None = None,
                 broker_name: str = BROKER_NAME, transaction_checks: CheckSettings = DEFAULT_CHECKS,
                 limits: ClientLimits | None = None, acl: Guard | None = None,
                 tls: TlsOptions | None = None, accept_state_loss: bool = False, metrics_port: int | None = None,
                 auto_create_topics: AutoCreateTopics | None = AUTO_CREATE_TOPICS, metrics_host: str | None = None,
                 metrics_auth: str = "none"):
        self.data_dir = Path(data_dir)
        self.metrics_host = metrics_host
        self.metrics_auth = _checked_metrics_auth(metrics_auth, tls, acl)
        self.auto_create_topics = auto_create_topics
        self.metrics_port = metrics_port
        self.metrics = BrokerMetrics() if metrics_port is not None else NO_METRICS
        self._metrics_server = None
        self.accept_state_loss = accept_state_loss
        self.limits = limits or ClientLimits()
        self.host = host
        self.port = port
        self.store_config = store_config or StoreConfig()
        self.max_workers = max_workers
        self.offsets_flush_interval_ms = offsets_flush_interval_ms
        self.transaction_config = transaction_config
        self.transaction_clock_ms = transaction_clock_ms
        # With --flush sync, pop state is synced too: nothing acknowledged is lost to a machine crash.
        self.pop_config = pop_config or PopConfig(sync_writes=self.store_config.flush_mode is FlushMode.SYNC)
        if self.pop_config.max_waiting_pops >= max_workers:
            raise ValueError(f"max_waiting_pops={self.pop_config.max_waiting_pops} would let long-polling pops hold "
                             f"all {max_workers} RPC threads and starve every other call: set it below max_workers")
        if stream_write_timeout_s <= 0:
            raise ValueError(f"stream_write_timeout_s={stream_write_timeout_s!r}: give a positive number of seconds")
        self.stream_write_timeout_s = stream_write_timeout_s
        self.pop_now_ms = pop_now_ms
        self.remoting_options = remoting
        self.transaction_checks = transaction_checks  # both RocketMQ doors', one object
        self.broker_name = broker_name  # both RocketMQ doors' too
        self.acl = acl
        self.tls = tls
        self.remoting: RemotingDoor | None = None
        self.v2: MessagingService | None = None
        self.core: BrokerCore | None = None
        self.calls_in_flight: CallsInFlight | None = None  # the gRPC port's calls per client, once started
        self._server: grpc.aio.Server | None = None
        self._loop: _LoopThread | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    @property
    def endpoint(self) -> str:
        """"host:port" as clients dial it."""
        return f"{_host_part(self.host)}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes the broker's metrics, once they are served."""
        if self._metrics_server is None:
            return None
        return f"{'https' if self.tls is not None else 'http'}://{self.metrics_host}:{self.metrics_port}/metrics"

    def start(self) -> int:
        with self._lock:
            if self._server is not None or self._stopped.is_set():
                raise RuntimeError("a Broker starts once; create another one to start again")
            with contextlib.ExitStack() as started:  # what started is stopped again when a later part fails
                limit = max(MAX_GRPC_MESSAGE_BYTES, self.store_config.max_message_bytes + _ENVELOPE_BYTES)
                loop = _LoopThread(ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="rmq-rpc"))
                calls = CallsInFlight(self.limits.max_requests_in_flight_per_ip, loop.pool)
                server = loop.run(_new_server(loop.pool, [
                    ("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
                    ("grpc.so_reuseport", 0), ("grpc.max_concurrent_streams", max_streams_per_connection(self.limits))],
                    [calls]))
                started.callback(loop.close, server)
                port = self._bind(server)
                remoting = self._bind_remoting()
                if remoting is not None:
                    started.callback(remoting.stop)
                    remoting.server.grpc_port = port  # named to gRPC clients that reach the remoting port
                # RocketMQ's clients find a message's broker by its store host: the remoting door's.
                core = BrokerCore.open(self.data_dir, self._core_options(remoting.server.port if remoting else port))
                started.callback(core.close, _DRAIN_TIMEOUT_S)
                self._add_doors(server, core, loop, port)
                if remoting is not None:
                    remoting.start(core)
                if self.metrics_port is not None:
                    self._metrics_server = self._serve_metrics()
                    started.callback(_stop_http, self._metrics_server)
                loop.run(server.start())
                self.v2.start()
                started.pop_all()
            self.core, self._server, self._loop, self.port, self.remoting = core, server, loop, port, remoting
            self.calls_in_flight = calls
            log.info("broker listening on %s%s, data in %s", self.endpoint,
                     " (TLS only" + (", client certificates required)" if self.tls.mutual else ")") if self.tls else "",
                     self.data_dir)
            return port

    def _bind(self, server: grpc.aio.Server) -> int:
        address = f"{_host_part(self.host)}:{self.port}"
        try:
            port = (server.add_secure_port(address, self.tls.grpc_credentials()) if self.tls is not None
                    else server.add_insecure_port(address))
        except RuntimeError as err:
            port, cause = 0, err
        else:
            cause = None
        if not port:
            raise BindError(f"cannot listen on {address}: the port is in use or the host is not an address of "
                            "this machine; choose another --port (0: any free port) or --host") from cause
        return port

    def _core_options(self, port: int) -> CoreOptions:
        store = dataclasses.replace(self.store_config, store_host=_store_ip(self.host), store_port=port)
        return CoreOptions(store, self.offsets_flush_interval_ms, self.transaction_config,
                           self.transaction_clock_ms, self.pop_config, self.pop_now_ms, payload_check=check_batch,
                           limits=self.limits, accept_state_loss=self.accept_state_loss, metrics=self.metrics,
                           auto_create_topics=self.auto_create_topics)

    def _serve_metrics(self) -> MetricsServer:
        """The metrics port (doors/metrics_http.py: bounded, timed out), its port taken, served by a
        thread of its own."""
        host = self.metrics_host if self.metrics_host is not None else _host_part(self.host)
        context = self.tls.ssl_context() if self.tls is not None else None
        admins = None
        if self.metrics_auth == "admin":
            guard = self.acl
            admins = lambda: {a.access_key: a.secret_key for a in guard.config.accounts.values() if a.admin}  # noqa: E731
        try:
            server = MetricsServer((host.strip("[]"), self.metrics_port), self.metrics.registry, ssl_context=context,
                                   admins=admins)
        except OSError as err:
            raise BindError(f"cannot serve metrics on {host}:{self.metrics_port}: {err.strerror or err}; choose "
                            "another --metrics-port (0: any free port) or --metrics-host") from err
        self.metrics_port = server.server_port
        self.metrics_host = host
        threading.Thread(target=server.serve_forever, name="rmq-metrics-http", daemon=True).start()
        return server

    def _add_doors(self, server: grpc.aio.Server, core: BrokerCore, loop: "_LoopThread", port: int) -> None:
        """Our contract's services, and RocketMQ 5's MessagingService beside them on the same port."""
        admin, messaging = make_servicers(core, self.stream_write_timeout_s, self.broker_name)
        self.v2 = MessagingService(core, (_store_ip(self.host), port), loop.loop, broker_name=self.broker_name,
                                   checks=self.transaction_checks)
        ours = GrpcAdmission(self.acl, demands_of(core.message_topic)) if self.acl is not None else None
        v2s = GrpcAdmission(self.acl, V2_DEMANDS) if self.acl is not None else None
        metrics = core.metrics
        server.add_generic_rpc_handlers((
            _service_handler(pb, "Admin", admin, ours, metrics),
            _service_handler(pb, "Messaging", messaging, ours, metrics),
            _service_handler(txn_pb2, "Transactions", TransactionsServicer(core), ours, metrics),
            _service_handler(pop_pb2, "Pop", PopServicer(core), ours, metrics),
            _service_handler(v2_pb2, "MessagingService", self.v2, v2s, metrics, protocol="grpc")))

    def _bind_remoting(self) -> RemotingDoor | None:
        """RocketMQ's remoting door (broker and name server) when asked for, its port taken."""
        if self.remoting_options is None:
            return None
        door = RemotingDoor(self.host, _store_ip(self.host), self.remoting_options, self.limits, self.acl,
                            self.tls.ssl_context() if self.tls is not None else None, self.transaction_checks,
                            self.broker_name)
        try:
            door.bind()
        except OSError as err:
            raise BindError(f"cannot listen for RocketMQ's remoting protocol on {_host_part(self.host)}:"
                            f"{self.remoting_options.port}: {err.strerror or err}; choose another --remoting-port "
                            "(0: any free port)") from err
        return door

    def stop(self, grace: float | None = None) -> None:
        """Stop serving, wait for calls in flight (``grace`` seconds, then they are cancelled),
        and close the core. Idempotent."""
        with self._lock:
            if self._server is None or self._stopped.is_set():
                self._stopped.set()
                return
            self.core.stop_waiting()  # long-polling pops answer now
            try:
                self.v2.stop()
                if self.remoting is not None:
                    self.remoting.stop()
                self._loop.close(self._server, grace)
                if self._metrics_server is not None:
                    _stop_http(self._metrics_server)
                self.core.close(_DRAIN_TIMEOUT_S)
            finally:
                self._stopped.set()
            log.info("broker stopped; data in %s", self.data_dir)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the broker is stopped; False on timeout."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> "Broker":
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop(grace=1.0)


class _LoopThread:
    """The gRPC server's event loop, run by a thread of its own, with the thread pool of the
    server's sync handlers (also the loop's default executor: ReadRanges reads the store there)."""

    def __init__(self, pool: ThreadPoolExecutor):
        self.pool = pool
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(pool)
        self._thread = threading.Thread(target=self.loop.run_forever, name="rmq-grpc-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine, timeout: float | None = None):
        """Run ``coroutine`` on the loop; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self, server: grpc.aio.Server, grace: float | None = None) -> None:
        """Stop ``server`` (calls in flight get ``grace`` seconds, then are cancelled), then the loop."""
        try:
            self.run(server.stop(grace), (grace or 0) + _DRAIN_TIMEOUT_S)
            self.run(_finish_other_tasks(), _DRAIN_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            log.warning("the gRPC server did not stop within %.0f s; stopping its loop anyway", _DRAIN_TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(_DRAIN_TIMEOUT_S)
            if not self._thread.is_alive():
                self.loop.run_until_complete(_cancel_leftovers())
                self.loop.close()
            self.pool.shutdown(wait=False)


async def _finish_other_tasks() -> None:
    """Let the tasks a stopped server leaves on the loop (a handler still waiting for the pool)
    end, rather than have them destroyed pending when the loop closes; cancel what is left."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    if tasks:
        _done, pending = await asyncio.wait(tasks, timeout=_DRAIN_TIMEOUT_S / 2)
        for task in pending:
            task.cancel()


async def _cancel_leftovers() -> None:
    """Run once more what the stopped loop had left: a sync streaming handler in the pool waits
    on the loop for its next request (gRPC's run_coroutine_threadsafe(...).result()); cancelled,
    it ends, where on a loop that never runs again it would wait forever, and the process, which
    joins the pool's threads at exit, with it."""
    await asyncio.sleep(0)  # callbacks sent to the stopped loop become tasks
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _new_server(pool: ThreadPoolExecutor, options: list, interceptors: list) -> grpc.aio.Server:
    # made on the loop it is to run on
    return grpc.aio.server(migration_thread_pool=pool, options=options, interceptors=interceptors)


def _service_handler(pb_module, name: str, servicer, admission: GrpcAdmission | None = None, metrics=NO_METRICS,
                     protocol: str = "contract") -> grpc.GenericRpcHandler:
    """The service's handlers, as the generated add_*Servicer_to_server makes them, except that
    a request that does not parse reaches the servicer as a MalformedRequest (refused with
    INVALID_ARGUMENT) rather than failing in gRPC with INTERNAL, that a handler may answer
    with bytes it serialized itself (serialized.py), and that with ``admission`` (ACLs) each
    call is checked before its handler runs; with ``metrics`` (BrokerMetrics) each call is counted
    as ``protocol``'s (``contract``: ours; ``grpc``: RocketMQ 5's, as RocketMQ names it)."""
    service = pb_module.DESCRIPTOR.services_by_name[name]
    handlers = {}
    for method in service.methods:
        request_type = getattr(pb_module, method.input_type.name)
        response_type = getattr(pb_module, method.output_type.name)
        make = _HANDLER_MAKERS[method.client_streaming, method.server_streaming]
        behavior = getattr(servicer, method.name)
        if admission is not None:
            behavior = admission.guarded(method.name, behavior, method.client_streaming)
        if metrics is not NO_METRICS:
            behavior = timed(behavior, protocol, _snake(method.name), metrics)
        handlers[method.name] = make(behavior, request_deserializer=_parser(request_type),
                                     response_serializer=serializer(response_type))
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


_HANDLER_MAKERS = {(False, False): grpc.unary_unary_rpc_method_handler,
                   (False, True): grpc.unary_stream_rpc_method_handler,
                   (True, True): grpc.stream_stream_rpc_method_handler}


def _checked_metrics_auth(auth: str, tls: TlsOptions | None, acl: Guard | None) -> str:
    """``--metrics-auth``, refused with a sentence where the broker lacks what it asks for."""
    if auth not in METRICS_AUTH:
        raise ValueError(f"--metrics-auth {auth!r}: use one of {', '.join(METRICS_AUTH)}")
    if auth == "tls-client" and (tls is None or not tls.mutual):
        raise ValueError("--metrics-auth tls-client asks scrapes for a client certificate signed by --tls-client-ca: "
                         "give --tls-cert, --tls-key and --tls-client-ca")
    if auth == "admin" and acl is None:
        raise ValueError("--metrics-auth admin asks scrapes for an admin account's credentials: give --acl-file")
    if auth == "admin" and tls is None:  # Basic credentials over plain HTTP hand the admin's key to any listener
        raise ValueError("--metrics-auth admin sends an admin account's secret key with every scrape: give --tls-cert "
                         "and --tls-key, so that it travels encrypted")
    return auth


def _stop_http(server) -> None:
    server.shutdown()
    server.server_close()


def _snake(method: str) -> str:
    """A gRPC method's name as RocketMQ names request codes: ``SendMessage`` -> ``send_message``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()


def _parser(message_type):
    def parse(data: bytes):
        try:
            return message_type.FromString(data)
        except (DecodeError, ValueError) as err:
            return MalformedRequest(message_type.DESCRIPTOR.name, err)

    return parse


def _host_part(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _store_ip(host: str) -> str:
    """The IPv4 address records name as their store host (the record format has IPv4 hosts)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.version == 4 and not address.is_unspecified:
        return str(address)
    name = socket.gethostname() if address is not None else host  # 0.0.0.0 or "::": this machine's address
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"
