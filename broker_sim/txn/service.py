"""TransactionService: prepared batches, their commit or rollback, sink batches, the timeout.

A batch sent under a transaction id is checked as a plain send is (``MessageStore.build_*``),
then written to the half log (half_log.py): no queue offset moves and no reader sees it. The
state (state.py, RocksDB) records each prepared batch.

Commit of many transactions, with an optional sink batch (sink id, batch id):

1. Checks, all before anything changes: every id is known, none is rolled back, message
   counts the client gives match; a sink batch committed already makes the call a replay.
2. The transactions turn COMMITTING (later prepares under them are refused); half records
   written by an earlier process are checked against their CRCs; the half log is flushed.
3. The decision: the transactions COMMITTING, with the commitlog's end at that moment, and
   the sink batch, in ONE synced RocksDB write. From here on the commit happens.
4. Apply: transaction after transaction, queue by queue, each queue's batches in prepare
   order are appended as ordinary records (an inner batch stays one record), each carrying
   its half log position in PREPARED TX OFFSET and the TRANSACTION_COMMIT flag; a queue's run
   takes the append lock once. Then the commitlog is flushed.
5. The transactions turn COMMITTED; their half records are released.

The sink batch's record is also appended to the commitlog, in the system topic
RMQ_SYS_SINK_BATCHES (as RocketMQ writes its transaction op records to a system topic), after
the batches of step 4 and flushed with them; a decided sink batch is kept pending in the state
until then, and written at the next open if a crash came first. Each open restores from that
topic the sink batches the state does not know: losing the RocksDB (accepted with
--accept-state-loss) loses no committed sink batch the commitlog still holds, so a replayed
batch stays a replay.

After a crash between 3 and 5, opening the service finds COMMITTING transactions, reads the
commitlog from their decision position for records whose PREPARED TX OFFSET names one of their
batches, and applies the others: a commit is completed exactly once, never left half visible.

A commit of a committed transaction changes nothing and says so. A replayed sink batch (its
batch id committed already) makes nothing visible: the call's open transactions are rolled
back instead, in the same step. Transactions without a prepared batch for ``timeout_ms`` are
rolled back by a background sweep (``expire``). Ended transactions are remembered for
``ended_retention_ms``; sink batches for good. With ACLs, transactions belong to the account
that opened them and a sink to the account that first committed under it: no other account
may end, commit or look them up (FORBIDDEN).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Callable

from broker_sim.common.faults import BrokerFault, Reason, refused
from broker_sim.common.service_thread import ServiceThread
from broker_sim.store import (
    DEFAULT_PUT,
    BatchPut,
    DiskFailedError,
    DiskFullError,
    MessageStore,
    PutContext,
    PutResult,
    PutStatus,
    QueueRecords,
    QueueType,
    StateMarks,
    StorePaths,
    echo,
    stamp_problem,
    wall_clock_ms,
)
from broker_sim.txn.half_log import HalfLog, HalfLogError, HalfRecord
from broker_sim.txn.state import BatchRef, SinkRecord, StateStore, Transaction, TxnState, pack_stamp
from rmq_wire import record as fmt
from rmq_wire.types import TRANSACTION_ID_PATTERN, TRANSACTION_ID_RULE

log = logging.getLogger(__name__)

# A run of one queue's committed records is appended in one call up to these sizes, so that
# other writers of the commitlog wait at most that long.
_APPEND_RECORDS = 64
_APPEND_BYTES = 8 << 20
_HALF_HEADROOM_BYTES = 1 << 20  # room in a half segment beside the largest message


@dataclass(frozen=True)
class TransactionConfig:
    """Settings of the transaction service.

    Parameters
    ----------
    timeout_ms : int
        A transaction without a new prepared batch for this long is rolled back (15 minutes).
    check_interval_ms : int
        How often the sweep looks for timed-out transactions and flushes the half log.
    ended_retention_ms : int
        How long ended transactions are remembered (a repeated commit says "already
        committed" within it, "unknown" after). Sink batches are remembered for good.
    half_segment_bytes : int
        Size of a half log segment (at least twice the largest message is used).
    """

    timeout_ms: int = 15 * 60_000
    check_interval_ms: int = 1_000
    ended_retention_ms: int = 7 * 24 * 3_600_000
    half_segment_bytes: int = 64 << 20

    def __post_init__(self):
        for name in ("timeout_ms", "check_interval_ms", "ended_retention_ms", "half_segment_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be positive")


@dataclass(frozen=True)
class Outcome:
    """What an end call did to one transaction."""

    id: str
    state: TxnState
    changed: bool  # False: it was in that state already
    batches: int  # records prepared (an early batch prepares one per message)
    messages: int


@dataclass(frozen=True)
class EndResult:
    outcomes: list
    sink_batch: SinkRecord | None = None  # the sink batch as recorded (now or before)
    replayed: bool = False  # the sink batch was committed before: nothing was made visible


class TransactionService:
    """The transactions of one broker, in the data directory of ``paths`` (its ``txn/``).

    Opening completes commits a crash interrupted. ``now_ms`` is the clock of prepare times
    and the timeout (injected in tests); ``sweep`` False starts no background sweep.
    """

    def __init__(self, store: MessageStore, paths: StorePaths, config: TransactionConfig | None = None, *,
                 now_ms: Callable[[], int] = wall_clock_ms, sweep: bool = True, marks: StateMarks | None = None):
        self.store = store
        self.config = config or TransactionConfig()
        self.now_ms = now_ms
        self.max_sinks_per_owner = 1_000  # ClientLimits.max_sinks_per_account, set by the core
        self._lock = threading.Lock()  # the open transactions
        self._end_lock = threading.Lock()  # one commit, rollback or sweep at a time
        self.state = StateStore(paths.txn_state, marks)
        try:
            unended = self.state.load_unended()
            segment_bytes = max(self.config.half_segment_bytes,
                                2 * store.config.max_message_bytes + _HALF_HEADROOM_BYTES)
            self.half = HalfLog(paths.txn_half, segment_bytes, self.state.next_half_segment(),
                                self.state.set_next_half_segment, store.disk)
            for txn in unended:
                for batch in txn.batches:
                    self.half.retain(batch.position)
            self.half.drop_unused()
            self._open: dict[str, Transaction] = {t.id: t for t in unended}
            self._complete_commits([t for t in unended if t.state is TxnState.COMMITTING])
            self._settle_sinks()
        except BaseException:
            self.state.close()
            raise
        self._sweeper = None
        if sweep:
            self._sweeper = ServiceThread("rmq-txn-sweep", self.config.check_interval_ms / 1000, self._sweep,
                                          task="transaction sweep")
            self._sweeper.start()

    # --- prepare ---------------------------------------------------------------------------

    def prepared(self, transaction_id: str, owner: str | None = None) -> "PreparedPuts":
        """The store's put calls, storing prepared under ``transaction_id`` for ``owner``."""
        check_id(transaction_id, "transaction id")
        return PreparedPuts(self, transaction_id, owner)

    def prepare(self, transaction_id: str, built: "QueueRecords | PutResult",
                producer: tuple[str, int] | None = None, owner: str | None = None) -> PutResult:
        """Store checked records prepared; a failed check is returned as it is. A send stamped
        ``producer=(producer id, sequence)`` is stored once per transaction: a repeat gets the
        first answer (``duplicate`` set), also after a restart.

        ``owner``, with ACLs, is the caller's access key: a transaction belongs to the account
        that opened it, and no other may add to it, commit it or roll it back (None: no ACLs,
        nothing checked)."""
        if isinstance(built, PutResult):
            return built
        if producer is not None and stamp_problem(*producer):
            return PutResult(PutStatus.MESSAGE_ILLEGAL, stamp_problem(*producer))
        txn = self._find(transaction_id)
        self._check_open(txn, transaction_id)  # early: before writing anything
        _check_owner([txn] if txn is not None else [], owner)
        if txn is not None and producer in txn.stamps:
            return _duplicate(txn.stamps[producer])
        written = self._write_half(transaction_id, built)
        if isinstance(written, PutResult):
            return written
        now = self.now_ms()
        with self._lock:
            txn = self._open.get(transaction_id)
            first = txn is None
            try:
                if first:
                    self._check_open(self.state.get(transaction_id), transaction_id)
                    txn = self._open[transaction_id] = Transaction(transaction_id, TxnState.OPEN, now, now,
                                                                   owner=owner or "")
                else:
                    self._check_open(txn, transaction_id)
                    _check_owner([txn], owner)
            except BrokerFault:  # refused: nothing changed
                self.half.release([position for position, _ in written])
                raise
            if producer in txn.stamps:  # a repeat that ran alongside the first send
                self.half.release([position for position, _ in written])
                return _duplicate(txn.stamps[producer])
            stamp = b""
            if producer is not None:
                txn.stamps[producer] = (built.queue_id, built.count)
                stamp = pack_stamp(producer, built.queue_id, built.count)
            for (position, size), record in zip(written, built.records):
                batch = BatchRef(position, size, record.count, now)
                txn.add(batch)
                self.state.add_batch(txn, batch, first, stamp)
                first, stamp = False, b""
        return PutResult(PutStatus.PUT_OK, "", built.queue_id, -1, built.count, (), now)

    def _write_half(self, transaction_id: str, built: "QueueRecords") -> "list[tuple[int, int]] | PutResult":
        """Append the records to the half log: their (position, size), or the refusal when the
        disk is full or failed (none of them is kept then)."""
        written = []
        try:
            for record in built.records:
                written.append(self.half.append(transaction_id, built.config.name, built.queue_id, record))
            return written
        except (DiskFullError, DiskFailedError, OSError) as err:
            self.half.release([position for position, _ in written])
            if isinstance(err, DiskFullError):
                return PutResult(PutStatus.DISK_FULL, err.message)
            if not isinstance(err, DiskFailedError):
                err = self.store.disk.fail("a write to the transaction half log", err)
            return PutResult(PutStatus.DISK_FAILED, str(err))

    def _check_open(self, txn: Transaction | None, transaction_id: str) -> None:
        if txn is None or txn.state is TxnState.OPEN:
            return
        raise refused(Reason.TRANSACTION_ENDED, f"transaction {transaction_id!r} {_ended(txn)}; no batch can be "
                                                "added to it: send under a new transaction id")

    # --- commit and rollback -------------------------------------------------------------

    def commit(self, transactions: list[tuple[str, int]], sink: tuple[str, int] | None = None,
               owner: str | None = None, sink_named: bool = False) -> EndResult:
        """Commit ``(transaction id, messages expected or 0)`` in this order, and record the
        sink batch ``(sink id, batch id)`` in the same step; all ``owner``'s (see ``prepare``).
        ``sink_named``: the ACL file grants ``owner`` the sink by name, whoever owns it."""
        ids = self._check_ids([t for t, _ in transactions])
        if sink is not None:
            check_id(sink[0], "sink id")
            if not isinstance(sink[1], int) or sink[1] < 0:
                raise refused(Reason.INVALID_ARGUMENT, f"batch id {sink[1]!r}: give the sink's batch id, 0 or more")
        elif not ids:
            raise refused(Reason.INVALID_ARGUMENT, "the commit names no transaction and no sink batch: name the "
                                                   "transactions to commit")
        with self._end_lock:
            with self._lock:
                txns = self._known(ids)
                _check_owner(txns, owner)
                if sink is not None and not sink_named:
                    self._check_sink_owner(sink[0], owner)
                if sink is not None:
                    self._check_sink_quota(sink[0], owner)
                recorded = self.state.sink_record(*sink) if sink is not None else None
                if recorded is not None:
                    return self._replay(txns, recorded)
                self._check_committable(txns, dict(transactions))
                to_commit = [t for t in txns if t.state is TxnState.OPEN]
                for txn in to_commit:
                    txn.state = TxnState.COMMITTING
            try:
                self._check_half_records(to_commit)
                self.half.flush()
            except BaseException:
                with self._lock:
                    for txn in to_commit:
                        txn.state = TxnState.OPEN
                raise
            position = self.store.log_positions().max_offset
            for rank, txn in enumerate(to_commit):
                txn.decision_position, txn.decision_rank = position, rank
            record = None if sink is None else SinkRecord(sink[0], sink[1], tuple(ids), self.now_ms(), owner or "")
            self.state.decide_commit(to_commit, record)
            self._apply(to_commit, applied=set(), sink=record)
            outcomes = [Outcome(t.id, TxnState.COMMITTED, t in to_commit, t.batch_count, t.message_count) for t in txns]
            return EndResult(outcomes, record)

    def rollback(self, transaction_ids: list[str], owner: str | None = None) -> EndResult:
        """Roll back open transactions, all ``owner``'s (see ``prepare``); rolled back ones stay
        so; committed ones refuse."""
        ids = self._check_ids(transaction_ids)
        if not ids:
            raise refused(Reason.INVALID_ARGUMENT, "the rollback names no transaction: name the transactions")
        with self._end_lock:
            with self._lock:
                txns = self._known(ids)
                _check_owner(txns, owner)
                for txn in txns:
                    if txn.state in (TxnState.COMMITTED, TxnState.COMMITTING):
                        raise refused(Reason.TRANSACTION_ENDED, f"transaction {txn.id!r} {_ended(txn)}; it cannot be "
                                                                "rolled back")
                rolled = self._roll_back([t for t in txns if t.state is TxnState.OPEN], expired=False)
            return EndResult([Outcome(t.id, TxnState.ROLLED_BACK, t in rolled, t.batch_count, t.message_count)
                              for t in txns])

    def expire(self, now_ms: int | None = None) -> list[str]:
        """Roll back the open transactions whose last batch was prepared ``timeout_ms`` ago or
        more, and forget ended ones past retention; returns the ids rolled back."""
        now = self.now_ms() if now_ms is None else now_ms
        with self._end_lock:
            with self._lock:
                expired = [t for t in self._open.values()
                           if t.state is TxnState.OPEN and t.last_ms + self.config.timeout_ms <= now]
                self._roll_back(expired, expired=True)
            self.state.forget_ended_before(now - self.config.ended_retention_ms)
        for txn in expired:
            log.info("transaction %r rolled back: no batch prepared for %d ms (its %d messages are discarded)",
                     txn.id, now - txn.last_ms, txn.message_count,
                     extra={"transaction": txn.id, "account": txn.owner or None, "messages": txn.message_count})
        return [t.id for t in expired]

    # --- queries ---------------------------------------------------------------------------

    def sink_batch(self, sink_id: str, batch_id: int, owner: str | None = None) -> tuple[SinkRecord | None, int]:
        """The sink batch's record (None: not committed) and the sink's highest committed
        batch id (-1: none); with ``owner`` (ACLs), only of a sink of that account's."""
        check_id(sink_id, "sink id")
        if not isinstance(batch_id, int) or batch_id < 0:
            raise refused(Reason.INVALID_ARGUMENT, f"batch id {batch_id!r}: give the sink's batch id, 0 or more")
        self._check_sink_owner(sink_id, owner)
        return self.state.sink_record(sink_id, batch_id), self.state.latest_sink_batch(sink_id)

    def _check_sink_quota(self, sink_id: str, owner: str | None) -> None:
        """LIMIT_EXCEEDED when ``owner`` would own more sinks than ``max_sinks_per_owner``."""
        if not owner or self.state.sink_owner(sink_id):
            return
        owned = self.state.sinks_owned(owner)
        if owned >= self.max_sinks_per_owner:
            raise refused(Reason.LIMIT_EXCEEDED, f"account {owner!r} owns {owned} sinks, the broker's limit "
                                                 "(--max-sinks-per-account): reuse a sink id of yours, or ask an "
                                                 "admin to release old ones (rmq-admin sink release) or raise it")

    def sinks(self) -> list[tuple[str, str, int, int, int]]:
        """Every sink: (sink id, owner, latest batch id, batches kept, when its latest was committed)."""
        with self._lock:
            return self.state.sinks()

    def release_sink(self, sink_id: str) -> str | None:
        """Forget who owns the sink (its batches stay); the owner it had, None if none."""
        check_id(sink_id, "sink id")
        with self._lock:
            return self.state.release_sink(sink_id)

    def _check_sink_owner(self, sink_id: str, owner: str | None) -> None:
        """FORBIDDEN unless the sink is ``owner``'s: a sink belongs to the account that first
        committed a batch under it (None: no ACLs, anyone's). A sink committed only without
        ACLs so far is taken by the first account that commits under it."""
        if owner is None:
            return
        recorded = self.state.sink_owner(sink_id)
        if recorded and recorded != owner:
            raise refused(Reason.PERMISSION_DENIED, f"sink {sink_id!r} belongs to another account: only the "
                                                    "account that first committed a batch under it may commit "
                                                    "its batches or look them up; use a sink id of your own")

    def transactions(self, ids: list[str] | None = None, owner: str | None = None) -> list[Transaction | None]:
        """The open and committing transactions, or those named (None for an unknown one); with
        ``owner``, only its own (another account's shows as unknown)."""
        if not ids:
            with self._lock:
                found = sorted(self._open.values(), key=lambda t: (t.created_ms, t.id))
            return [t for t in found if owner is None or t.owner == owner]
        found = [self._find(check_id(i, "transaction id")) for i in ids]
        return [t if t is None or owner is None or t.owner == owner else None for t in found]

    def first_prepared(self, transaction_id: str) -> HalfRecord | None:
        """A copy of the first record prepared under an open transaction (RocketMQ's check of a
        half message shows it to its producer), or None when the transaction is not open."""
        with self._lock:
            txn = self._open.get(transaction_id)
            if txn is None or txn.state is not TxnState.OPEN or not txn.batches:
                return None
            first = txn.batches[0]
            half = self.half.read(first.position, first.size)
            return dataclasses.replace(half, record=dataclasses.replace(half.record, body=bytes(half.record.body)))

    def expires_ms(self, txn: Transaction) -> int:
        return txn.last_ms + self.config.timeout_ms if txn.state is TxnState.OPEN else 0

    # --- internals -------------------------------------------------------------------------

    def _find(self, txn_id: str) -> Transaction | None:
        with self._lock:
            txn = self._open.get(txn_id)
        return txn if txn is not None else self.state.get(txn_id)

    def _known(self, ids: list[str]) -> list[Transaction]:
        txns = [self._open.get(i) or self.state.get(i) for i in ids]
        unknown = [i for i, t in zip(ids, txns) if t is None]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            raise refused(Reason.TRANSACTION_NOT_FOUND, f"unknown transaction id {shown}: no batch was prepared under "
                                                        "it, or it ended longer ago than the broker remembers")
        return txns

    def _check_ids(self, ids: list[str]) -> list[str]:
        for i in ids:
            check_id(i, "transaction id")
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise refused(Reason.INVALID_ARGUMENT, f"transaction id {repeated[0]!r} is named twice: name each once")
        return list(ids)

    def _check_committable(self, txns: list[Transaction], expected: dict) -> None:
        for txn in txns:
            if txn.state in (TxnState.ROLLED_BACK, TxnState.COMMITTING):
                raise refused(Reason.TRANSACTION_ENDED, f"transaction {txn.id!r} {_ended(txn)}; it cannot be committed "
                                                        "(nothing of this commit was done)")
            want = expected.get(txn.id) or 0
            if want and want != txn.message_count:
                raise refused(Reason.TRANSACTION_INCOMPLETE, (
                    f"transaction {txn.id!r} holds {txn.message_count} prepared messages where the client sent {want}: "
                    "some batches were lost or added (a broker crash?); roll it back and write again "
                    "(nothing of this commit was done)"))

    def _check_half_records(self, txns: list[Transaction]) -> None:
        """Half records from before this process may be torn by an OS crash: read them back."""
        for txn in txns:
            for index, batch in enumerate(txn.batches):
                if batch.position < self.half.written_before:
                    try:
                        self.half.read(batch.position, batch.size)
                    except HalfLogError as err:
                        raise refused(Reason.TRANSACTION_INCOMPLETE, (
                            f"batch {index} of transaction {txn.id!r} was damaged on disk ({err}), likely by a "
                            "machine crash before it was flushed; roll the transaction back and write again "
                            "(nothing of this commit was done)")) from None

    def _replay(self, txns: list[Transaction], recorded: SinkRecord) -> EndResult:
        """The sink batch is committed already: nothing more becomes visible."""
        rolled = self._roll_back([t for t in txns if t.state is TxnState.OPEN], expired=False)
        outcomes = [Outcome(t.id, t.state, t in rolled, t.batch_count, t.message_count) for t in txns]
        return EndResult(outcomes, recorded, replayed=True)

    def _roll_back(self, txns: list[Transaction], expired: bool) -> list[Transaction]:
        """Call with both locks held."""
        if not txns:
            return []
        now = self.now_ms()
        for txn in txns:
            txn.state, txn.ended_ms, txn.expired = TxnState.ROLLED_BACK, now, expired
        self.state.end(txns, sync=True)
        for txn in txns:
            del self._open[txn.id]
        self.half.release([b.position for t in txns for b in t.batches])
        return txns

    def _apply(self, txns: list[Transaction], applied: set, sink: SinkRecord | None = None) -> None:
        """Append the batches of decided transactions, skipping those in ``applied``, then the
        sink batch's record, all flushed at once. Each transaction's batches are appended queue
        by queue, in prepare order within a queue (the only order readers see), so that a
        queue's run takes the append lock once."""
        for txn in txns:
            runs: dict[tuple[str, int], list] = {}
            for batch in txn.batches:
                if batch.position not in applied:
                    try:
                        half = self.half.read(batch.position, batch.size)
                    except HalfLogError as err:  # only after a crash (checked before the decision)
                        log.error("batch of transaction %r cannot be committed and is lost: %s", txn.id, err,
                                  extra={"transaction": txn.id, "account": txn.owner or None})
                        continue
                    runs.setdefault((half.topic, half.queue_id), []).append(dataclasses.replace(
                        half.record, sys_flag=half.record.sys_flag | fmt.SysFlag.TRANSACTION_COMMIT,
                        prepared_transaction_offset=batch.position))
            for key, records in runs.items():
                start, size = 0, 0
                for end, record in enumerate(records, 1):
                    size += len(record.body)
                    if end - start >= _APPEND_RECORDS or size >= _APPEND_BYTES or end == len(records):
                        self._append_run(key, records[start:end])
                        start, size = end, 0
        if sink is not None and not self._append_sink(sink):
            sink = None  # still pending: appended at the next open
        self.store.flush_log()  # what the end below says is visible is on disk first
        now = self.now_ms()
        with self._lock:
            for txn in txns:
                txn.state, txn.ended_ms = TxnState.COMMITTED, now
                self._open.pop(txn.id, None)
        self.state.end(txns, sync=False, sink=sink)
        self.half.release([b.position for t in txns for b in t.batches])

    def _append_run(self, key: tuple[str, int], records: list) -> None:
        result = self.store.put_records(key[0], key[1], records, flush=False)  # flushed once, at the end
        if result.ok:
            return
        if result.status is PutStatus.SERVICE_NOT_AVAILABLE:  # stopping: the next open completes the commit
            raise RuntimeError("the store closed during a commit; it is completed when the broker opens again")
        # The topic was deleted (or re-created otherwise) after the batches were prepared.
        log.warning("committed batches of %d records for topic %r queue %d were dropped: %s", len(records), key[0],
                    key[1], result.detail, extra={"topic": key[0], "queue": key[1], "records": len(records)})

    def _append_sink(self, sink: SinkRecord) -> bool:
        """Append the sink batch's record to the sink topic (made on first use); False if the
        store refused it (logged)."""
        if self.store.find_topic(fmt.SINK_TOPIC) is None:
            self.store.create_topic(fmt.SINK_TOPIC, 1, QueueType.SIMPLE_CQ)
        built = self.store.build_message(fmt.SINK_TOPIC, 0, sink.encode())
        result = built if isinstance(built, PutResult) else self.store.put_records(
            fmt.SINK_TOPIC, 0, built.records, flush=False)  # flushed with the commit's batches
        if not result.ok:
            log.error("sink %r batch %d is committed but its record could not be written to the commitlog (%s); "
                      "it is written at the next start", sink.sink_id, sink.batch_id, result.detail,
                      extra={"sink": sink.sink_id, "batch": sink.batch_id})
        return result.ok

    def _settle_sinks(self) -> None:
        """At open: write the sink records a crash kept from the commitlog, then restore into
        the state the sink batches of the commitlog it does not know (it was lost or cut)."""
        pending = self.state.pending_sinks()
        for sink in pending:
            if self._append_sink(sink):
                self.store.flush_log()
                self.state.end([], sync=True, sink=sink)
        if self.store.find_topic(fmt.SINK_TOPIC) is None:
            return
        self.store.wait_dispatched(60.0)
        offset = max(self.state.sink_log_offset(), self.store.min_offset(fmt.SINK_TOPIC, 0))
        end = self.store.max_offset(fmt.SINK_TOPIC, 0)
        restored = 0
        while offset < end:
            result = self.store.get_messages(fmt.SINK_TOPIC, 0, offset, end)
            if not result.batches:
                break
            for batch in result.batches:
                restored += self.state.restore_sink(SinkRecord.decode(bytes(fmt.decode_record(batch.data).body)))
            offset = result.next_begin_offset
        if offset != self.state.sink_log_offset():
            self.state.set_sink_log_offset(offset)
        if restored:
            log.warning("restored %d committed sink batches from the commitlog's %s: the transaction state had "
                        "lost them", restored, fmt.SINK_TOPIC)

    def _complete_commits(self, txns: list[Transaction]) -> None:
        """Finish commits a crash interrupted: apply the batches not in the commitlog yet."""
        if not txns:
            return
        txns.sort(key=lambda t: (t.decision_position, t.decision_rank))
        wanted = {b.position for t in txns for b in t.batches}
        start = min(txns[0].decision_position, self.store.log_positions().max_offset)
        applied = set()
        for _position, header in self.store.record_headers(start):
            sys_flag, prepared = header[7], header[13]
            if sys_flag & fmt.SysFlag.TRANSACTION_COMMIT and prepared in wanted:
                applied.add(prepared)
        log.warning("completing the commit of %d transactions interrupted by a crash: %d of %d batches were "
                    "appended before it", len(txns), len(applied), len(wanted))
        self._apply(txns, applied)

    def _sweep(self) -> None:
        self.expire()
        self.half.flush()
        self.half.drop_unused()

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
            self._sweeper = None
        with self._end_lock:
            try:
                self.half.flush()
                self.half.drop_unused()
            except DiskFailedError as err:  # the half records are checked against their CRCs at the next start
                log.error("the transaction half log closes without a flush: %s", err)
            finally:
                self.half.close()
                self.state.close()


class PreparedPuts:
    """``put_message``, ``put_early_batch`` and ``put_inner_batch`` as the store has them,
    storing the records prepared under one transaction."""

    def __init__(self, service: TransactionService, transaction_id: str, owner: str | None = None):
        self._service = service
        self._id = transaction_id
        self._owner = owner

    def put_message(self, topic, queue_id, body, *, context: PutContext = DEFAULT_PUT, **options) -> PutResult:
        built = self._service.store.build_message(topic, queue_id, body, context=context, **options)
        return self._service.prepare(self._id, built, context.producer, self._owner)

    def put_early_batch(self, topic, queue_id, payload, *, context: PutContext = DEFAULT_PUT) -> PutResult:
        built = self._service.store.build_early_batch(topic, queue_id, payload, context=context)
        return self._service.prepare(self._id, built, context.producer, self._owner)

    def put_inner_batch(self, topic, queue_id, batch: BatchPut, *, context: PutContext = DEFAULT_PUT) -> PutResult:
        built = self._service.store.build_inner_batch(topic, queue_id, batch, context=context)
        return self._service.prepare(self._id, built, context.producer, self._owner)


def _check_owner(txns: list[Transaction], owner: str | None) -> None:
    """FORBIDDEN unless every transaction is ``owner``'s (None: no ACLs, anyone's)."""
    if owner is None:
        return
    for txn in txns:
        if txn.owner != owner:
            raise refused(Reason.PERMISSION_DENIED, f"transaction {txn.id!r} belongs to another account: only "
                                                    "the account that opened it may send under it, commit it or "
                                                    "roll it back")


def check_id(value: str, what: str) -> str:
    if not isinstance(value, str) or not TRANSACTION_ID_PATTERN.match(value):
        shown = echo(value) if isinstance(value, str) else type(value).__name__
        raise refused(Reason.INVALID_ARGUMENT, f"{what} {shown} is malformed: use {TRANSACTION_ID_RULE}")
    return value


def _duplicate(send: tuple[int, int]) -> PutResult:
    queue_id, messages = send
    return PutResult(PutStatus.PUT_OK, "", queue_id, -1, messages, (), 0, duplicate=True)


def _ended(txn: Transaction) -> str:
    if txn.state is TxnState.COMMITTED:
        return "is committed"
    if txn.state is TxnState.COMMITTING:
        return "is being committed"
    if txn.expired:
        return "was rolled back by the timeout (no batch prepared for the transaction timeout)"
    return "was rolled back"
