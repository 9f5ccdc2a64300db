"""rmq-admin transaction and sink: broker_sim's transactions of batches and the sink ids of
exactly-once writers."""

from __future__ import annotations

import dataclasses

from rmq_spark.client.admin import Admin
from rmq_spark.client.transactions import Transactions


def add_commands(commands, after) -> None:
    txn = commands.add_parser("transaction", help="prepared transactions and sink batches").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    listing = txn.add_parser("list", help="open transactions, or the ones named", parents=[after])
    listing.add_argument("ids", nargs="*")
    listing.set_defaults(run=_transactions)
    rollback = txn.add_parser("rollback", help="roll transactions back", parents=[after])
    rollback.add_argument("ids", nargs="+")
    rollback.set_defaults(run=_rollback)
    sink = txn.add_parser("sink", help="whether a sink batch was committed", parents=[after])
    sink.add_argument("sink_id")
    sink.add_argument("batch_id", type=int)
    sink.set_defaults(run=_sink_batch)

    sinks = commands.add_parser("sink", help="sink ids of exactly-once writers (an admin's)").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    sinks.add_parser("list", help="every sink: its owner, latest batch, batches remembered",
                     parents=[after]).set_defaults(run=_sinks)
    release = sinks.add_parser("release", help="forget who owns a sink, so that the account granted it may commit "
                                               "under it (its batches stay)", parents=[after])
    release.add_argument("sink_id")
    release.set_defaults(run=_release_sink)


_TXN_COLUMNS = ["transaction_id", "state", "batch_count", "message_count", "created_ms", "last_prepared_ms",
                "expires_ms", "ended_ms", "expired"]


def _transactions(admin: Admin, args):
    with Transactions(args.endpoint, args.transport) as txns:
        return [_txn_row(t) for t in txns.list(args.ids)], _TXN_COLUMNS


def _rollback(admin: Admin, args):
    with Transactions(args.endpoint, args.transport) as txns:
        outcomes = txns.rollback(args.ids)
    return [_txn_row(o) for o in outcomes], ["transaction_id", "state", "changed", "message_count"]


def _sink_batch(admin: Admin, args):
    with Transactions(args.endpoint, args.transport) as txns:
        status = txns.sink_batch(args.sink_id, args.batch_id)
    row = {**dataclasses.asdict(status), "transaction_ids": " ".join(status.transaction_ids)}
    return [row], ["sink_id", "batch_id", "committed", "transaction_ids", "committed_ms", "latest_batch_id"]


def _sinks(admin: Admin, args):
    with Transactions(args.endpoint, args.transport) as txns:
        rows = [dataclasses.asdict(sink) for sink in txns.sinks()]
    return rows, ["sink_id", "owner", "latest_batch_id", "batches_kept", "committed_ms"]


def _release_sink(admin: Admin, args):
    with Transactions(args.endpoint, args.transport) as txns:
        owner = txns.release_sink(args.sink_id)
    return [{"sink_id": args.sink_id, "released": owner is not None, "owner": owner or ""}], [
        "sink_id", "released", "owner"]


def _txn_row(item) -> dict:
    return {**dataclasses.asdict(item), "state": item.state.value}
