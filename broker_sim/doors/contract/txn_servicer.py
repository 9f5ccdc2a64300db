"""The Transactions service (txn.proto): translates protobuf <-> BrokerCore transaction calls.
Prepared sends arrive through Messaging.Send with ``transaction_id`` set (servicers.py)."""

from __future__ import annotations

from broker_sim.core import BrokerCore, TxnState
from broker_sim.doors.contract.servicers import enum_name
from broker_sim.doors.grpc_acl import caller, named_sinks
from broker_sim.doors.grpc_common import invalid, translated
from rmq_wire.contract import txn_pb2 as pb
from rmq_wire.contract import txn_pb2_grpc as pb_grpc

_STATES = {TxnState.OPEN: pb.TXN_OPEN, TxnState.COMMITTING: pb.TXN_COMMITTING, TxnState.COMMITTED: pb.TXN_COMMITTED,
           TxnState.ROLLED_BACK: pb.TXN_ROLLED_BACK}


class TransactionsServicer(pb_grpc.TransactionsServicer):
    def __init__(self, core: BrokerCore):
        self._core = core

    @translated
    def EndTransaction(self, request, context):
        refs = [(t.id, t.message_count) for t in request.transactions]
        has_sink = request.HasField("sink_batch")
        if request.action == pb.TXN_COMMIT:
            sink = (request.sink_batch.sink_id, request.sink_batch.batch_id) if has_sink else None
            result = self._core.commit_transactions(refs, sink, caller(), has_sink and sink[0] in named_sinks())
        elif request.action == pb.TXN_ROLLBACK:
            if has_sink:
                raise invalid("a rollback records no sink batch: leave sink_batch unset")
            result = self._core.rollback_transactions(refs, caller())
        else:
            raise invalid(f"action {enum_name(pb.TransactionAction, request.action)}: set TXN_COMMIT or TXN_ROLLBACK")
        response = pb.EndTransactionResponse(transactions=[
            pb.TransactionOutcome(id=o.id, state=_STATES[o.state], changed=o.changed, batch_count=o.batches,
                                  message_count=o.messages) for o in result.outcomes])
        if result.replayed:
            response.sink_batch_replayed = True
        if result.sink_batch is not None:
            response.sink_batch_transaction_ids.extend(result.sink_batch.transaction_ids)
        return response

    @translated
    def GetSinkBatch(self, request, context):
        record, latest = self._core.sink_batch(request.sink_id, request.batch_id, caller(),
                                               request.sink_id in named_sinks())
        if record is None:
            return pb.GetSinkBatchResponse(committed=False, latest_batch_id=latest)
        return pb.GetSinkBatchResponse(committed=True, transaction_ids=record.transaction_ids,
                                       committed_ms=record.committed_ms, latest_batch_id=latest)

    @translated
    def ListTransactions(self, request, context):
        ids = list(request.ids)
        found = self._core.transaction_infos(ids, caller())
        infos = []
        for txn_id, (txn, expires_ms) in zip(ids or [t.id for t, _ in found], found):
            if txn is None:
                infos.append(pb.TransactionInfo(id=txn_id))
                continue
            infos.append(pb.TransactionInfo(
                id=txn.id, state=_STATES[txn.state], batch_count=txn.batch_count, message_count=txn.message_count,
                created_ms=txn.created_ms, last_prepared_ms=txn.last_ms, expires_ms=expires_ms,
                ended_ms=txn.ended_ms, expired=txn.expired))
        return pb.ListTransactionsResponse(transactions=infos)

    @translated
    def ListSinks(self, request, context):
        return pb.ListSinksResponse(sinks=[
            pb.SinkInfo(sink_id=sink_id, owner=owner, latest_batch_id=latest, batches_kept=kept, committed_ms=when)
            for sink_id, owner, latest, kept, when in self._core.sinks()])

    @translated
    def ReleaseSink(self, request, context):
        owner = self._core.release_sink(request.sink_id)
        return pb.ReleaseSinkResponse(released=owner is not None, owner=owner or "")
