"""The client's calls to a RocketMQ cluster: one connection per broker or name server, many
requests in flight on each (``RemotingConnection``), answers waited for with the config's
timeout, requests that are safe to repeat retried with backoff, and each broker's RocketMQ
version (versions.py), asked once.

A connection refused or broken before the address ever answered may be TLS on one side only:
then the error is a ConfigError saying so (tls.py), not a broker that is away.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import socket
import threading
from concurrent.futures import Future
from typing import Callable

from rmq_spark.client.remoting.refusals import code_name
from rmq_spark.client.remoting.versions import BrokerVersion, refusal
from rmq_spark.client.tls import ssl_context, tls_mismatch
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import BrokerUnavailableError, ConfigError, RequestTimeoutError, RmqError
from rmq_wire.remoting import RemotingCommand, RemotingConnection, RequestCode

CONNECT_S = 10.0  # a connection is made or refused quickly; the config's timeout is for answers

_instances = itertools.count(1)


def client_id() -> str:
    """RocketMQ's client id: IP@instance, unique per process and transport."""
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    return f"{host}@rocketmq-batch-{os.getpid()}-{next(_instances)}"


class Calls:
    """Requests to the addresses of one cluster. ``on_request(connection, command)`` is told of
    each request a broker sends this client (a check of a half message); ``sleep`` and
    ``backoff_s(attempt)`` pace the retries."""

    def __init__(self, config: TransportConfig, *, sleep: Callable[[float], None],
                 backoff_s: Callable[[int], float],
                 on_request: Callable[[RemotingConnection, RemotingCommand], None] | None = None):
        self.config = config
        self.sleep = sleep
        self.backoff_s = backoff_s
        self.on_request = on_request
        self._tls = ssl_context(config) if config.tls else None
        self._connections: dict[str, RemotingConnection] = {}
        self._spoken: set[str] = set()  # addresses that answered once: a later failure is not TLS's
        self._versions: dict[str, BrokerVersion] = {}  # broker address -> its RocketMQ version
        self._lock = threading.Lock()

    def connection(self, address: str) -> RemotingConnection:
        connection = self._connections.get(address)  # one read of a dict: no lock (made and replaced under it)
        if connection is not None and not connection.closed:
            return connection
        if connection is not None and connection.answered:
            self._spoken.add(address)
        try:
            connection = RemotingConnection(address, timeout_s=min(self.config.timeout_ms / 1000, CONNECT_S),
                                            credentials=self.config.credentials, tls=self._tls)
        except OSError as err:
            raise self.unavailable(address, f"cannot connect to {address}: {err.strerror or err}") from None
        with self._lock:
            current = self._connections.get(address)
            if current is not None and not current.closed:
                connection.close()
                return current
            self._connections[address] = connection
        if self.on_request is not None:
            connection.on_request = lambda command: self.on_request(connection, command)
        return connection

    def request(self, address: str, code: int, fields: dict, body: bytes = b"") -> Future:
        """Send a request without waiting: a Future of its answer (ConnectionError when the
        connection fails before it)."""
        connection = self.connection(address)
        try:
            return connection.request(code, fields, body)
        except (OSError, ConnectionError) as err:
            raise self.unavailable(address, f"the connection to {address} failed: {err}") from None

    def request_many(self, address: str, code: int, many_fields: list) -> list[Future]:
        """``request`` of many requests without bodies to one broker, written together."""
        connection = self.connection(address)
        try:
            return connection.request_many(code, many_fields)
        except (OSError, ConnectionError) as err:
            raise self.unavailable(address, f"the connection to {address} failed: {err}") from None

    def wait(self, future: Future, address: str, code: int, timeout_ms: int | None = None) -> RemotingCommand:
        """A request's answer, or RequestTimeoutError / BrokerUnavailableError."""
        timeout_s = (timeout_ms or self.config.timeout_ms) / 1000
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self.forget(future, address)
            raise RequestTimeoutError(f"{address} did not answer request {code_name(code)} within {timeout_s:.0f} s") \
                from None
        except (ConnectionError, OSError) as err:
            raise self.unavailable(address, f"{address}: {err}") from None

    def forget(self, future: Future, address: str) -> None:
        """No longer wait for the answer of ``future`` (a request to ``address``)."""
        connection = self._connections.get(address)
        if connection is not None and not future.done():
            connection.forget(future)

    def unavailable(self, address: str, failure: str) -> RmqError:
        """BrokerUnavailableError saying ``failure``; or a ConfigError when TLS, on one side only,
        is why (tls.py asks the broker with one more connection, never after the address answered
        us once: TLS cannot be why then, and the probe's handshake would have the broker log a
        TLS client at a plain port): trying again would not help."""
        connection = self._connections.get(address)
        if address in self._spoken or (connection is not None and connection.answered):
            self._spoken.add(address)
            return BrokerUnavailableError(failure)
        mismatch = tls_mismatch(address, self.config)
        if mismatch is not None:
            return ConfigError(f"{mismatch} ({failure})")
        return BrokerUnavailableError(failure)

    def invoke(self, address: str, code: int, fields: dict, body: bytes = b"",
               timeout_ms: int | None = None) -> RemotingCommand:
        """One request and its answer, retried on a broken connection or a timeout (only for
        requests that are safe to repeat: every one sent through here)."""
        attempts = 1 + self.config.retries
        for attempt in range(attempts):
            try:
                return self.wait(self.request(address, code, fields, body), address, code, timeout_ms)
            except (BrokerUnavailableError, RequestTimeoutError):
                if attempt + 1 == attempts:
                    raise
                self.sleep(self.backoff_s(attempt))
        raise AssertionError("unreachable")

    def invoke_all(self, calls: list[tuple[str, int, dict]], failures: bool = False) -> list:
        """Many requests (address, code, fields) in flight at once; their answers in order. A
        request that failed is sent again alone (they are all safe to repeat); with
        ``failures`` one that fails again has its error in its place instead of raising it."""
        futures = []
        for address, code, fields in calls:
            try:
                futures.append(self.request(address, code, fields))
            except BrokerUnavailableError:
                futures.append(None)
        answers, down = [], {}  # down: brokers that failed even alone, not asked again in this call
        for (address, code, fields), future in zip(calls, futures):
            try:
                if future is None:
                    raise BrokerUnavailableError(address)
                answers.append(self.wait(future, address, code))
            except (BrokerUnavailableError, RequestTimeoutError):
                try:
                    if address in down:
                        raise down[address]
                    answers.append(self.invoke(address, code, fields))
                except (BrokerUnavailableError, RequestTimeoutError) as err:
                    down[address] = err
                    if not failures:
                        raise
                    answers.append(err)
        return answers

    def broker_version(self, address: str) -> BrokerVersion:
        """The RocketMQ version of the broker at ``address``, as its answer says (every remoting
        answer carries it, a refusal too: versions.py); asked once per broker."""
        with self._lock:
            known = self._versions.get(address)
        if known is None:
            known = BrokerVersion(self.invoke(address, RequestCode.GET_BROKER_RUNTIME_INFO, {}).version)
            with self._lock:
                self._versions[address] = known
        return known

    def require(self, feature: str, broker: str, address: str) -> None:
        """ConfigError naming the broker's version when it lacks ``feature`` (versions.py)."""
        version = self.broker_version(address)
        if not version.has(feature):
            raise refusal(feature, version, f"broker {broker} ({address})")

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()
