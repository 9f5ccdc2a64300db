"""Batches a Producer(transaction_id=...) prepared, against a real in-process broker: invisible
until committed, then visible in order as ordinary batches; rollback, repeated commits, sink
batches."""

import pytest

from rmq_spark import (
    Admin,
    InvalidRequestError,
    Message,
    Producer,
    Transactions,
    TransactionState,
    TransactionStateError,
    new_transaction_id,
)
from txn_helpers import bodies, offsets, read_queue, send_table, start_broker, table_of, wait_offsets


def test_prepared_batches_are_invisible_and_take_no_offsets(broker, topic):
    with Producer(broker.endpoint, transaction_id=new_transaction_id(), codec="arrow", compression="lz4") as writer:
        send_table(writer, topic, 0, table_of(bodies(50, "p0")))
        send_table(writer, topic, 1, table_of(bodies(20, "p1")))
    with Producer(broker.endpoint) as producer:  # a plain batch after them takes offset 0
        producer.send_batch([Message(topic, b"plain", queue_id=0)])
    wait_offsets(broker.endpoint, topic, [1, 0, 0, 0])
    assert read_queue(broker.endpoint, topic, 0) == [(0, b"plain")]
    assert read_queue(broker.endpoint, topic, 1) == []
    broker.core.store.wait_dispatched(5)
    assert offsets(broker.endpoint, topic) == [1, 0, 0, 0]  # nothing more indexed later either


def test_commit_makes_every_batch_visible_in_order_as_ordinary_batches(broker, topic):
    first, second = bodies(30, "a"), bodies(40, "b")
    other = bodies(10, "c")
    with Producer(broker.endpoint, transaction_id="writer-1", codec="rmq") as one, \
            Producer(broker.endpoint, transaction_id="writer-2", codec="arrow", compression="zstd") as two:
        send_table(one, topic, 0, table_of(first[:10]))
        send_table(two, topic, 0, table_of(other))
        send_table(one, topic, 0, table_of(first[10:]))
        send_table(one, topic, 2, table_of(second))
        prepared = [two.prepared(), one.prepared()]
    with Transactions(broker.endpoint) as txns:
        result = txns.commit(prepared)
    assert [(t.transaction_id, t.state, t.changed, t.batch_count, t.message_count) for t in result.transactions] == [
        ("writer-2", TransactionState.COMMITTED, True, 1, 10), ("writer-1", TransactionState.COMMITTED, True, 3, 70)]
    assert result.messages_made_visible == 80
    wait_offsets(broker.endpoint, topic, [40, 0, 40, 0])
    # The commit order of the call, then each transaction's prepare order.
    assert read_queue(broker.endpoint, topic, 0) == list(enumerate(other + first))
    assert read_queue(broker.endpoint, topic, 2) == list(enumerate(second))
    # Each inner batch stays one record (one index unit) carrying the commit flag.
    batches = broker.core.store.get_messages(topic, 0, 0).batches
    assert [(b.base_offset, b.count) for b in batches] == [(0, 10), (10, 10), (20, 20)]


def test_queue_offsets_stay_dense_around_plain_sends(broker, topic):
    with Producer(broker.endpoint) as producer, \
            Producer(broker.endpoint, transaction_id=new_transaction_id()) as writer:
        producer.send_batch([Message(topic, b"before", queue_id=3)])
        writer.send_batch([Message(topic, b"txn-1", queue_id=3), Message(topic, b"txn-2")])
        producer.send_batch([Message(topic, b"between", queue_id=3)])
        prepared = writer.prepared()
        with Transactions(broker.endpoint) as txns:
            txns.commit([prepared])
        producer.send_batch([Message(topic, b"after", queue_id=3)])
    wait_offsets(broker.endpoint, topic, [0, 0, 0, 5])
    assert read_queue(broker.endpoint, topic, 3) == list(enumerate([b"before", b"between", b"txn-1", b"txn-2",
                                                                     b"after"]))


def test_rollback_discards_and_the_transaction_stays_ended(broker, topic):
    with Producer(broker.endpoint, transaction_id="doomed") as writer:
        send_table(writer, topic, 0, table_of(bodies(5)))
        with Transactions(broker.endpoint) as txns:
            outcome, = txns.rollback(["doomed"])
            assert (outcome.state, outcome.changed, outcome.message_count) == (TransactionState.ROLLED_BACK, True, 5)
            again, = txns.rollback([writer.prepared()])
            assert (again.state, again.changed) == (TransactionState.ROLLED_BACK, False)
            with pytest.raises(TransactionStateError, match="'doomed' was rolled back; it cannot be committed"):
                txns.commit(["doomed"])
        with pytest.raises(TransactionStateError, match="send under a new transaction id"):
            send_table(writer, topic, 0, table_of(bodies(1)))
    broker.core.store.wait_dispatched(5)
    assert offsets(broker.endpoint, topic) == [0, 0, 0, 0]


