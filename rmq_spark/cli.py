"""rmq-admin: topics, consumer groups, messages, transactions and the state of a broker, as
tables for people or --json; a failure exits non-zero (2: a mistake in the command) with one line.

    rmq-admin --endpoint 127.0.0.1:10911 topic create orders --queues 16 --type BatchCQ
    rmq-admin --name-server 127.0.0.1:9876 topic describe orders   # any RocketMQ cluster
    rmq-admin topic list | topic describe orders | topic delete orders [--json]
    rmq-admin group list | group offsets my-group
    rmq-admin group reset-offsets my-group --topic orders --to-earliest [--dry-run]   # or --to-latest,
                                              # --to-datetime 2026-11-27T10:00:00Z, --to-offset 42
    rmq-admin message send orders [--file F] [--keys K] [--tags T] < lines   # a message a line
    rmq-admin message peek orders [--queue 0 --offset 10 --count 5]
    rmq-admin broker stats | broker corrupted
    rmq-admin transaction list [ID ...] | transaction rollback ID ... | transaction sink SINK BATCH
    rmq-admin sink list | sink release SINK                  # exactly-once writers' sink ids (an admin's)
    RMQ_SECRET_KEY=... rmq-admin --access-key ops topic list            # a broker with ACLs
    rmq-admin --tls [--tls-ca CA.pem] [--tls-cert CLIENT.pem --tls-key CLIENT-KEY.pem] ...   # a TLS broker
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import json
import sys

from rmq_spark.client.admin import Admin
from rmq_spark.client.transactions import Transactions
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import ConfigError, RmqError, TopicNotFoundError
from rmq_spark.structs import SECRET_KEY_VARIABLE, Credentials

DEFAULT_ENDPOINT = "127.0.0.1:10911"


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        args.transport = _transport(p, args)
        with Admin(args.endpoint if args.name_server is None else None, args.transport,
                   name_server=args.name_server) as admin:
            rows, columns = args.run(admin, args)
    except (RmqError, OSError) as err:
        print(f"rmq-admin: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(_table(rows, columns))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's, saying a misspelled command's nearest name ("did you mean") and every
    mistake in one line."""

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            close = difflib.get_close_matches(value, list(action.choices), n=1, cutoff=0.5)
            names = ", ".join(action.choices)
            raise argparse.ArgumentError(None, f"{value!r} is not a command here" +
                                         (f": did you mean {close[0]!r}?" if close else f" (use one of {names})"))

    def error(self, message):
        unknown = message.partition("unrecognized arguments: ")[2].split()
        flags = [flag for flag in unknown if flag.startswith("--")]
        names = sorted(flag[2:] for flag in self._flags())  # compared without the "--" all share
        close = difflib.get_close_matches(flags[0][2:], names, n=1, cutoff=0.6) if flags else []
        if close:
            message += f": did you mean --{close[0]}?"
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def _flags(self) -> set[str]:
        """The long options of this parser and of its commands' parsers."""
        flags = set()
        for action in self._actions:
            flags.update(option for option in action.option_strings if option.startswith("--"))
            for command in (action.choices or {}).values() if isinstance(action.choices, dict) else ():
                flags |= command._flags()
        return flags


