"""The v2 door's clients: each one's settings (given on its Telemetry stream, merged with the
broker's as the proxy's GrpcClientSettingsManager merges them), the stream the broker writes
commands to, and the transactions it left prepared, checked back through that stream."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from broker_sim.core import BrokerCore, BrokerError
from broker_sim.protocol.rocketmq_v2 import messaging_pb2 as v2

from .messages import duration, incoming

log = logging.getLogger(__name__)

# The proxy's defaults (ProxyConfig, SubscriptionGroupConfig, CustomizedRetryPolicy).
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_MS = (10, 1000, 2.0)  # initial, max, multiplier
CONSUMER_BATCH_SIZE = 32
CONSUMER_MAX_LONG_POLLING_MS = 20_000
CONSUMER_MAX_ATTEMPTS = 17  # retryMaxTimes 16, plus the first delivery
CONSUMER_RETRY_DELAYS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


def merged_settings(settings, max_body_bytes: int, fifo: bool = False):
    """What the broker answers a client's settings with: a producer learns the largest body
    and its retry backoff (without them the official clients fail every send, or never start),
    a consumer its batch size, long-polling time, retry policy and whether its group is FIFO."""
    out = v2.Settings()
    out.CopyFrom(settings)
    if settings.HasField("publishing"):
        initial, most, multiplier = PRODUCER_BACKOFF_MS
        out.backoff_policy.CopyFrom(v2.RetryPolicy(max_attempts=PRODUCER_MAX_ATTEMPTS, exponential_backoff=(
            v2.ExponentialBackoff(initial=duration(initial), max=duration(most), multiplier=multiplier))))
        out.publishing.max_body_size = max_body_bytes
        out.publishing.validate_message_type = True
    elif settings.HasField("subscription"):
        out.subscription.receive_batch_size = CONSUMER_BATCH_SIZE
        out.subscription.long_polling_timeout.CopyFrom(duration(CONSUMER_MAX_LONG_POLLING_MS))
        out.subscription.fifo = fifo
        out.backoff_policy.CopyFrom(v2.RetryPolicy(max_attempts=CONSUMER_MAX_ATTEMPTS, customized_backoff=(
            v2.CustomizedBackoff(next=[duration(s * 1000) for s in CONSUMER_RETRY_DELAYS_S]))))
    out.metric.CopyFrom(v2.Metric(on=False))
    return out


class Session:
    """A client's Telemetry stream: commands for it are queued on the stream's event loop."""

    def __init__(self, client_id: str, loop: asyncio.AbstractEventLoop):
        self.client_id = client_id
        self.loop = loop
        self.outbox: asyncio.Queue = asyncio.Queue()

    def send(self, command) -> None:
        """Queue ``command`` for the client (from any thread)."""
        self.loop.call_soon_threadsafe(self.outbox.put_nowait, command)

    def close(self) -> None:
        self.send(None)


@dataclass
class Prepared:
    """A transactional message a client sent and has not ended."""

    transaction_id: str
    client_id: str
    topic: str
    sent_ms: float
    first_check_ms: float
    checks: int = 0


class Clients:
    """Settings and Telemetry sessions by client id, and the prepared transactions to check."""

    def __init__(self, clock_ms=lambda: time.monotonic() * 1000):
        self._lock = threading.Lock()
        self._settings: dict[str, object] = {}
        self._sessions: dict[str, Session] = {}
        self._prepared: dict[str, Prepared] = {}
        self._clock_ms = clock_ms

    def settings(self, client_id: str):
        with self._lock:
            return self._settings.get(client_id)

    def set_settings(self, client_id: str, settings) -> None:
        with self._lock:
            self._settings[client_id] = settings

    def attach(self, session: Session) -> None:
        with self._lock:
            old = self._sessions.get(session.client_id)
            self._sessions[session.client_id] = session
        if old is not None:
            old.close()

    def detach(self, session: Session) -> None:
        with self._lock:
            if self._sessions.get(session.client_id) is session:
                del self._sessions[session.client_id]

    def forget(self, client_id: str) -> None:
        """NotifyClientTermination: the client is gone."""
        with self._lock:
            self._settings.pop(client_id, None)
            session = self._sessions.pop(client_id, None)
        if session is not None:
            session.close()

    def session_for(self, client_id: str, topic: str) -> Session | None:
        """The client's own session, else one of a producer that publishes ``topic`` (as the
        proxy asks any producer of the topic when the sender is gone)."""
        with self._lock:
            session = self._sessions.get(client_id)
            if session is not None:
                return session
            for other_id, other in self._sessions.items():
                settings = self._settings.get(other_id)
                if settings is not None and settings.HasField("publishing") and \
                        any(t.name == topic for t in settings.publishing.topics):
                    return other
        return None

    def prepared(self, transaction_id: str, client_id: str, topic: str, immunity_ms: int) -> None:
        now = self._clock_ms()
        with self._lock:
            self._prepared[transaction_id] = Prepared(transaction_id, client_id, topic, now, now + immunity_ms)

    def ended(self, transaction_id: str) -> None:
        with self._lock:
            self._prepared.pop(transaction_id, None)

    def due(self, interval_ms: int) -> list[Prepared]:
        now = self._clock_ms()
        with self._lock:
            return [p for p in self._prepared.values()
                    if now >= p.first_check_ms and now - p.sent_ms >= interval_ms * (p.checks + 1)]


class OrphanChecks:
    """Transactions left prepared are checked back with their producer (a
    RecoverOrphanedTransactionCommand on its Telemetry stream) every ``interval_ms``, and rolled
    back after ``check_max`` checks, as RocketMQ's TransactionalMessageCheckService does."""

    def __init__(self, core: BrokerCore, clients: Clients, interval_ms: int, check_max: int):
        self.core = core
        self.clients = clients
        self.interval_ms = interval_ms
        self.check_max = check_max

    def check_once(self) -> int:
        """Send the checks that are due; how many were sent."""
        sent = 0
        for prepared in self.clients.due(self.interval_ms):
            if prepared.checks >= self.check_max:
                log.warning("transaction %s unanswered after %d checks: rolled back", prepared.transaction_id,
                            prepared.checks)
                self._roll_back(prepared.transaction_id)
                continue
            half = self.core.prepared_message(prepared.transaction_id)
            if half is None:  # ended meanwhile: the core's own timeout, another door
                self.clients.ended(prepared.transaction_id)
                continue
            prepared.checks += 1
            session = self.clients.session_for(prepared.client_id, prepared.topic)
            if session is None:
                continue
            [message] = incoming(half, prepared.topic, 0, 0, None)
            session.send(v2.TelemetryCommand(recover_orphaned_transaction_command=v2.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=prepared.transaction_id)))
            sent += 1
        return sent

    def _roll_back(self, transaction_id: str) -> None:
        try:
            self.core.rollback_transactions([(transaction_id, 1)])
        except BrokerError as refused:
            log.info("rolling back %s: %s", transaction_id, refused.message)
        self.clients.ended(transaction_id)
