"""The data directory's layout, named once (RocketMQ's StorePathConfigHelper).

Data directory::

    lock                              flock: one broker per data directory
    abort                             present while a broker runs: a start that finds it recovers
    checkpoint                        flushed commitlog and index positions
    checkpoint.queues.json            every queue's max offset and indexed end at the last full index flush
    corrupted.json                    the damaged records found so far
    state.json                        the state files it has had, and their generations (state_marks.py)
    config/topics.json                topic table snapshot
    config/topics.journal             topic changes since the snapshot
    config/consumerOffset.json        consumer group offsets
    config/delayOffset.json           how far delayed messages were delivered
    config/subscriptionGroup.json     consumer groups that consume orderly
    commitlog/{20-digit start}
    consumequeue/{topic}/{queueId}/{20-digit start}        SimpleCQ
    batchconsumequeue/{topic}/{queueId}/{20-digit start}   BatchCQ
    pop/state/                        pop's RocksDB
    pop/receipt.secret                the key that signs receipt handles
    txn/state/                        the transactions' RocksDB
    txn/half/{20-digit start}         prepared (half) records
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker_sim.store.topics import QueueType

_INDEX_DIRECTORIES = {QueueType.SIMPLE_CQ: "consumequeue", QueueType.BATCH_CQ: "batchconsumequeue"}


@dataclass(frozen=True)
class StorePaths:
    """Every file and directory of the data directory ``root``."""

    root: Path

    def __init__(self, root):
        object.__setattr__(self, "root", Path(root))

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def abort(self) -> Path:
        return self.root / "abort"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def queue_table(self) -> Path:
        return self.root / "checkpoint.queues.json"

    @property
    def corrupted(self) -> Path:
        return self.root / "corrupted.json"

    @property
    def state_marks(self) -> Path:
        return self.root / "state.json"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def topics(self) -> Path:
        return self.config / "topics.json"

    @property
    def topics_journal(self) -> Path:
        return self.config / "topics.journal"

    @property
    def consumer_offsets(self) -> Path:
        return self.config / "consumerOffset.json"

    @property
    def delay_offsets(self) -> Path:
        return self.config / "delayOffset.json"

    @property
    def subscription_groups(self) -> Path:
        return self.config / "subscriptionGroup.json"

    @property
    def commitlog(self) -> Path:
        return self.root / "commitlog"

    def index_root(self, queue_type: QueueType) -> Path:
        """The directory of every topic's indexes of ``queue_type``."""
        return self.root / _INDEX_DIRECTORIES[queue_type]

    def topic_index(self, queue_type: QueueType, topic: str) -> Path:
        return self.index_root(queue_type) / topic

    def queue_index(self, queue_type: QueueType, topic: str, queue_id: int) -> Path:
        return self.topic_index(queue_type, topic) / str(queue_id)

    @property
    def pop(self) -> Path:
        return self.root / "pop"

    @property
    def pop_state(self) -> Path:
        return self.pop / "state"

    @property
    def receipt_secret(self) -> Path:
        return self.pop / "receipt.secret"

    @property
    def txn(self) -> Path:
        return self.root / "txn"

    @property
    def txn_state(self) -> Path:
        return self.txn / "state"

    @property
    def txn_half(self) -> Path:
        return self.txn / "half"
