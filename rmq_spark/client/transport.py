"""The one place that talks gRPC: channel options, deadlines, retries with backoff for the
retriable codes only, and gRPC status -> a typed error of errors.py."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import grpc

from ..errors import ConfigError, RmqError, error_for
from ..protocol.v1 import broker_pb2, broker_pb2_grpc

MAX_MESSAGE_BYTES = 64 << 20


@dataclass(frozen=True)
class TransportConfig:
    """Deadlines and retries of the calls to the broker.

    ``retries``: further attempts of a call that failed with a retriable code, when the call is
    safe to repeat; the wait before attempt n is ``retry_backoff_ms * 2**n`` (capped at
    ``retry_backoff_max_ms``) with jitter.
    """

    timeout_ms: int = 10_000
    retries: int = 3
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 2_000
    keepalive_ms: int = 30_000

    def __post_init__(self):
        for name in ("timeout_ms", "retry_backoff_ms", "retry_backoff_max_ms", "keepalive_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be a positive number of milliseconds")
        if self.retries < 0:
            raise ConfigError(f"retries={self.retries!r}: must be 0 or more")


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it is ``HOST:PORT`` (a port from 1 to 65535); else ``ConfigError``, before
    any connection is tried."""
    host, sep, port = str(endpoint).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"endpoint {endpoint!r} is not HOST:PORT (for example 127.0.0.1:10911)")
    return endpoint


class Transport:
    """A channel to one broker with the Admin and Messaging stubs."""

    def __init__(self, endpoint: str, config: TransportConfig | None = None, *,
                 sleep: Callable[[float], None] = time.sleep):
        self.endpoint = check_endpoint(endpoint)
        self.config = config or TransportConfig()
        self._sleep = sleep
        self.channel = grpc.insecure_channel(endpoint, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", self.config.keepalive_ms),
            ("grpc.keepalive_permit_without_calls", 1),
        ])
        self.admin = broker_pb2_grpc.AdminStub(self.channel)
        self.messaging = broker_pb2_grpc.MessagingStub(self.channel)
        # SendMany of a request serialized by the caller (see producer/sender.py: join_sends).
        self.send_many_serialized = self.channel.unary_unary(
            "/rmq_spark.protocol.v1.Messaging/SendMany", request_serializer=None,
            response_deserializer=broker_pb2.SendManyResponse.FromString)

    def call(self, method, request, *, timeout_ms: int | None = None, retry: bool = True):
        """A unary call; retried on retriable errors when ``retry`` (the call is safe to repeat)."""
        attempts = 1 + (self.config.retries if retry else 0)
        for attempt in range(attempts):
            try:
                return method(request, timeout=self._timeout_s(timeout_ms))
            except grpc.RpcError as err:
                error = self.error(err)
                if not error.retriable or attempt + 1 == attempts:
                    raise error from None
                self._sleep(self.backoff_s(attempt))
        raise AssertionError("unreachable")

    def stream(self, method, request, *, timeout_ms: int | None = None) -> Iterator:
        """A server-streaming call; errors become typed errors (not retried: the caller
        knows how far it got)."""
        try:
            yield from method(request, timeout=self._timeout_s(timeout_ms))
        except grpc.RpcError as err:
            raise self.error(err) from None

    def error(self, err: grpc.RpcError) -> RmqError:
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        details = (err.details() if hasattr(err, "details") else None) or str(err)
        reason = None
        for key, value in (err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else ():
            if key == "rmq-reason":
                reason = value
        if code == grpc.StatusCode.UNAVAILABLE and reason is None:
            details = f"broker at {self.endpoint} is unavailable: {details}"
        return error_for(code.name, details, reason, code)

    def close(self) -> None:
        self.channel.close()

    def _timeout_s(self, timeout_ms: int | None) -> float:
        return (timeout_ms or self.config.timeout_ms) / 1000

    def backoff_s(self, attempt: int) -> float:
        """The wait before retry ``attempt + 1``: exponential, capped, with jitter."""
        ceiling = min(self.config.retry_backoff_max_ms, self.config.retry_backoff_ms * 2 ** attempt)
        return ceiling * random.uniform(0.5, 1.0) / 1000
