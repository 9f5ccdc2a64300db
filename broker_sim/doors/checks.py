"""Transactions RocketMQ's producers left open, checked back with them, as RocketMQ's
TransactionalMessageCheckService does: each is checked every ``interval_ms`` (not before its
immunity time) with whoever can answer, and rolled back after ``check_max`` checks
(``CheckSettings``: one object, built once by the broker from its flags or broker.conf and
handed to both doors). Both RocketMQ doors keep a ``TransactionChecks`` and ``start`` its loop
(a ServiceThread): the remoting door asks the producer group over its connection, the v2 door
the client over its Telemetry stream. Kept in memory: after a restart the core's own
transaction timeout ends what is left open. Only the RocketMQ doors check: it lives with them."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from broker_sim.common.service_thread import ServiceThread
from broker_sim.core.errors import BrokerFault

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckSettings:
    """RocketMQ's transactionCheckInterval (30 s) and transactionCheckMax (15): a half message
    left unknown this long is checked back with its producer, again every interval, and rolled
    back after this many checks (``--transaction-check-interval-ms``, ``--transaction-check-max``)."""

    interval_ms: int = 30_000
    check_max: int = 15


DEFAULT_CHECKS = CheckSettings()


@dataclass
class OpenTransaction:
    """A transaction a producer opened: whom to ask (``owner``: a producer group, a client id)."""

    transaction_id: str
    owner: str
    topic: str
    sent_ms: float
    first_check_ms: float
    checks: int = 0


class TransactionChecks:
    def __init__(self, core, settings: CheckSettings, clock_ms=lambda: time.monotonic() * 1000):
        self.core = core
        self.settings = settings
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._open: dict[str, OpenTransaction] = {}
        self._checker: ServiceThread | None = None

    def start(self, ask: Callable[[OpenTransaction, bytes], bool], name: str, period_ms: int | None = None) -> None:
        """Check the due transactions with ``ask`` (see ``check_once``) every ``period_ms``
        (default: the check interval), on a thread named ``name``, until ``stop``."""
        period_s = (self.settings.interval_ms if period_ms is None else period_ms) / 1000
        self._checker = ServiceThread(name, period_s, lambda: self._check_on_interval(ask),
                                      task="checking transactions")
        self._checker.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the checks (waiting up to ``timeout_s`` for one under way); a no-op when not started."""
        if self._checker is not None:
            self._checker.stop(timeout_s)

    def opened(self, transaction_id: str, owner: str, topic: str, immunity_ms: int = 0) -> None:
        now = self._clock_ms()
        with self._lock:
            self._open[transaction_id] = OpenTransaction(transaction_id, owner, topic, now, now + immunity_ms)

    def ended(self, transaction_id: str) -> None:
        with self._lock:
            self._open.pop(transaction_id, None)

    def check_once(self, ask: Callable[[OpenTransaction, bytes], bool]) -> int:
        """Check the transactions that are due: ``ask(transaction, half)`` sends the check (the
        first message prepared under it, in the record layout) and says whether anyone could be
        asked. How many were asked."""
        asked = 0
        for transaction in self._due():
            if transaction.checks >= self.settings.check_max:
                log.warning("transaction %s unanswered after %d checks: rolled back", transaction.transaction_id,
                            transaction.checks, extra={"transaction": transaction.transaction_id,
                                                       "topic": transaction.topic, "producer": transaction.owner})
                self._roll_back(transaction.transaction_id)
                continue
            half = self.core.prepared_message(transaction.transaction_id)
            if half is None:  # ended meanwhile: the core's own timeout, another door
                self.ended(transaction.transaction_id)
                continue
            transaction.checks += 1
            asked += bool(ask(transaction, half))
        return asked

    def _check_on_interval(self, ask: Callable[[OpenTransaction, bytes], bool]) -> None:
        self.check_once(ask)  # (None: the next checks come after the period)

    def _due(self) -> list[OpenTransaction]:
        now = self._clock_ms()
        with self._lock:
            return [t for t in self._open.values()
                    if now >= t.first_check_ms and now - t.sent_ms >= self.settings.interval_ms * (t.checks + 1)]

    def _roll_back(self, transaction_id: str) -> None:
        try:
            self.core.rollback_transactions([(transaction_id, 1)])
        except BrokerFault as refused:
            log.info("rolling back %s: %s", transaction_id, refused.message, extra={"transaction": transaction_id})
        self.ended(transaction_id)
