"""Transactions for exactly-once writers.

A writer sends its batches prepared under a transaction id of its own: stored by the broker,
invisible to every reader until committed. A committer then commits (or rolls back) many
transactions in one call, and may record a sink batch (sink id, batch id) in the same atomic
step; asking for that sink batch later tells a replay that it was committed already.

    # a writer task attempt (an id unique to the attempt)
    with TransactionalSender(endpoint, new_transaction_id("orders-sink")) as sender:
        sender.send_table("orders", 3, arrow_table)     # one inner batch, prepared
        prepared = sender.prepared()                    # PreparedTransaction, to the committer

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

import itertools
import re
import threading
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from ..codec import Codec, Compression, encode_batch, encode_messages
from ..errors import ConfigError, TopicNotFoundError
from ..producer.routing import Router
from ..producer.sender import PB_CODECS, PB_COMPRESSIONS
from ..protocol.v1 import broker_pb2 as pb
from ..protocol.v1 import txn_pb2, txn_pb2_grpc
from ..structs import (
    CommitResult,
    Message,
    PreparedTransaction,
    QueueType,
    SinkBatchStatus,
    TransactionInfo,
    TransactionOutcome,
    TransactionState,
)
from .transport import Transport, TransportConfig

# The broker's rule for transaction and sink ids (broker_sim/txn/service.py).
ID_PATTERN = re.compile(r"^[A-Za-z0-9._:@+=-]{1,255}$")
ID_RULE = "1 to 255 letters, digits or . _ : @ + = -"
_UUID_CHARS = 33  # "." and 32 hex digits
DEFAULT_COMMIT_TIMEOUT_MS = 120_000

_STATES = {txn_pb2.TXN_OPEN: TransactionState.OPEN, txn_pb2.TXN_COMMITTING: TransactionState.COMMITTING,
           txn_pb2.TXN_COMMITTED: TransactionState.COMMITTED, txn_pb2.TXN_ROLLED_BACK: TransactionState.ROLLED_BACK,
           txn_pb2.TRANSACTION_STATE_UNSPECIFIED: TransactionState.UNKNOWN}


def check_id(value, what: str = "transaction id") -> str:
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise ConfigError(f"{what} {value!r:.80} is malformed: use {ID_RULE}")
    return value


def new_transaction_id(prefix: str = "txn") -> str:
    """A fresh transaction id: ``prefix`` (what wrote it, for people reading the broker's
    transaction list) and a random UUID."""
    check_id(prefix, "transaction id prefix")
    if len(prefix) + _UUID_CHARS > 255:
        raise ConfigError(f"transaction id prefix {prefix[:40]!r}... is {len(prefix)} characters: use at most "
                          f"{255 - _UUID_CHARS}")
    return f"{prefix}.{uuid.uuid4().hex}"


class TransactionalSender:
    """Sends batches prepared under one transaction; safe to share between threads.

    Each send is one Send call, answered once the broker stored the batch prepared. Sends are
    stamped with a producer id and a sequence, as the producer's, so the broker stores each
    once in the transaction and a retry after a lost answer is safe: retriable failures are
    retried (``transport.retries``). A queue's batches become visible in the order the broker
    received them: send one queue's batches one after another.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    transaction_id : str, optional
        The transaction to prepare under, unique to this writer (attempt); default: a new
        one from ``new_transaction_id()``.
    codec : {"rmq", "arrow"}
        Encoding of batches sent to BatchCQ topics (default "rmq").
    compression : {"none", "lz4", "zstd"}
        Compression of those batches (default "none").
    transport : TransportConfig, optional
        Deadlines and retries of the calls.
    """

    def __init__(self, endpoint: str, transaction_id: str | None = None, *, codec: str = "rmq",
                 compression: str = "none", transport: TransportConfig | None = None):
        self.transaction_id = check_id(transaction_id) if transaction_id is not None else new_transaction_id()
        try:
            self.codec, self.compression = Codec.parse(codec), Compression.parse(compression)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self._transport = Transport(endpoint, transport)
        self._router = Router(self._transport)
        self._producer_id = uuid.uuid4().hex
        self._sequences = itertools.count()
        self._lock = threading.Lock()
        self._batches = 0
        self._messages = 0

    def send_messages(self, topic: str, queue_id: int, messages: list[Message]) -> int:
        """Prepare messages of one queue as one batch (an inner batch on a BatchCQ topic, an
        early batch on a SimpleCQ topic); returns how many were stored."""
        if not messages:
            raise ConfigError("no messages to send: give at least one")
        rows = [(m.body, m.properties, m.keys, m.tags, None) for m in messages]
        if self._router.topic(topic).queue_type is QueueType.BATCH_CQ:
            tags = {m.tags for m in messages}
            payload = encode_messages(rows, self.codec, self.compression)
            return self.send_payload(topic, queue_id, payload, len(rows),
                                     tags=next(iter(tags)) if len(tags) == 1 else None)
        return self._send(pb.SendRequest(topic=topic, queue_id=queue_id, early_batch=pb.EarlyBatch(
            payload=encode_messages(rows, Codec.RMQ, Compression.NONE), count=len(rows))))

    def send_table(self, topic: str, queue_id: int, table: "pa.Table | pa.RecordBatch") -> int:
        """Prepare Arrow columns (``body``; optional ``keys``, ``tags``, ``properties``,
        ``born_timestamp``) as one batch of the queue; returns how many messages were stored.
        The batch's tag is set when every row has the same one."""
        if table.num_rows == 0:
            raise ConfigError("the table has no rows: give at least one")
        if self._router.topic(topic).queue_type is QueueType.BATCH_CQ:
            payload = _encode(table, self.codec, self.compression)
            return self.send_payload(topic, queue_id, payload, table.num_rows, tags=_single_tag(table))
        return self._send(pb.SendRequest(topic=topic, queue_id=queue_id, early_batch=pb.EarlyBatch(
            payload=_encode(table, Codec.RMQ, Compression.NONE), count=table.num_rows)))

    def send_payload(self, topic: str, queue_id: int, payload: bytes, count: int, *, codec: str | None = None,
                     compression: str | None = None, tags: str | None = None) -> int:
        """Prepare an inner batch encoded already (``rmq_spark.codec.encode_batch``) on a
        BatchCQ topic: ``count`` messages, ``codec`` and ``compression`` default to the
        sender's."""
        codec = self.codec if codec is None else Codec.parse(codec)
        compression = self.compression if compression is None else Compression.parse(compression)
        return self._send(pb.SendRequest(topic=topic, queue_id=queue_id, inner_batch=pb.InnerBatch(
            payload=payload, count=count, codec=PB_CODECS[codec], compression=PB_COMPRESSIONS[compression],
            tags=tags or "")))

    def prepared(self) -> PreparedTransaction:
        """What was prepared so far, to hand to the committer."""
        with self._lock:
            return PreparedTransaction(self.transaction_id, self._batches, self._messages)

    def _send(self, request: pb.SendRequest) -> int:
        request.transaction_id = self.transaction_id
        request.producer_id = self._producer_id
        with self._lock:
            request.sequence = next(self._sequences)
        try:  # stamped: a retry is stored once
            response = self._transport.call(self._transport.messaging.Send, request)
        except TopicNotFoundError:
            self._router.forget(request.topic)
            raise
        with self._lock:
            self._batches += 1
            self._messages += response.count
        return response.count

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "TransactionalSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Transactions:
    """Ends transactions and answers whether a sink batch was committed.

    Parameters
    ----------
    endpoint : str
        ``HOST:PORT`` of the broker.
    transport : TransportConfig, optional
        Deadlines and retries of the calls (all of them are safe to repeat).
    commit_timeout_ms : int
        Deadline of a commit or rollback, which copies every prepared batch (120 s).
    """

    def __init__(self, endpoint: str, transport: TransportConfig | None = None, *,
                 commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS):
        if not isinstance(commit_timeout_ms, int) or commit_timeout_ms <= 0:
            raise ConfigError(f"commit_timeout_ms={commit_timeout_ms!r}: must be a positive number of milliseconds")
        self._transport = Transport(endpoint, transport)
        self._stub = txn_pb2_grpc.TransactionsStub(self._transport.channel)
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
        request = txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT, transactions=_refs(transactions))
        if sink_id is not None:
            check_id(sink_id, "sink id")
            if not isinstance(batch_id, int) or batch_id < 0:
                raise ConfigError(f"batch_id={batch_id!r}: give the sink's batch id, 0 or more")
            request.sink_batch.CopyFrom(txn_pb2.SinkBatch(sink_id=sink_id, batch_id=batch_id))
        elif not request.transactions:
            raise ConfigError("nothing to commit: give transactions, or a sink batch")
        response = self._transport.call(self._stub.EndTransaction, request, timeout_ms=self.commit_timeout_ms)
        return CommitResult(_outcomes(response), response.sink_batch_replayed,
                            tuple(response.sink_batch_transaction_ids))

    def rollback(self, transactions) -> tuple:
        """Discard every batch of ``transactions`` (ids or ``PreparedTransaction``s); rolled back
        ones stay so. Raises ``TransactionStateError`` for a committed one (nothing changed)."""
        refs = [txn_pb2.TransactionRef(id=r.id) for r in _refs(transactions)]
        if not refs:
            raise ConfigError("nothing to roll back: give transactions")
        request = txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_ROLLBACK, transactions=refs)
        return _outcomes(self._transport.call(self._stub.EndTransaction, request, timeout_ms=self.commit_timeout_ms))

    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus:
        """Whether the sink's batch was committed (and by which transactions)."""
        check_id(sink_id, "sink id")
        if not isinstance(batch_id, int) or batch_id < 0:
            raise ConfigError(f"batch_id={batch_id!r}: give the sink's batch id, 0 or more")
        r = self._transport.call(self._stub.GetSinkBatch, txn_pb2.GetSinkBatchRequest(sink_id=sink_id,
                                                                                      batch_id=batch_id))
        return SinkBatchStatus(sink_id, batch_id, r.committed, tuple(r.transaction_ids), r.committed_ms,
                               r.latest_batch_id)

    def is_committed(self, sink_id: str, batch_id: int) -> bool:
        return self.sink_batch(sink_id, batch_id).committed

    def list(self, transaction_ids=None) -> list[TransactionInfo]:
        """The broker's open and committing transactions, or the ones named (state UNKNOWN
        for ids it does not know)."""
        ids = [check_id(i) for i in (transaction_ids or [])]
        response = self._transport.call(self._stub.ListTransactions, txn_pb2.ListTransactionsRequest(ids=ids))
        return [TransactionInfo(t.id, _STATES[t.state], t.batch_count, t.message_count, t.created_ms,
                                t.last_prepared_ms, t.expires_ms, t.ended_ms, t.expired)
                for t in response.transactions]

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Transactions":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _refs(transactions) -> list:
    if isinstance(transactions, (str, PreparedTransaction)):
        raise ConfigError("give a list of transactions (ids or PreparedTransaction), not a single one")
    refs = []
    for item in transactions:
        if isinstance(item, PreparedTransaction):
            refs.append(txn_pb2.TransactionRef(id=check_id(item.transaction_id), message_count=item.message_count))
        else:
            refs.append(txn_pb2.TransactionRef(id=check_id(item)))
    return refs


def _outcomes(response) -> tuple:
    return tuple(TransactionOutcome(t.id, _STATES[t.state], t.changed, t.batch_count, t.message_count)
                 for t in response.transactions)


def _encode(table, codec: Codec, compression: Compression) -> bytes:
    try:
        return encode_batch(table, codec, compression)
    except ValueError as err:
        raise ConfigError(f"the table cannot be sent: {err}") from None


def _single_tag(table) -> str | None:
    if "tags" not in table.schema.names:
        return None
    tags = pc.unique(table.column("tags"))
    return tags[0].as_py() if len(tags) == 1 else None
