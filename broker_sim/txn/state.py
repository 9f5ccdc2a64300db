"""Transaction state in RocksDB (through rocksdict): what RocketMQ keeps in its op topic.

Keys (bytes; transaction and sink ids never hold a NUL)::

    T{txn id}                           the transaction: state, times, counts, commit decision, then
                                        its owner (the access key that opened it; none without ACLs)
    O{txn id}                           present while the transaction is open or committing
    B{txn id}\\0{8-byte seq}             a prepared batch: half log position, size, messages, time,
                                        and the producer stamp of the send it began, if any
    S{sink id}\\0{8-byte batch id}       a committed sink batch: its transaction ids, time and owner
    K{sink id}                          the sink's owner: the access key that first committed under it
                                        ("" while only calls without ACLs did)
    E{8-byte ended ms}{txn id}          ended transactions by time, for the retention sweep
    H                                   the next half log segment index (positions are never reused)
    P{sink id}\\0{8-byte batch id}       a sink batch decided, not yet in the commitlog's sink topic
    L                                   the sink topic's offset read up to at the last open

A commit decision (transactions COMMITTING and the sink batch) is one synced write batch; the
end of a transaction (state, deleting its batches and its O key) is another.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import Options, WriteBatch, WriteOptions

from broker_sim.store import StateMarks, close_checked, open_checked

# state, created / last prepared / ended ms, decision position and rank, batches, messages, expired
_TXN = struct.Struct(">Bqqqqiiq?")
_BATCH = struct.Struct(">qiiq")  # half position, size, messages, prepared ms
_STAMP = struct.Struct(">qii")  # sequence, queue id, messages of the send; then the producer id
_SEQ = struct.Struct(">Q")
_BATCH_ID = struct.Struct(">q")
_NEXT_SEGMENT_KEY = b"H"
# What a start without the transaction state means (rocks.py's sentences).
LOSS = ("that prepared transactions are forgotten (their commits fail, their rows are never visible) and that a "
        "commit interrupted by a crash stays half done")


class TxnState(enum.IntEnum):
    OPEN = 1  # batches may be added; nothing visible
    COMMITTING = 2  # decided: its batches are being made visible (completed by recovery after a crash)
    COMMITTED = 3
    ROLLED_BACK = 4


@dataclass
class BatchRef:
    position: int  # in the half log
    size: int
    messages: int
    prepared_ms: int


@dataclass
class Transaction:
    id: str
    state: TxnState
    created_ms: int
    last_ms: int  # when its last batch was prepared
    ended_ms: int = 0
    decision_position: int = -1  # commitlog end when the commit was decided
    decision_rank: int = 0  # its place in the commit call
    batch_count: int = 0
    message_count: int = 0
    expired: bool = False  # rolled back by the timeout
    batches: list = field(default_factory=list)  # BatchRef, in prepare order (open transactions only)
    stamps: dict = field(default_factory=dict)  # (producer id, sequence) -> (queue id, messages) of its send
    owner: str = ""  # the access key that opened it (ACLs); only it may add to, commit or roll back it

    def add(self, batch: BatchRef) -> None:
        self.batches.append(batch)
        self.batch_count += 1
        self.message_count += batch.messages
        self.last_ms = max(self.last_ms, batch.prepared_ms)


@dataclass(frozen=True)
class SinkRecord:
    sink_id: str
    batch_id: int
    transaction_ids: tuple
    committed_ms: int
    owner: str = ""  # the access key that committed it ("" without ACLs)

    def encode(self) -> bytes:
        """The body of its record in the commitlog's sink topic."""
        return json.dumps({"sink": self.sink_id, "batch": self.batch_id, "transactions": list(self.transaction_ids),
                           "committed_ms": self.committed_ms, "owner": self.owner}).encode()

    @classmethod
    def decode(cls, body: bytes) -> "SinkRecord":
        data = json.loads(body)
        return cls(data["sink"], data["batch"], tuple(data["transactions"]), data["committed_ms"], data["owner"])