def version() -> str:
    """The installed package's version; "unknown" when run from a source tree not installed."""
    from importlib import metadata

    try:
        return metadata.version("rocketmq-batch-spark")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rmq-admin", description="Administer a broker_sim broker, or a RocketMQ cluster through "
                                                   "its name servers.")
    parser.add_argument("--version", action="version", version=f"rmq-admin {version()}")
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
    commands = parser.add_subparsers(dest="noun", required=True, metavar="COMMAND")

    topic = commands.add_parser("topic", help="create, list and describe topics").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
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

    group = commands.add_parser("group", help="consumer groups and their offsets").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    group.add_parser("list", help="the groups the brokers know, with their live consumers",
                     parents=[after]).set_defaults(run=_group_list)
    offsets = group.add_parser("offsets", help="committed offsets and lag of a group", parents=[after])
    offsets.add_argument("group")
    offsets.set_defaults(run=_group_offsets)
    reset = group.add_parser("reset-offsets", help="move a group's offsets of a topic (refused while the group has "
                                                   "live consumers)", parents=[after])
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each queue's first stored offset")
    to.add_argument("--to-latest", action="store_true", help="each queue's max offset (skip what is stored)")
    to.add_argument("--to-datetime", metavar="ISO", type=_timestamp_ms,
                    help="the first offset stored at or after this time, as 2026-11-27T10:00:00Z (UTC unless it "
                         "names its offset)")
    to.add_argument("--to-offset", metavar="N", type=int, help="offset N of every queue (kept within each queue's "
                                                               "stored offsets)")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets, commit nothing")
    reset.set_defaults(run=_reset_offsets)

    message = commands.add_parser("message", help="send and peek at messages").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    send = message.add_parser("send", help="send each line of stdin (or --file) as a message", parents=[after])
    send.add_argument("topic")
    send.add_argument("--file", help="read the lines from this file rather than stdin")
    send.add_argument("--keys", help="the keys of every message (space-separated)")
    send.add_argument("--tags", help="the tag of every message")
    send.add_argument("--key-separator", metavar="SEP",
                      help="each line is KEYS SEP BODY: the keys of that message come before the first SEP")
    send.set_defaults(run=_send)
    peek = message.add_parser("peek", help="the first messages of a topic (or of a queue from an offset)",
                              parents=[after])
    peek.add_argument("topic")
    peek.add_argument("--queue", type=int, help="only this queue")
    peek.add_argument("--offset", type=int, help="with --queue: start at this offset (default: the first stored)")
    peek.add_argument("--count", type=int, default=10, help="messages to show in all (default 10)")
    peek.set_defaults(run=_peek)

    broker = commands.add_parser("broker", help="the broker's state").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    broker.add_parser("stats", help="log positions, dispatch lag, counters, damaged records",
                      parents=[after]).set_defaults(run=_broker_stats)
    broker.add_parser("corrupted", help="damaged records the broker keeps and never serves",
                      parents=[after]).set_defaults(run=_corrupted)

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
    if not admin.delete_topic(args.name):
        raise TopicNotFoundError(f"topic {args.name!r} does not exist, so nothing was deleted (rmq-admin topic list "
                                 "shows the topics)")
    return [{"name": args.name, "deleted": True}], ["name", "deleted"]


def _group_offsets(admin: Admin, args):
    committed = admin.group_offsets(args.group)
    topics = sorted({o.topic for o in committed})
    latest = {(q.topic, q.broker, q.queue_id): q.max_offset for qs in admin.offsets(topics).values() for q in qs}
    rows = []
    for o in committed:
        end = latest.get((o.topic, o.broker, o.queue_id), o.offset)
        rows.append({**dataclasses.asdict(o), "max_offset": end, "lag": max(0, end - o.offset)})
    return rows, _with_broker(rows, ["group", "topic", "queue_id", "offset", "max_offset", "lag"], at=2)


def _send(admin: Admin, args):
    from rmq_spark.producer import Producer  # here: pyarrow is loaded for the message commands only
    from rmq_spark.structs import Message

    if args.file:
        try:
            with open(args.file, "rb") as lines:
                messages = [_message(args, line) for line in lines]
        except OSError as err:
            raise ConfigError(f"cannot read --file {args.file}: {err.strerror or err}") from None
    else:
        messages = [_message(args, line) for line in sys.stdin.buffer]
    queues: dict[tuple[str, int], dict] = {}
    with _client(Producer, args) as producer:  # each message to the queue the selector picks (by its keys)
        futures = [producer.send_async(Message(args.topic, body, args.tags, keys)) for body, keys in messages]
        producer.flush()
        for future in futures:
            sent = future.result()
            row = queues.setdefault((sent.broker, sent.queue_id), {
                "topic": args.topic, "broker": sent.broker, "queue_id": sent.queue_id, "messages": 0,
                "first_offset": sent.queue_offset})
            row["messages"] += 1
            row["last_offset"] = sent.queue_offset
    rows = [queues[key] for key in sorted(queues)]
    return rows, _with_broker(rows, ["topic", "queue_id", "messages", "first_offset", "last_offset"], at=1)


