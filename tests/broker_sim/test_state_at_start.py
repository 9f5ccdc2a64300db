"""State the broker cannot trust at start (issue 29.2): a deleted consumer offsets file, a pop or
transaction RocksDB whose MANIFEST was cut in half or whose folder is gone, a bad CURRENT or
table file. Each start is refused with a sentence naming the file and what to do (before: an
empty start without a word, or a raw traceback); ``accept_state_loss`` starts and logs the loss.
A new data directory, and one whose broker never consumed, start as before."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker_sim.broker import Broker
from broker_sim.store import StateLossError, StorePaths
from rmq_spark import Admin, Message, PopConsumer, Producer, Transactions, new_transaction_id

TOPIC = "t"
INVISIBLE_MS = 600_000


def use(data: Path) -> None:
    """A broker that consumed: offsets committed, a message popped and not acknowledged, a sink
    batch committed."""
    broker = Broker(data)
    broker.start()
    try:
        with Admin(broker.endpoint) as admin:
            admin.create_topic(TOPIC, 1, "SimpleCQ")
        with Producer(broker.endpoint) as producer:
            producer.send_batch([Message(TOPIC, b"acked"), Message(TOPIC, b"in flight")])
        assert broker.core.store.wait_dispatched(10.0)
        with PopConsumer(broker.endpoint, "g", [TOPIC], invisible_ms=INVISIBLE_MS) as consumer:
            popped = consumer.receive(1, poll_ms=2000)
            consumer.ack(popped)
            assert len(consumer.receive(1, poll_ms=2000)) == 1  # in flight
        with Producer(broker.endpoint, transaction_id=new_transaction_id()) as writer:
            writer.send(Message(TOPIC, b"exactly once"))
            prepared = writer.prepared()
        with Transactions(broker.endpoint) as txns:
            txns.commit([prepared], sink_id="sink", batch_id=0)
    finally:
        broker.stop(grace=1.0)


def start(data: Path, **options) -> Broker:
    broker = Broker(data, **options)
    broker.start()
    return broker


def halve(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def halve_manifest(db: Path) -> None:
    halve(db / (db / "CURRENT").read_text().strip())


def bad_table_file(db: Path) -> None:
    table = sorted(db.glob("*.sst"))[-1]
    data = bytearray(table.read_bytes())
    data[-48:] = b"\xa5" * 48  # the footer and its magic number
    table.write_bytes(bytes(data))


PATHS = StorePaths(".")
DAMAGES = {
    "offsets file deleted": (PATHS.consumer_offsets, lambda p: p.unlink(), "is missing"),
    "pop MANIFEST halved": (PATHS.pop_state, halve_manifest, "is older than the broker left it"),
    "pop folder gone": (PATHS.pop_state, shutil.rmtree, "is missing"),
    "pop CURRENT bad": (PATHS.pop_state, lambda p: (p / "CURRENT").write_text("garbage\n"), "cannot be opened"),
    "txn MANIFEST halved": (PATHS.txn_state, halve_manifest, "is older than the broker left it"),
    "txn folder gone": (PATHS.txn_state, shutil.rmtree, "is missing"),
    "txn table file bad": (PATHS.txn_state, bad_table_file, "cannot be opened"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_lost_or_damaged_state_is_refused_with_a_sentence_then_accepted_with_the_flag(tmp_path, damage, caplog):
    data = tmp_path / "data"
    use(data)
    relative, spoil, problem = DAMAGES[damage]
    path = data / relative
    spoil(path)
    with pytest.raises(StateLossError) as refused:
        start(data)
    sentence = str(refused.value)
    assert str(path) in sentence and problem in sentence and "--accept-state-loss" in sentence
    assert "Restore it" in sentence or "Restore the folder" in sentence
    if damage == "offsets file deleted":
        assert "1 group had offsets at its last write" in sentence  # what was lost, as far as known

    with caplog.at_level(logging.ERROR):
        broker = start(data, accept_state_loss=True)
    try:
        logged = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
        assert logged and "accepted by --accept-state-loss" in logged[0], caplog.text
    finally:
        broker.stop(grace=1.0)
    start(data).stop(grace=1.0)  # accepted once: the next start is a plain one


def test_a_new_broker_and_one_that_never_consumed_start_without_state_files(tmp_path):
    data = tmp_path / "data"
    broker = start(data)
    broker.stop(grace=1.0)
    assert not StorePaths(data).consumer_offsets.exists()  # nothing committed: nothing to lose
    start(data).stop(grace=1.0)


def test_the_cli_refuses_damaged_state_with_exit_2_and_no_traceback(tmp_path):
    data = tmp_path / "data"
    use(data)
    (StorePaths(data).pop_state / "CURRENT").write_text("garbage\n")
    done = subprocess.run([sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "rmq-broker-sim: error:" in done.stderr and "CURRENT file corrupted" in done.stderr
    assert "--accept-state-loss" in done.stderr


@pytest.mark.parametrize("damage", ["txn folder gone", "txn MANIFEST halved"])
def test_a_sink_batch_outlives_its_lost_state_so_a_replay_stores_nothing_twice(tmp_path, damage):
    """Issue 29.2: the transaction RocksDB lost (accepted), the sink batch was forgotten and
    Spark's replay of it stored its rows twice. Its record in the commitlog brings it back."""
    data = tmp_path / "data"
    use(data)  # sink batch 0 committed: one row
    relative, spoil, _problem = DAMAGES[damage]
    spoil(data / relative)
    broker = start(data, accept_state_loss=True)
    try:
        with Producer(broker.endpoint, transaction_id=new_transaction_id()) as writer:  # the replayed batch
            writer.send(Message(TOPIC, b"exactly once"))
            prepared = writer.prepared()
        with Transactions(broker.endpoint) as txns:
            assert txns.is_committed("sink", 0)
            assert txns.commit([prepared], sink_id="sink", batch_id=0).sink_batch_replayed
        assert broker.core.store.wait_dispatched(10.0)
        assert broker.core.store.max_offset(TOPIC, 0) == 3  # acked, in flight, exactly once: no second copy
    finally:
        broker.stop(grace=1.0)