class StateStore:
    """The RocksDB database in ``directory``; with ``marks``, a database lost or cut since the
    broker left it is refused at open (rocks.py)."""

    def __init__(self, directory: Path, marks: StateMarks | None = None):
        self.directory = directory
        self._marks = marks
        self.db = open_checked(directory, "transaction state", LOSS, marks, Options(raw_mode=True))
        self._synced = WriteOptions()
        self._synced.sync = True
        self._unsynced = WriteOptions()

    # --- transactions ----------------------------------------------------------------------

    def load_unended(self) -> list[Transaction]:
        """Open and committing transactions, with their batches."""
        out = []
        for key, _ in self._prefixed(b"O"):
            txn = self.get(key[1:].decode())
            if txn is None:
                continue
            txn.batch_count = txn.message_count = 0
            for _, value in self._prefixed(b"B" + key[1:] + b"\0"):
                txn.add(BatchRef(*_BATCH.unpack_from(value)))
                if len(value) > _BATCH.size:
                    sequence, queue_id, messages = _STAMP.unpack_from(value, _BATCH.size)
                    producer_id = value[_BATCH.size + _STAMP.size:].decode()
                    txn.stamps[(producer_id, sequence)] = (queue_id, messages)
            out.append(txn)
        return out

    def get(self, txn_id: str) -> Transaction | None:
        value = self.db.get(b"T" + txn_id.encode())
        if value is None:
            return None
        state, created, last, ended, position, rank, batches, messages, expired = _TXN.unpack_from(value)
        return Transaction(txn_id, TxnState(state), created, last, ended, position, rank, batches, messages, expired,
                           owner=value[_TXN.size:].decode())

    def add_batch(self, txn: Transaction, batch: BatchRef, first: bool, stamp: bytes = b"") -> None:
        """Record a prepared batch (and the transaction, with its first batch); ``stamp`` from
        ``pack_stamp``."""
        writes = WriteBatch(raw_mode=True)
        raw = txn.id.encode()
        if first:
            writes.put(b"T" + raw, _pack(txn))
            writes.put(b"O" + raw, b"")
        writes.put(b"B" + raw + b"\0" + _SEQ.pack(txn.batch_count - 1), _BATCH.pack(
            batch.position, batch.size, batch.messages, batch.prepared_ms) + stamp)
        self.db.write(writes, self._unsynced)

    def decide_commit(self, txns: list[Transaction], sink: SinkRecord | None) -> None:
        """The commit decision: the transactions COMMITTING and the sink batch (pending its
        record in the commitlog), on disk at once."""
        writes = WriteBatch(raw_mode=True)
        for txn in txns:
            writes.put(b"T" + txn.id.encode(), _pack(txn))
        if sink is not None:
            self._put_sink(writes, sink)
            writes.put(b"P" + _sink_key(sink.sink_id, sink.batch_id)[1:], b"")
        self.db.write(writes, self._synced)

    def end(self, txns: list[Transaction], sync: bool, sink: SinkRecord | None = None) -> None:
        """Transactions ended (committed and applied, or rolled back): their batches go; the
        sink batch, now in the commitlog, is no longer pending."""
        writes = WriteBatch(raw_mode=True)
        if sink is not None:
            writes.delete(b"P" + _sink_key(sink.sink_id, sink.batch_id)[1:])
        for txn in txns:
            raw = txn.id.encode()
            writes.put(b"T" + raw, _pack(txn))
            writes.delete(b"O" + raw)
            writes.delete_range(b"B" + raw + b"\0", b"B" + raw + b"\1")
            writes.put(b"E" + _BATCH_ID.pack(txn.ended_ms) + raw, b"")
        self.db.write(writes, self._synced if sync else self._unsynced)

    def forget_ended_before(self, ms: int, limit: int = 10_000) -> int:
        """Delete transactions that ended before ``ms`` (at most ``limit`` per call)."""
        writes = WriteBatch(raw_mode=True)
        count = 0
        for key, _ in self._prefixed(b"E"):
            if _BATCH_ID.unpack_from(key, 1)[0] >= ms or count >= limit:
                break
            writes.delete(key)
            writes.delete(b"T" + key[1 + _BATCH_ID.size:])
            count += 1
        if count:
            self.db.write(writes, self._unsynced)
        return count

    # --- sinks -----------------------------------------------------------------------------

    def sink_record(self, sink_id: str, batch_id: int) -> SinkRecord | None:
        value = self.db.get(_sink_key(sink_id, batch_id))
        if value is None:
            return None
        data = json.loads(value)
        return SinkRecord(sink_id, batch_id, tuple(data["transactions"]), data["committed_ms"], data.get("owner", ""))

    def sink_owner(self, sink_id: str) -> str | None:
        """The access key that first committed under the sink ("" only without ACLs so far);
        None when no batch of it was committed."""
        value = self.db.get(b"K" + sink_id.encode())
        return None if value is None else value.decode()

    def _put_sink(self, writes: WriteBatch, sink: SinkRecord) -> None:
        """The sink batch, and its owner when the sink has none yet (the first committer); the
        sink's oldest batches past the SINK_BATCHES_KEPT latest go (no replay reaches back so far)."""
        writes.put(_sink_key(sink.sink_id, sink.batch_id), json.dumps(
            {"transactions": list(sink.transaction_ids), "committed_ms": sink.committed_ms,
             "owner": sink.owner}).encode())
        if not self.sink_owner(sink.sink_id):
            writes.put(b"K" + sink.sink_id.encode(), sink.owner.encode())
        kept = [key for key, _ in self._prefixed(b"S" + sink.sink_id.encode() + b"\0")]
        for key in kept[:max(0, len(kept) + 1 - SINK_BATCHES_KEPT)]:
            writes.delete(key)

    def sinks(self) -> list[tuple[str, str, int, int, int]]:
        """Every sink: (sink id, owner, latest batch id, batches kept, when its latest was committed)."""
        out: dict[str, list] = {}
        for key, value in self._prefixed(b"S"):
            sink_id, _, raw = key[1:].partition(b"\0")
            entry = out.setdefault(sink_id.decode(), [-1, 0, 0])
            entry[0] = max(entry[0], _BATCH_ID.unpack(raw)[0])
            entry[1] += 1
            entry[2] = max(entry[2], json.loads(value)["committed_ms"])
        return [(sink_id, self.sink_owner(sink_id) or "", *entry) for sink_id, entry in sorted(out.items())]

    def sinks_owned(self, owner: str) -> int:
        """How many sinks ``owner`` owns."""
        return sum(1 for _, value in self._prefixed(b"K") if value.decode() == owner)

    def release_sink(self, sink_id: str) -> str | None:
        """Forget the sink's owner; the owner it had (None: it had none)."""
        owner = self.sink_owner(sink_id)
        if owner:
            self.db.put(b"K" + sink_id.encode(), b"", self._synced)
        return owner or None

    def pending_sinks(self) -> list[SinkRecord]:
        """Sink batches decided whose record may not be in the commitlog (a crash)."""
        out = []
        for key, _ in self._prefixed(b"P"):
            sink_id, _, raw = key[1:].partition(b"\0")
            out.append(self.sink_record(sink_id.decode(), _BATCH_ID.unpack(raw)[0]))
        return [r for r in out if r is not None]

    def restore_sink(self, sink: SinkRecord) -> bool:
        """Record a sink batch read back from the commitlog unless it is known; True if it was not."""
        if self.sink_record(sink.sink_id, sink.batch_id) is not None:
            return False
        writes = WriteBatch(raw_mode=True)
        self._put_sink(writes, sink)
        self.db.write(writes, self._synced)
        return True

    def sink_log_offset(self) -> int:
        value = self.db.get(b"L")
        return 0 if value is None else _SEQ.unpack(value)[0]

    def set_sink_log_offset(self, offset: int) -> None:
        self.db.put(b"L", _SEQ.pack(offset), self._synced)

    def latest_sink_batch(self, sink_id: str) -> int:
        """The highest committed batch id of the sink; -1 when none is."""
        prefix = b"S" + sink_id.encode() + b"\0"
        it = self.db.iter()
        it.seek_for_prev(prefix + b"\xff" * _BATCH_ID.size)
        if it.valid() and it.key().startswith(prefix):
            return _BATCH_ID.unpack_from(it.key(), len(prefix))[0]
        return -1

    # --- the half log's segment numbers ------------------------------------------------------

    def next_half_segment(self) -> int:
        value = self.db.get(_NEXT_SEGMENT_KEY)
        return 0 if value is None else _SEQ.unpack(value)[0]

    def set_next_half_segment(self, index: int) -> None:
        self.db.put(_NEXT_SEGMENT_KEY, _SEQ.pack(index), self._synced)

    def close(self) -> None:
        close_checked(self.db, self.directory, self._marks)

    def _prefixed(self, prefix: bytes):
        for key, value in self.db.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield key, value


def pack_stamp(producer: tuple[str, int], queue_id: int, messages: int) -> bytes:
    return _STAMP.pack(producer[1], queue_id, messages) + producer[0].encode()


def _pack(txn: Transaction) -> bytes:
    return _TXN.pack(txn.state, txn.created_ms, txn.last_ms, txn.ended_ms, txn.decision_position, txn.decision_rank,
                     txn.batch_count, txn.message_count, txn.expired) + txn.owner.encode()


# A sink's committed batches remembered, the latest ones: Spark replays the last micro-batch of a
# restarted query (it keeps 100 in its checkpoint), a rerun its own batch id.
SINK_BATCHES_KEPT = 1000


def _sink_key(sink_id: str, batch_id: int) -> bytes:
    return b"S" + sink_id.encode() + b"\0" + _BATCH_ID.pack(batch_id)
