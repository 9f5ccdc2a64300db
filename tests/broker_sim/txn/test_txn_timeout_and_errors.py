"""The timeout (with an injected clock), restarts between prepare and commit, and bad input."""

import time

import grpc
import pytest

from broker_sim.txn import TransactionConfig
from rmq_spark import (
    Admin,
    ConfigError,
    Message,
    Producer,
    QueueNotFoundError,
    TopicNotFoundError,
    TransactionIncompleteError,
    TransactionNotFoundError,
    Transactions,
    TransactionState,
    TransactionStateError,
)
from rmq_wire.codec import encode_messages
from rmq_wire.contract import broker_pb2, broker_pb2_grpc, txn_pb2, txn_pb2_grpc
from support.clock import Clock
from txn_helpers import START_MS, bodies, offsets, read_queue, send_table, start_broker, table_of, wait_offsets


def test_transactions_without_a_batch_for_the_timeout_are_rolled_back(broker, topic, clock):
    with Producer(broker.endpoint, transaction_id="abandoned") as abandoned, \
            Producer(broker.endpoint, transaction_id="alive") as alive:
        send_table(abandoned, topic, 0, table_of(bodies(3)))
        send_table(alive, topic, 1, table_of(bodies(3)))
        clock.step(59_999)
        send_table(alive, topic, 1, table_of(bodies(2, "late")))  # a batch restarts the timeout
        assert broker.core.transactions.expire() == []
        clock.step(1)
        assert broker.core.transactions.expire() == ["abandoned"]
        with Transactions(broker.endpoint) as txns:
            info, = txns.list(["abandoned"])
            assert (info.state, info.expired) == (TransactionState.ROLLED_BACK, True)
            with pytest.raises(TransactionStateError, match="rolled back by the timeout"):
                txns.commit(["abandoned"])
            clock.step(59_998)  # 59,999 ms after the late batch
            assert broker.core.transactions.expire() == []
            txns.commit([alive.prepared()])
    wait_offsets(broker.endpoint, topic, [0, 5, 0, 0])


def test_the_background_sweep_uses_the_service_clock(tmp_path):
    clock = Clock(START_MS)
    broker = start_broker(tmp_path / "data", clock, TransactionConfig(timeout_ms=1_000, check_interval_ms=10))
    try:
        with Admin(broker.endpoint) as admin:
            admin.create_topic("swept", 1, "BatchCQ")
        with Producer(broker.endpoint, transaction_id="left") as writer, Transactions(broker.endpoint) as txns:
            send_table(writer, "swept", 0, table_of(bodies(2)))
            clock.step(1_000)
            deadline = time.monotonic() + 10
            while txns.list(["left"])[0].state is not TransactionState.ROLLED_BACK:
                assert time.monotonic() < deadline, "the sweep did not roll the transaction back"
                time.sleep(0.01)
    finally:
        broker.stop(grace=1.0)


def test_a_restart_between_prepare_and_commit_loses_nothing(tmp_path, clock):
    data = tmp_path / "data"
    broker = start_broker(data, clock)
    try:
        with Admin(broker.endpoint) as admin:
            admin.create_topic("kept", 2, "BatchCQ")
        with Producer(broker.endpoint, transaction_id="across-restart", codec="arrow", compression="lz4") as writer:
            for part in range(5):
                send_table(writer, "kept", part % 2, table_of(bodies(10, f"part{part}")))
            prepared = writer.prepared()
    finally:
        broker.stop(grace=1.0)
    broker = start_broker(data, clock)
    try:
        with Transactions(broker.endpoint) as txns:
            info, = txns.list()
            assert (info.transaction_id, info.state, info.message_count) == ("across-restart", TransactionState.OPEN,
                                                                            50)
            assert offsets(broker.endpoint, "kept") == [0, 0]
            txns.commit([prepared], sink_id="s", batch_id=4)
        wait_offsets(broker.endpoint, "kept", [30, 20])
        assert [b for _, b in read_queue(broker.endpoint, "kept", 0)] == sum(
            (bodies(10, f"part{p}") for p in (0, 2, 4)), [])
    finally:
        broker.stop(grace=1.0)
    broker = start_broker(data, clock)  # ended state and sink batches survive too
    try:
        with Transactions(broker.endpoint) as txns:
            assert txns.commit([prepared]).transactions[0].changed is False
            assert txns.sink_batch("s", 4).transaction_ids == ("across-restart",)
        assert offsets(broker.endpoint, "kept") == [30, 20]
    finally:
        broker.stop(grace=1.0)


