"""Crash safety with a broker process killed by SIGKILL: between prepare and commit, at chosen
points of a commit, and at random moments of one. A commit is never left half visible and
never duplicated; prepared batches are never lost."""

import random
import shutil
import threading

import pytest

from rmq_spark import (
    Admin,
    BrokerUnavailableError,
    Producer,
    RmqError,
    Transactions,
    TransactionState,
    TransportConfig,
)
from txn_helpers import bodies, broker_process, kill9, offsets, read_queue, send_table, table_of, wait_offsets

NO_RETRY = TransportConfig(retries=0, timeout_ms=20_000)


def prepare(endpoint, txn_id, plan):
    """Prepare under ``txn_id`` one batch per (queue, tag, count) of ``plan``."""
    with Producer(endpoint, transaction_id=txn_id, codec="arrow", compression="lz4", transport=NO_RETRY) as writer:
        for queue_id, tag, count in plan:
            send_table(writer, "orders", queue_id, table_of(bodies(count, tag)))
        return writer.prepared()


def expected_queues(plans):
    """What each queue must hold once the plans are committed in this order."""
    queues = {0: [], 1: []}
    for plan in plans:
        for queue_id, tag, count in plan:
            queues[queue_id] += bodies(count, tag)
    return queues


def check_committed_once(endpoint, plans):
    queues = expected_queues(plans)
    wait_offsets(endpoint, "orders", [len(queues[0]), len(queues[1])])
    for queue_id, expected in queues.items():
        assert read_queue(endpoint, "orders", queue_id) == list(enumerate(expected))


PLAN_1 = [(0, "a0", 40), (1, "a1", 30), (0, "a2", 20), (1, "a3", 10), (0, "a4", 25), (1, "a5", 5)]
PLAN_2 = [(1, "b0", 15), (0, "b1", 35), (1, "b2", 45)]


def test_a_broker_killed_between_prepare_and_commit_loses_nothing(tmp_path):
    data = tmp_path / "data"
    with broker_process(data) as (endpoint, process, log):
        with Admin(endpoint) as admin:
            admin.create_topic("orders", 2, "BatchCQ")
        prepared = [prepare(endpoint, "w1", PLAN_1), prepare(endpoint, "w2", PLAN_2)]
        kill9(process)
    with broker_process(data) as (endpoint, process, log):
        assert offsets(endpoint, "orders") == [0, 0]
        with Transactions(endpoint) as txns:
            assert {(t.transaction_id, t.state) for t in txns.list()} == {("w1", TransactionState.OPEN),
                                                                          ("w2", TransactionState.OPEN)}
            txns.commit(prepared, sink_id="sink", batch_id=0)
        check_committed_once(endpoint, [PLAN_1, PLAN_2])


# A commit appends each transaction's batches queue by queue: w1's queue 0 (3 batches), w1's
# queue 1 (3), w2's queue 1 (2), w2's queue 0 (1).
@pytest.mark.parametrize("crash", ["appends:0", "appends:1", "appends:3", "before-end"])
def test_a_commit_killed_midway_is_completed_once_on_restart(tmp_path, crash):
    data = tmp_path / "data"
    with broker_process(data, crash=crash) as (endpoint, process, log):
        with Admin(endpoint) as admin:
            admin.create_topic("orders", 2, "BatchCQ")
        prepared = [prepare(endpoint, "w1", PLAN_1), prepare(endpoint, "w2", PLAN_2)]
        with Transactions(endpoint, NO_RETRY) as txns, pytest.raises(BrokerUnavailableError):
            txns.commit(prepared, sink_id="sink", batch_id=7)
        kill9(process)  # it killed itself; this reaps it
    with broker_process(data) as (endpoint, process, log):
        applied = {"appends:0": 0, "appends:1": 3, "appends:3": 8, "before-end": 9}[crash]
        assert f"completing the commit of 2 transactions interrupted by a crash: {applied} of 9 batches" in log
        check_committed_once(endpoint, [PLAN_1, PLAN_2])
        with Transactions(endpoint) as txns:
            assert txns.list() == []
            assert txns.sink_batch("sink", 7).transaction_ids == ("w1", "w2")
            again = txns.commit(prepared, sink_id="sink", batch_id=7)  # the driver's retry
            assert again.sink_batch_replayed and not any(t.changed for t in again.transactions)
        check_committed_once(endpoint, [PLAN_1, PLAN_2])
        kill9(process)  # a second crash after recovery changes nothing either
    with broker_process(data) as (endpoint, process, log):
        check_committed_once(endpoint, [PLAN_1, PLAN_2])
    # The sink batch reached the commitlog too (written at the restart when the crash came first):
    # it outlives the transaction state.
    shutil.rmtree(data / "txn" / "state")
    with broker_process(data, extra=("--accept-state-loss",)) as (endpoint, process, log):
        assert "restored 1 committed sink batches" in log
        with Transactions(endpoint) as txns:
            assert txns.sink_batch("sink", 7).transaction_ids == ("w1", "w2")


def test_kill_at_random_moments_of_a_commit(tmp_path):
    rng = random.Random(8)
    big = [(q % 2, f"r{q}", 200) for q in range(60)]
    for attempt in range(3):
        data = tmp_path / f"data{attempt}"
        with broker_process(data) as (endpoint, process, log):
            with Admin(endpoint) as admin:
                admin.create_topic("orders", 2, "BatchCQ")
            prepared = prepare(endpoint, "big", big)
            outcome = []

            def commit(prepared=prepared, outcome=outcome, attempt=attempt):
                try:
                    with Transactions(endpoint, NO_RETRY) as txns:
                        outcome.append(txns.commit([prepared], sink_id="sink", batch_id=attempt))
                except RmqError as err:
                    outcome.append(err)

            committer = threading.Thread(target=commit)
            committer.start()
            threading.Event().wait(rng.uniform(0.0, 0.05))
            kill9(process)
            committer.join(30)
            assert not committer.is_alive()
        with broker_process(data) as (endpoint, process, log):
            with Transactions(endpoint) as txns:
                state = txns.list(["big"])[0].state
                assert state in (TransactionState.OPEN, TransactionState.COMMITTED)
                if state is TransactionState.OPEN:  # killed before the decision: nothing is visible
                    assert offsets(endpoint, "orders") == [0, 0]
                    assert not txns.is_committed("sink", attempt)
                    txns.commit([prepared], sink_id="sink", batch_id=attempt)
                assert txns.is_committed("sink", attempt)
            check_committed_once(endpoint, [big])