def _message(args, line: bytes) -> tuple[bytes, str | None]:
    """A line's body (without its line end) and keys."""
    body = line.rstrip(b"\r\n")
    if args.key_separator:
        keys, sep, rest = body.partition(args.key_separator.encode())
        if sep:
            return rest, keys.decode() or args.keys
    return body, args.keys


PREVIEW_CHARS = 60  # of a body, in a peek's table


def _peek(admin: Admin, args):
    from rmq_spark.consumer import RangeReader  # here: pyarrow is loaded for the message commands only
    from rmq_spark.structs import OffsetRange

    if args.offset is not None and args.queue is None:
        raise ConfigError("--offset is an offset of one queue: give --queue too")
    if args.count < 1:
        raise ConfigError(f"--count {args.count}: give 1 or more")
    _topic, queues = admin.describe_topic(args.topic)
    if args.queue is not None:
        queues = [q for q in queues if q.queue_id == args.queue]
        if not queues:
            raise ConfigError(f"topic {args.topic!r} has no queue {args.queue} (rmq-admin topic describe "
                              f"{args.topic} lists its queues)")
    ranges = []
    for q in queues:
        start = q.min_offset if args.offset is None else args.offset
        if start < q.min_offset:
            raise ConfigError(f"queue {q.queue_id} of topic {args.topic!r} holds offsets from {q.min_offset} (the "
                              f"ones before were deleted or never were): give --offset {q.min_offset} or more")
        if start < q.max_offset:
            ranges.append(OffsetRange(args.topic, q.queue_id, start, min(q.max_offset, start + args.count), q.broker))
    rows = []
    with _client(RangeReader, args, on_data_loss="fail") as reader:
        for batch in reader.read(ranges):
            for m in batch.to_pylist():
                body = m["body"]
                text = body.decode("utf-8", "replace")
                rows.append({"broker": m["broker"] or "", "queue_id": m["queue_id"], "offset": m["queue_offset"],
                             "keys": m["keys"] or "", "tags": m["tags"] or "",
                             "time": m["store_timestamp"].isoformat(timespec="milliseconds"),
                             "bytes": len(body), "body": text if args.json else _preview(text)})
    rows = sorted(rows, key=lambda r: (r["broker"], r["queue_id"], r["offset"]))[:args.count]
    return rows, _with_broker(rows, ["queue_id", "offset", "keys", "tags", "time", "bytes", "body"])


def _preview(text: str) -> str:
    text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 3] + "..."


def _client(kind, args, **options):
    """A Producer or RangeReader to where the flags point."""
    if args.name_server is not None:
        return kind(name_server=args.name_server, transport=args.transport, **options)
    return kind(args.endpoint, transport=args.transport, **options)


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO time (for example 2026-11-27T10:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def _group_list(admin: Admin, args):
    rows = [{"group": g.name, "consumers": len(g.consumers), "consumer_ids": " ".join(g.consumers)}
            for g in admin.groups()]
    return rows, ["group", "consumers", "consumer_ids"]


def _reset_offsets(admin: Admin, args):
    to = next(name for name in ("earliest", "latest", "datetime", "offset")
              if getattr(args, f"to_{name}") not in (None, False))
    resets = admin.reset_group_offsets(args.group, args.topic, to=to, timestamp_ms=args.to_datetime,
                                       offset=args.to_offset, dry_run=args.dry_run)
    rows = [{**dataclasses.asdict(r), "committed": not args.dry_run} for r in resets]
    return rows, _with_broker(rows, ["group", "topic", "queue_id", "offset", "new_offset", "committed"], at=2)


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
    cells = [["-" if row[c] is None else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


if __name__ == "__main__":
    sys.exit(main())