def test_a_repeated_commit_changes_nothing_and_says_so(broker, topic):
    with Producer(broker.endpoint, transaction_id="once") as writer:
        send_table(writer, topic, 1, table_of(bodies(7)))
        prepared = writer.prepared()
    with Transactions(broker.endpoint) as txns:
        assert txns.commit([prepared]).transactions[0].changed is True
        repeated = txns.commit([prepared])
        assert (repeated.transactions[0].state, repeated.transactions[0].changed) == (TransactionState.COMMITTED, False)
        assert repeated.messages_made_visible == 0
        with pytest.raises(TransactionStateError, match="'once' is committed; it cannot be rolled back"):
            txns.rollback(["once"])
    broker.core.store.wait_dispatched(5)
    assert offsets(broker.endpoint, topic) == [0, 7, 0, 0]


def test_sink_batch_is_recorded_with_the_commit_and_a_replay_makes_nothing_visible(broker, topic):
    with Transactions(broker.endpoint) as txns:
        assert not txns.is_committed("sink-a", 0)
        assert txns.sink_batch("sink-a", 0).latest_batch_id == -1
        with Producer(broker.endpoint, transaction_id="b0-attempt0") as writer:
            send_table(writer, topic, 0, table_of(bodies(3, "b0")))
            first = txns.commit([writer.prepared()], sink_id="sink-a", batch_id=0)
        assert not first.sink_batch_replayed and first.sink_batch_transaction_ids == ("b0-attempt0",)
        status = txns.sink_batch("sink-a", 0)
        assert (status.committed, status.transaction_ids, status.latest_batch_id) == (True, ("b0-attempt0",), 0)

        # The batch replayed after a driver restart: new attempts, new transactions.
        with Producer(broker.endpoint, transaction_id="b0-replay") as writer:
            send_table(writer, topic, 0, table_of(bodies(3, "b0")))
            replay = txns.commit([writer.prepared()], sink_id="sink-a", batch_id=0)
        assert replay.sink_batch_replayed and replay.sink_batch_transaction_ids == ("b0-attempt0",)
        assert [(t.state, t.changed) for t in replay.transactions] == [(TransactionState.ROLLED_BACK, True)]
        # A commit call repeated after a lost answer is a replay of itself.
        assert txns.commit(["b0-attempt0"], sink_id="sink-a", batch_id=0).transactions[0].changed is False

        # A batch in which no task wrote anything is recorded too.
        assert txns.commit([], sink_id="sink-a", batch_id=1).transactions == ()
        assert txns.sink_batch("sink-a", 1).committed and txns.sink_batch("sink-a", 0).latest_batch_id == 1
        assert not txns.is_committed("sink-b", 0)
    broker.core.store.wait_dispatched(5)
    assert read_queue(broker.endpoint, topic, 0) == list(enumerate(bodies(3, "b0")))


def test_only_the_broker_writes_the_sink_topic(broker):
    """Committed sink batches are also records of RMQ_SYS_SINK_BATCHES, restored from it at
    start (issue 29): a record a client put there would mark a batch committed, so no client
    may send to it, create it or delete it."""
    with Transactions(broker.endpoint) as txns:
        txns.commit([], sink_id="sink-a", batch_id=0)
    sink_topic = "RMQ_SYS_SINK_BATCHES"
    assert read_queue(broker.endpoint, sink_topic, 0)[0][0] == 0  # the record is there
    with Producer(broker.endpoint, auto_batch=False) as producer, \
            pytest.raises(InvalidRequestError, match="only the broker writes to it"):
        producer.send(Message(sink_topic, b'{"sink": "sink-a", "batch": 1}'))
    with Admin(broker.endpoint) as admin:
        with pytest.raises(InvalidRequestError, match="committed sink batches"):
            admin.delete_topic(sink_topic)
        with pytest.raises(InvalidRequestError, match="committed sink batches"):
            admin.create_topic(sink_topic, 1, "SimpleCQ")


def test_listing_shows_open_transactions_and_looks_up_ended_ones(broker, topic, clock):
    with Producer(broker.endpoint, transaction_id="open-one") as writer:
        send_table(writer, topic, 0, table_of(bodies(4)))
        send_table(writer, topic, 1, table_of(bodies(2)))
    with Transactions(broker.endpoint) as txns:
        info, = txns.list()
        assert (info.transaction_id, info.state, info.batch_count, info.message_count) == (
            "open-one", TransactionState.OPEN, 2, 6)
        assert info.created_ms == clock.now and info.expires_ms == clock.now + 60_000
        txns.commit(["open-one"])
        assert txns.list() == []
        ended, unknown = txns.list(["open-one", "never-seen"])
        assert (ended.state, ended.message_count, ended.expires_ms) == (TransactionState.COMMITTED, 6, 0)
        assert unknown.state is TransactionState.UNKNOWN


