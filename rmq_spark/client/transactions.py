"""Transactions for exactly-once writers.

A writer sends its batches prepared under a transaction id of its own: stored by the broker,
invisible to every reader until committed. A committer then commits (or rolls back) many
transactions in one call, and may record a sink batch (sink id, batch id) in the same atomic
step; asking for that sink batch later tells a replay that it was committed already.

    # a writer task attempt (an id unique to the attempt)
    with Producer(endpoint, transaction_id=new_transaction_id("orders-sink")) as producer:
        producer.send_arrow(arrow_table, topic="orders").wait()   # prepared: stored, invisible
        producer.flush()
        prepared = producer.prepared()                  # PreparedTransaction, to the committer

    # the committer (a Spark driver's commit(messages, batchId))
    with Transactions(endpoint) as txns:
        if txns.sink_batch("orders-sink", 7).committed:  # a replay: make nothing visible
            txns.rollback(prepared_list)
        else:
            txns.commit(prepared_list, sink_id="orders-sink", batch_id=7)

A commit is idempotent (a repeated one changes nothing and says so, so it is retried on
transport errors); a commit naming a sink batch committed before makes nothing visible and
rolls back the call's open transactions. Transactions never ended are rolled back by the
broker's timeout (15 minutes by default), so a writer that dies leaves nothing behind.
"""

from __future__ import annotations

import uuid

from rmq_spark.client.connect import connect
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import ConfigError
from rmq_spark.structs import CommitResult, PreparedTransaction, SinkBatchStatus, SinkInfo, TransactionInfo
from rmq_wire.types import TRANSACTION_ID_PATTERN, TRANSACTION_ID_RULE

_UUID_CHARS = 33  # "." and 32 hex digits
DEFAULT_COMMIT_TIMEOUT_MS = 120_000


def check_id(value, what: str = "transaction id") -> str:
    if not isinstance(value, str) or not TRANSACTION_ID_PATTERN.match(value):
        raise ConfigError(f"{what} {value!r:.80} is malformed: use {TRANSACTION_ID_RULE}")
    return value


def new_transaction_id(prefix: str = "txn") -> str:
    """A fresh transaction id: ``prefix`` (what wrote it, for people reading the broker's
    transaction list) and a random UUID."""
    check_id(prefix, "transaction id prefix")
    if len(prefix) + _UUID_CHARS > 255:
        raise ConfigError(f"transaction id prefix {prefix[:40]!r}... is {len(prefix)} characters: use at most "
                          f"{255 - _UUID_CHARS}")
    return f"{prefix}.{uuid.uuid4().hex}"


class Transactions:
    """Ends transactions and answers whether a sink batch was committed.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    transport : TransportConfig, optional
        Deadlines, retries and TLS of the calls (all of them are safe to repeat).
    commit_timeout_ms : int
        Deadline of a commit or rollback, which copies every prepared batch (120 s).
    """

    def __init__(self, endpoint: str, transport: TransportConfig | None = None, *,
                 commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS):
        if not isinstance(commit_timeout_ms, int) or commit_timeout_ms <= 0:
            raise ConfigError(f"commit_timeout_ms={commit_timeout_ms!r}: must be a positive number of milliseconds")
        self._transport = connect(endpoint, transport)
        self.commit_timeout_ms = commit_timeout_ms

    def commit(self, transactions, *, sink_id: str | None = None, batch_id: int | None = None) -> CommitResult:
        """Make every batch of ``transactions`` visible, in this order, and record the sink
        batch ``(sink_id, batch_id)`` as committed in the same atomic step.

        ``transactions``: ``PreparedTransaction``s (their message counts are checked by the
        broker) or ids. Committed ones change nothing (``changed`` False). Raises
        ``TransactionNotFoundError``, ``TransactionStateError`` (one was rolled back) or
        ``TransactionIncompleteError`` (messages lost), and then nothing was committed.
        """
        if (sink_id is None) != (batch_id is None):
            raise ConfigError("give both sink_id and batch_id to record a sink batch, or neither")
        refs = _refs(transactions)
        sink_batch = None
        if sink_id is not None:
            check_id(sink_id, "sink id")
            if not isinstance(batch_id, int) or batch_id < 0:
                raise ConfigError(f"batch_id={batch_id!r}: give the sink's batch id, 0 or more")
            sink_batch = (sink_id, batch_id)
        elif not refs:
            raise ConfigError("nothing to commit: give transactions, or a sink batch")
        return self._transport.end_transactions(True, refs, sink_batch, self.commit_timeout_ms)

    def rollback(self, transactions) -> tuple:
        """Discard every batch of ``transactions`` (ids or ``PreparedTransaction``s); rolled back
        ones stay so. Raises ``TransactionStateError`` for a committed one (nothing changed)."""
        refs = [PreparedTransaction(r.transaction_id, 0, 0) for r in _refs(transactions)]  # counts: not checked
        if not refs:
            raise ConfigError("nothing to roll back: give transactions")
        return self._transport.end_transactions(False, refs, None, self.commit_timeout_ms).transactions

    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus:
        """Whether the sink's batch was committed (and by which transactions)."""
        check_id(sink_id, "sink id")
        if not isinstance(batch_id, int) or batch_id < 0:
            raise ConfigError(f"batch_id={batch_id!r}: give the sink's batch id, 0 or more")
        return self._transport.sink_batch(sink_id, batch_id)

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        return self.sink_batch(sink_id, batch_id).committed

    def list(self, transaction_ids=None) -> list[TransactionInfo]:
        """The broker's open and committing transactions, or the ones named (state UNKNOWN
        for ids it does not know)."""
        ids = [check_id(i) for i in (transaction_ids or [])]
        return self._transport.list_transactions(ids)

    def sinks(self) -> list[SinkInfo]:
        """Every sink of the broker: its owner, latest batch, batches remembered (an admin's call)."""
        return self._transport.list_sinks()

    def release_sink(self, sink_id: str) -> str | None:
        """Forget who owns a sink, so that the account granted it may commit under it (an admin's
        call; its committed batches stay, so replays are still recognised); the owner it had."""
        return self._transport.release_sink(check_id(sink_id, "sink id"))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Transactions":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _refs(transactions) -> list[PreparedTransaction]:
    """The transactions named, as PreparedTransaction (message count 0: not checked)."""
    if isinstance(transactions, (str, PreparedTransaction)):
        raise ConfigError("give a list of transactions (ids or PreparedTransaction), not a single one")
    return [PreparedTransaction(check_id(item.transaction_id), item.batch_count, item.message_count)
            if isinstance(item, PreparedTransaction) else PreparedTransaction(check_id(item), 0, 0)
            for item in transactions]