def test_a_commit_whose_message_count_differs_is_refused_whole(broker, topic):
    with Producer(broker.endpoint, transaction_id="complete") as good, \
            Producer(broker.endpoint, transaction_id="short") as bad:
        send_table(good, topic, 0, table_of(bodies(4)))
        send_table(bad, topic, 0, table_of(bodies(4)))
        with Transactions(broker.endpoint) as txns:
            with pytest.raises(TransactionIncompleteError, match="holds 4 prepared messages where the client sent 9"):
                txns.commit([good.prepared(), txns_prepared(bad, 9)])
            assert {t.state for t in txns.list()} == {TransactionState.OPEN}  # nothing done
            txns.commit([good.prepared(), bad.prepared()])
    wait_offsets(broker.endpoint, topic, [8, 0, 0, 0])


def txns_prepared(writer, messages):
    from rmq_spark import PreparedTransaction

    return PreparedTransaction(writer.prepared().transaction_id, 1, messages)


def test_unknown_transactions_are_refused_naming_them(broker, topic):
    with Producer(broker.endpoint, transaction_id="real") as writer:
        send_table(writer, topic, 0, table_of(bodies(1)))
    with Transactions(broker.endpoint) as txns:
        with pytest.raises(TransactionNotFoundError, match="unknown transaction id 'no-such-txn'"):
            txns.commit(["real", "no-such-txn"])
        with pytest.raises(TransactionNotFoundError, match="'ghost'"):
            txns.rollback(["ghost"])
        assert txns.list()[0].state is TransactionState.OPEN  # the refused commit changed nothing


def test_prepared_sends_are_checked_as_plain_sends(broker, topic):
    with Admin(broker.endpoint) as admin:
        admin.create_topic("simple-only", 1, "SimpleCQ")
    with Producer(broker.endpoint, transaction_id="checked") as writer:
        with pytest.raises(TopicNotFoundError, match="topic 'missing' does not exist"):
            send_table(writer, "missing", 0, table_of(bodies(1)))
        with pytest.raises(QueueNotFoundError, match="names queue 9"):
            send_table(writer, topic, 9, table_of(bodies(1)))
        assert writer.prepared().message_count == 0
    # What the producer never sends (an inner batch on a SimpleCQ topic, an empty one), the
    # broker refuses under a transaction too.
    inner = {"codec": broker_pb2.CODEC_RMQ, "payload": b"payload"}
    with grpc.insecure_channel(broker.endpoint) as channel:
        messaging = broker_pb2_grpc.MessagingStub(channel)
        for request, words in [
            (broker_pb2.SendRequest(topic="simple-only", queue_id=0, transaction_id="checked",
                                    inner_batch=broker_pb2.InnerBatch(count=1, **inner)), "SimpleCQ topic"),
            (broker_pb2.SendRequest(topic=topic, queue_id=0, transaction_id="checked",
                                    inner_batch=broker_pb2.InnerBatch(count=0, **inner)), "count 0"),
        ]:
            with pytest.raises(grpc.RpcError) as caught:
                messaging.Send(request)
            assert words in caught.value.details()
    with Transactions(broker.endpoint) as txns:
        assert txns.list() == []  # no refused send opened a transaction