def test_early_batches_on_a_simplecq_topic_commit_as_one_record_per_message(broker):
    with Admin(broker.endpoint) as admin:
        admin.create_topic("simple", 2, "SimpleCQ")
    with Producer(broker.endpoint, transaction_id=new_transaction_id()) as writer:
        writer.send_batch([Message("simple", body, queue_id=1) for body in bodies(5)])
        send_table(writer, "simple", 1, table_of(bodies(3, "t")))
        prepared = writer.prepared()
    assert (prepared.batch_count, prepared.message_count) == (2, 8)
    with Transactions(broker.endpoint) as txns:
        outcome, = txns.commit([prepared]).transactions
    assert outcome.batch_count == 8  # an early batch prepares a record per message
    wait_offsets(broker.endpoint, "simple", [0, 8])
    assert read_queue(broker.endpoint, "simple", 1) == list(enumerate(bodies(5) + bodies(3, "t")))


def test_half_log_segments_are_deleted_once_their_transactions_end(broker, topic):
    half = broker.core.transactions.half
    big = [b"x" * 200_000]
    with Producer(broker.endpoint, transaction_id="big") as writer, \
            Producer(broker.endpoint, transaction_id="small") as keep:
        for _ in range(20):  # about 4 MB in segments of 1.5 MiB
            send_table(writer, topic, 0, table_of(big))
        send_table(keep, topic, 1, table_of(bodies(1)))
        assert half.segment_count >= 3
        with Transactions(broker.endpoint) as txns:
            txns.commit(["big"])
            half.drop_unused()  # as the sweep does
            assert half.segment_count == 1  # the segment being written holds "small"
            txns.rollback(["small"])
    half.drop_unused()
    assert half.segment_count == 1  # the segment being written is kept
    wait_offsets(broker.endpoint, topic, [20, 0, 0, 0])


def test_half_log_positions_are_never_reused_across_restarts(tmp_path, clock):
    """Positions identify committed records (PREPARED TX OFFSET), even once segments are gone."""
    data = tmp_path / "data"
    seen = []
    for round_ in range(3):
        broker = start_broker(data, clock)
        try:
            if round_ == 0:
                with Admin(broker.endpoint) as admin:
                    admin.create_topic("t", 1, "BatchCQ")
            with Producer(broker.endpoint, transaction_id=f"round{round_}") as writer:
                send_table(writer, "t", 0, table_of(bodies(3)))
            txn, = broker.core.transactions.transactions([f"round{round_}"])
            seen.append(txn.batches[0].position)
            with Transactions(broker.endpoint) as txns:
                txns.commit([f"round{round_}"])
            broker.core.transactions.half.drop_unused()
        finally:
            broker.stop(grace=1.0)
    assert seen == sorted(set(seen))


def test_rmq_admin_lists_rolls_back_and_answers_for_sink_batches(broker, topic, capsys):
    import json

    from rmq_spark.cli import main

    with Producer(broker.endpoint, transaction_id="stuck-writer") as writer:
        send_table(writer, topic, 0, table_of(bodies(2)))
    assert main(["--endpoint", broker.endpoint, "transaction", "list"]) == 0
    out = capsys.readouterr().out
    assert "stuck-writer" in out and "open" in out
    assert main(["--endpoint", broker.endpoint, "--json", "transaction", "rollback", "stuck-writer"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["state"] == "rolled_back"
    assert main(["--endpoint", broker.endpoint, "--json", "transaction", "sink", "s", "0"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["committed"] is False
    assert main(["--endpoint", broker.endpoint, "transaction", "rollback", "nobody"]) == 1
    assert "unknown transaction id 'nobody'" in capsys.readouterr().err


def test_rmq_admin_lists_sinks_and_releases_one(broker, topic, capsys):
    import json

    from rmq_spark.cli import main

    with Producer(broker.endpoint, transaction_id="listed-writer") as writer:
        send_table(writer, topic, 0, table_of(bodies(1)))
    with Transactions(broker.endpoint) as txns:
        txns.commit(["listed-writer"], sink_id="listed-sink", batch_id=3)
    assert main(["--endpoint", broker.endpoint, "--json", "sink", "list"]) == 0
    listed = {row["sink_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["listed-sink"]["latest_batch_id"] == 3 and listed["listed-sink"]["batches_kept"] == 1
    assert main(["--endpoint", broker.endpoint, "--json", "sink", "release", "listed-sink"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"sink_id": "listed-sink", "released": False, "owner": ""}]
    assert main(["--endpoint", broker.endpoint, "--json", "transaction", "sink", "listed-sink", "3"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["committed"] is True  # its batches stay
