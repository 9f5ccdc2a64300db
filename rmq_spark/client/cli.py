"""rmq-admin: topics and consumer group offsets of a broker, as tables for people or --json.

    rmq-admin --endpoint 127.0.0.1:10911 topic create orders --queues 16 --type BatchCQ
    rmq-admin --name-server 127.0.0.1:9876 topic describe orders   # any RocketMQ cluster
    rmq-admin topic list | topic describe orders | group offsets my-group [--json]
    rmq-admin broker stats | broker corrupted
    rmq-admin transaction list [ID ...] | transaction rollback ID ... | transaction sink SINK BATCH
    RMQ_SECRET_KEY=... rmq-admin --access-key ops topic list            # a broker with ACLs
    rmq-admin --tls [--tls-ca CA.pem] [--tls-cert CLIENT.pem --tls-key CLIENT-KEY.pem] ...   # a TLS broker
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..errors import RmqError
from ..structs import SECRET_KEY_VARIABLE, Credentials
from .admin import Admin
from .transactions import Transactions
from .transport import TransportConfig

DEFAULT_ENDPOINT = "127.0.0.1:10911"


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        args.transport = _transport(p, args)
        with Admin(args.endpoint if args.name_server is None else None, args.transport,
                   name_server=args.name_server) as admin:
            rows, columns = args.run(admin, args)
    except RmqError as err:
        print(f"rmq-admin: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(_table(rows, columns))
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rmq-admin", description="Administer a broker_sim broker, or a RocketMQ "
                                                                  "cluster through its name servers.")
    parser.add_argument("--endpoint", default=DEFAULT_ENDPOINT,
                        help=f"broker_sim's HOST:PORT (default {DEFAULT_ENDPOINT})")
    parser.add_argument("--name-server", help="instead: RocketMQ's name servers, HOST:PORT[;HOST:PORT]")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--access-key", help="for brokers with ACLs: the account that signs the calls; its secret "
                                             f"comes from the environment variable {SECRET_KEY_VARIABLE} (kept out "
                                             "of the command line, which other users of the machine can see)")
    parser.add_argument("--tls", action="store_true", help="connect with TLS (a broker started with --tls-cert)")
    parser.add_argument("--tls-ca", metavar="FILE",
                        help="with --tls: trust the broker's certificate when this PEM CA signed it (default: the "
                             "system's CAs)")
    parser.add_argument("--tls-cert", metavar="FILE",
                        help="with --tls: this client's PEM certificate, for a broker that requires one (mutual TLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="with --tls-cert: its PEM private key, unencrypted")
    # Every command takes --json after its own arguments too, as the usage line shows. SUPPRESS keeps a
    # command's parser from resetting a --json given before the command.
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for machines")
    commands = parser.add_subparsers(dest="noun", required=True)

    topic = commands.add_parser("topic", help="create, list and describe topics").add_subparsers(
        dest="verb", required=True)
    create = topic.add_parser("create", help="create a topic", parents=[after])
    create.add_argument("name")
    create.add_argument("--queues", type=int, required=True, help="number of queues")
    create.add_argument("--type", default="BatchCQ", choices=["BatchCQ", "SimpleCQ"], help="index type")
    create.set_defaults(run=_create)
    topic.add_parser("list", help="list topics", parents=[after]).set_defaults(run=_list)
    describe = topic.add_parser("describe", help="per-queue min / max offsets", parents=[after])
    describe.add_argument("name")
    describe.set_defaults(run=_describe)
    delete = topic.add_parser("delete", help="delete a topic", parents=[after])
    delete.add_argument("name")
    delete.set_defaults(run=_delete)

    group = commands.add_parser("group", help="consumer group offsets").add_subparsers(dest="verb", required=True)
    offsets = group.add_parser("offsets", help="committed offsets and lag of a group", parents=[after])
    offsets.add_argument("group")
    offsets.set_defaults(run=_group_offsets)

    broker = commands.add_parser("broker", help="the broker's state").add_subparsers(dest="verb", required=True)
    broker.add_parser("stats", help="log positions, dispatch lag, counters, damaged records",
                      parents=[after]).set_defaults(run=_broker_stats)
    broker.add_parser("corrupted", help="damaged records the broker keeps and never serves",
                      parents=[after]).set_defaults(run=_corrupted)

    txn = commands.add_parser("transaction", help="prepared transactions and sink batches").add_subparsers(
        dest="verb", required=True)
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
    return parser


def _create(admin: Admin, args):
    topic = admin.create_topic(args.name, args.queues, args.type)
    return [_topic_row(topic)], ["name", "queues", "type"]


def _list(admin: Admin, args):
    return [_topic_row(t) for t in admin.list_topics()], ["name", "queues", "type"]


def _describe(admin: Admin, args):
    _topic, queues = admin.describe_topic(args.name)
    rows = [{"broker": q.broker, "queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
             "messages": q.messages} for q in queues]
    return rows, _with_broker(rows, ["queue_id", "min_offset", "max_offset", "messages"])


def _delete(admin: Admin, args):
    return [{"name": args.name, "deleted": admin.delete_topic(args.name)}], ["name", "deleted"]


def _group_offsets(admin: Admin, args):
    committed = admin.group_offsets(args.group)
    topics = sorted({o.topic for o in committed})
    latest = {(q.topic, q.broker, q.queue_id): q.max_offset for qs in admin.offsets(topics).values() for q in qs}
    rows = []
    for o in committed:
        end = latest.get((o.topic, o.broker, o.queue_id), o.offset)
        rows.append({**dataclasses.asdict(o), "max_offset": end, "lag": max(0, end - o.offset)})
    return rows, _with_broker(rows, ["group", "topic", "queue_id", "offset", "max_offset", "lag"], at=2)


def _broker_stats(admin: Admin, args):
    stats = dataclasses.asdict(admin.broker_stats())
    del stats["corrupted"]  # listed by `broker corrupted`
    return [{"stat": name, "value": value} for name, value in stats.items()], ["stat", "value"]


_CORRUPTED_COLUMNS = ["commitlog_offset", "size", "topic", "queue_id", "first_offset", "end_offset", "reason",
                      "found_by"]


def _corrupted(admin: Admin, args):
    return [dataclasses.asdict(r) for r in admin.broker_stats().corrupted], _CORRUPTED_COLUMNS


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


def _txn_row(item) -> dict:
    return {**dataclasses.asdict(item), "state": item.state.value}


def _with_broker(rows: list[dict], columns: list[str], at: int = 0) -> list[str]:
    """The table's columns, with the broker's where a row names one (through name servers)."""
    if not any(row.get("broker") for row in rows):
        for row in rows:
            row.pop("broker", None)
        return columns
    return columns[:at] + ["broker"] + columns[at:]


def _topic_row(topic) -> dict:
    return {"name": topic.name, "queues": topic.queue_count, "type": topic.queue_type.value}


def _transport(p: argparse.ArgumentParser, args) -> TransportConfig:
    """TLS and credentials, from the flags (and RMQ_SECRET_KEY)."""
    files = [flag for flag, value in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                                      ("--tls-key", args.tls_key)) if value]
    if files and not args.tls:
        p.error(f"{' and '.join(files)} apply to TLS connections: give --tls too")
    if bool(args.tls_cert) != bool(args.tls_key):
        p.error("a client certificate needs both --tls-cert and --tls-key")
    credentials = Credentials.from_environment(args.access_key) if args.access_key else None
    return TransportConfig(tls=args.tls, tls_ca_file=args.tls_ca, tls_cert_file=args.tls_cert,
                           tls_key_file=args.tls_key, credentials=credentials)


def _table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


if __name__ == "__main__":
    sys.exit(main())