def test_a_state_json_deleted_beside_stored_data_is_refused_then_accepted(tmp_path, caplog):
    """Issue 44: deleting state.json turned the lost-state checks off without a line; deleted with
    consumerOffset.json too, acknowledged pops came back, silently."""
    data = tmp_path / "data"
    use(data)
    paths = StorePaths(data)
    paths.state_marks.unlink()
    paths.consumer_offsets.unlink()
    with pytest.raises(StateLossError) as refused:
        start(data)
    assert f"{paths.state_marks} is missing beside stored data (commitlog, config/consumerOffset.json" not in \
        str(refused.value)  # the offsets file is gone too: the commitlog, pop's and the transactions' state stay
    assert f"{paths.state_marks} is missing beside stored data (commitlog, pop, txn)" in str(refused.value)
    assert "--accept-state-loss" in str(refused.value)
    with caplog.at_level(logging.ERROR):
        start(data, accept_state_loss=True).stop(grace=1.0)
    assert "accepted by --accept-state-loss" in caplog.text
    start(data).stop(grace=1.0)  # the marks are written again


def test_a_first_start_that_fails_halfway_leaves_a_directory_the_next_start_trusts(tmp_path):
    """A new data directory is marked before anything is stored in it: a first start that fails
    after the store and a database were made is not taken for lost state."""
    data = tmp_path / "data"
    groups = StorePaths(data).subscription_groups  # read after the databases are made
    groups.mkdir(parents=True)
    with pytest.raises(OSError):
        start(data)
    assert StorePaths(data).txn.exists() and StorePaths(data).pop.exists()
    groups.rmdir()
    start(data).stop(grace=1.0)


@pytest.mark.parametrize("content, words", [
    ('{"generations": []}', 'not {"generations": {...}}'),
    ('{"generations": {"pop/state": "3"}}', "its generations are not file names with whole numbers"),
    ("[1, 2]", 'not {"generations": {...}}'),
    ("not json", "is damaged"),
    (None, "is a directory"),
])
def test_a_malformed_state_json_stops_the_start_with_a_sentence_and_exit_2(tmp_path, content, words):
    data = tmp_path / "data"
    use(data)
    marks = StorePaths(data).state_marks
    marks.unlink()
    if content is None:
        marks.mkdir()
    else:
        marks.write_text(content)
    done = subprocess.run([sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "rmq-broker-sim: error:" in done.stderr and words in done.stderr, done.stderr
