"""The v2 door's clients: each one's settings (given on its Telemetry stream, merged with the
broker's as the proxy's GrpcClientSettingsManager merges them) and the stream the broker writes
commands to (checks of the transactions it left open among them)."""

from __future__ import annotations

import asyncio
import logging
import threading

from broker_sim.doors.checks import OpenTransaction
from broker_sim.doors.rocketmq_v2.messages import duration, incoming
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2

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


class Clients:
    """Settings and Telemetry sessions by client id."""

    def __init__(self):
        self._lock = threading.Lock()
        self._settings: dict[str, object] = {}
        self._sessions: dict[str, Session] = {}

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


def ask_client(clients: Clients, transaction: OpenTransaction, half: bytes) -> bool:
    """Check a transaction with the client that opened it (or a producer of its topic), as a
    RecoverOrphanedTransactionCommand on its Telemetry stream."""
    session = clients.session_for(transaction.owner, transaction.topic)
    if session is None:
        return False
    [message] = incoming(half, transaction.topic, 0, 0, None)
    session.send(v2.TelemetryCommand(recover_orphaned_transaction_command=v2.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=transaction.transaction_id)))
    return True
