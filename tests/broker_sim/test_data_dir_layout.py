"""A broker's data directory holds exactly the files and directories StorePaths names."""

import re
from pathlib import Path

from broker_sim import embedded
from broker_sim.store import QueueType
from broker_sim.store.paths import StorePaths
from rmq_spark import Admin, Message, PopConsumer, Producer
from rmq_spark.client.transactions import Transactions, new_transaction_id

SEGMENT_NAME = re.compile(r"\d{20}")
WAIT_S = 10.0


def use_every_part(endpoint: str) -> None:
    """Topics of both kinds, sends, a pop and its ack, a committed transaction."""
    with Admin(endpoint) as admin:
        admin.create_topic("batch", 2, QueueType.BATCH_CQ)
        admin.create_topic("simple", 1, QueueType.SIMPLE_CQ)
    with Producer(endpoint) as producer:
        for topic in ("batch", "simple"):
            producer.send(Message(topic, b"hello"))
    with Producer(endpoint, transaction_id=new_transaction_id("layout")) as producer:
        producer.send_async(Message("batch", b"prepared", queue_id=1))
        producer.flush()
        prepared = producer.prepared()
    with Transactions(endpoint) as transactions:
        transactions.commit([prepared])
    with PopConsumer(endpoint, "g", "simple", poll_ms=int(WAIT_S * 1000)) as consumer:
        deliveries = consumer.receive()
        assert deliveries, "the sent message was not popped"
        consumer.ack(deliveries)


def unnamed(paths: StorePaths) -> list[Path]:
    """What the data directory holds that StorePaths does not name (in a directory whose
    entries StorePaths names: segments, a queue's index files, RocksDB's own files)."""
    named = {getattr(paths, name) for name, value in vars(StorePaths).items() if isinstance(value, property)}
    databases = (paths.pop_state, paths.txn_state)
    segment_dirs = (paths.commitlog, paths.txn_half)
    return [path for path in sorted(paths.root.rglob("*"))
            if path not in named and not any(path.is_relative_to(db) for db in databases)
            and not (path.parent in segment_dirs and SEGMENT_NAME.fullmatch(path.name))
            and not _in_index(paths, path)]


def _in_index(paths: StorePaths, path: Path) -> bool:
    """An index root, a topic's or a queue's index directory, or an index file in one."""
    for kind in QueueType:
        if path.is_relative_to(paths.index_root(kind)):
            parts = path.relative_to(paths.index_root(kind)).parts
            if len(parts) < 2:
                return True
            if not parts[1].isdigit() or len(parts) > 3:
                return False
            queue = paths.queue_index(kind, parts[0], int(parts[1]))
            return path == queue or (path.parent == queue and SEGMENT_NAME.fullmatch(path.name) is not None)
    return False


def test_the_data_dir_holds_only_what_store_paths_names(tmp_path):
    paths = StorePaths(tmp_path / "data")
    with embedded(paths.root) as endpoint:
        use_every_part(endpoint)
        assert paths.abort.exists() and paths.lock.exists()
    assert unnamed(paths) == []
    queues = paths.queue_index(QueueType.BATCH_CQ, "batch", 1), paths.queue_index(QueueType.SIMPLE_CQ, "simple", 0)
    for path in (paths.lock, paths.checkpoint, paths.queue_table, paths.topics, paths.consumer_offsets,
                 paths.receipt_secret, paths.pop_state, paths.txn_state, paths.txn_half, *queues):
        assert path.exists(), f"{path} is missing: is it named elsewhere?"
    assert any(SEGMENT_NAME.fullmatch(p.name) for p in paths.commitlog.iterdir())