def test_malformed_ids_are_refused_on_both_sides(broker, topic):
    with pytest.raises(ConfigError, match="transaction id 'has space' is malformed"):
        Producer(broker.endpoint, transaction_id="has space")
    with Transactions(broker.endpoint) as txns:
        with pytest.raises(ConfigError, match="sink id"):
            txns.commit([], sink_id="bad/sink", batch_id=0)
        with pytest.raises(ConfigError, match="batch_id=-1"):
            txns.sink_batch("sink", -1)
        with pytest.raises(ConfigError, match="both sink_id and batch_id"):
            txns.commit(["a"], sink_id="sink")
        with pytest.raises(ConfigError, match="a list of transactions"):
            txns.commit("single-id")
    # The broker checks too, for clients that do not.
    with grpc.insecure_channel(broker.endpoint) as channel:
        messaging = broker_pb2_grpc.MessagingStub(channel)
        request = broker_pb2.SendRequest(topic=topic, queue_id=0, transaction_id="x" * 300,
                                         inner_batch=broker_pb2.InnerBatch(payload=b"p", count=1,
                                                                           codec=broker_pb2.CODEC_RMQ))
        with pytest.raises(grpc.RpcError) as caught:
            messaging.Send(request)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "transaction id" in caught.value.details() and "malformed" in caught.value.details()
        stub = txn_pb2_grpc.TransactionsStub(channel)
        for request, words in [
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT, transactions=[txn_pb2.TransactionRef(id="a\nb")]),
             "malformed"),
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT, transactions=[
                txn_pb2.TransactionRef(id="a"), txn_pb2.TransactionRef(id="a")]), "named twice"),
            (txn_pb2.EndTransactionRequest(transactions=[txn_pb2.TransactionRef(id="a")]), "set TXN_COMMIT"),
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT), "names no transaction"),
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_ROLLBACK, transactions=[txn_pb2.TransactionRef(id="a")],
                                           sink_batch=txn_pb2.SinkBatch(sink_id="s")), "leave sink_batch unset"),
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT, sink_batch=txn_pb2.SinkBatch(
                sink_id="s", batch_id=-2)), "batch id -2"),
            (txn_pb2.EndTransactionRequest(action=txn_pb2.TXN_COMMIT, transactions=[
                txn_pb2.TransactionRef(id="a", message_count=-1)]), "negative"),
        ]:
            with pytest.raises(grpc.RpcError) as caught:
                stub.EndTransaction(request)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, request
            assert words in caught.value.details()
    broker.core.store.wait_dispatched(5)
    assert offsets(broker.endpoint, topic) == [0, 0, 0, 0]


def test_a_committed_transaction_takes_no_more_batches(broker, topic):
    with Producer(broker.endpoint, transaction_id="closed") as writer:
        writer.send_batch([Message(topic, b"one", queue_id=0)])
        with Transactions(broker.endpoint) as txns:
            txns.commit([writer.prepared()])
        with pytest.raises(TransactionStateError, match="'closed' is committed; no batch can be added"):
            writer.send_batch([Message(topic, b"two", queue_id=0)])
    wait_offsets(broker.endpoint, topic, [1, 0, 0, 0])


def test_a_repeated_prepared_send_is_stored_once_also_after_a_restart(tmp_path, clock):
    """A writer retrying a send whose answer was lost: its (producer id, sequence) stamp."""
    data = tmp_path / "data"

    def send(endpoint, sequence):
        request = broker_pb2.SendRequest(topic="dedup", queue_id=0, transaction_id="retrying", producer_id="p1",
                                         sequence=sequence, inner_batch=broker_pb2.InnerBatch(
                                             payload=encode_messages([(b"x", None, None, None, None)] * 3, "rmq",
                                                                     "none"), count=3, codec=broker_pb2.CODEC_RMQ))
        with grpc.insecure_channel(endpoint) as channel:
            return broker_pb2_grpc.MessagingStub(channel).Send(request)

    broker = start_broker(data, clock)
    try:
        with Admin(broker.endpoint) as admin:
            admin.create_topic("dedup", 1, "BatchCQ")
        first, again = send(broker.endpoint, 0), send(broker.endpoint, 0)
        assert (first.duplicate, again.duplicate, again.count, again.base_offset) == (False, True, 3, -1)
        assert not send(broker.endpoint, 1).duplicate
    finally:
        broker.stop(grace=1.0)
    broker = start_broker(data, clock)
    try:
        assert send(broker.endpoint, 1).duplicate and send(broker.endpoint, 0).duplicate
        with Transactions(broker.endpoint) as txns:
            outcome, = txns.commit(["retrying"]).transactions
        assert (outcome.batch_count, outcome.message_count) == (2, 6)
        wait_offsets(broker.endpoint, "dedup", [6])
    finally:
        broker.stop(grace=1.0)
