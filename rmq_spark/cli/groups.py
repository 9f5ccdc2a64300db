"""rmq-admin group: list, offsets (and lag), connections, reset-offsets, delete (mqadmin
consumerProgress, consumerConnection, resetOffsetByTime, deleteSubGroup;
kafka-consumer-groups.sh --list / --describe / --reset-offsets / --delete)."""

from __future__ import annotations

import dataclasses
import sys
import time

from rmq_spark.cli.arguments import duration_ms, timestamp_ms
from rmq_spark.cli.output import with_broker
from rmq_spark.client.admin import Admin
from rmq_spark.errors import GroupNotFoundError


def add_commands(commands, after) -> None:
    group = commands.add_parser("group", help="consumer groups and their offsets").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    group.add_parser("list", help="the groups the brokers know, with their live consumers",
                     parents=[after]).set_defaults(run=_list)
    offsets = group.add_parser("offsets", help="committed offsets and lag of a group", parents=[after])
    offsets.add_argument("group")
    offsets.set_defaults(run=_offsets)
    connections = group.add_parser("connections", help="the consumers of a group connected now: address, language, "
                                                       "version", parents=[after])
    connections.add_argument("group")
    connections.set_defaults(run=_connections)
    reset = group.add_parser("reset-offsets", help="plan moving a group's offsets of a topic; --execute commits the "
                                                   "plan (refused while the group has live consumers)",
                             parents=[after])
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each queue's first stored offset")
    to.add_argument("--to-latest", action="store_true", help="each queue's max offset (skip what is stored)")
    to.add_argument("--to-datetime", metavar="ISO", type=timestamp_ms,
                    help="the first offset stored at or after this time, as 2026-11-27T10:00:00Z (UTC unless it "
                         "names its offset)")
    to.add_argument("--by-duration", metavar="DURATION", type=duration_ms,
                    help="the first offset stored at or after this long ago: PT1H30M (as Kafka's), or 90s, 15m, 1h, "
                         "2d")
    to.add_argument("--to-offset", metavar="N", type=int, help="offset N of every queue")
    to.add_argument("--shift-by", metavar="N", type=int, help="each queue's committed offset moved by N (negative: "
                                                              "back), from the first stored where none is")
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets (without it: only the plan, as "
                                                            "Kafka's tool)")
    run.add_argument("--dry-run", action="store_true", help="only the plan (the default)")
    reset.set_defaults(run=_reset_offsets)
    delete = group.add_parser("delete", help="forget a group: its offsets and settings (refused while it has live "
                                             "consumers)", parents=[after])
    delete.add_argument("group")
    delete.set_defaults(run=_delete)


def _list(admin: Admin, args):
    rows = [{"group": g.name, "consumers": len(g.consumers), "consumer_ids": " ".join(g.consumers)}
            for g in admin.groups()]
    return rows, ["group", "consumers", "consumer_ids"]


def _offsets(admin: Admin, args):
    committed = admin.group_offsets(args.group)
    topics = sorted({o.topic for o in committed})
    latest = {(q.topic, q.broker, q.queue_id): q.max_offset for qs in admin.offsets(topics).values() for q in qs}
    rows = []
    for o in committed:
        end = latest.get((o.topic, o.broker, o.queue_id), o.offset)
        rows.append({**dataclasses.asdict(o), "max_offset": end, "lag": max(0, end - o.offset)})
    return rows, with_broker(rows, ["group", "topic", "queue_id", "offset", "max_offset", "lag"], at=2)


def _connections(admin: Admin, args):
    rows = [{"broker": c.broker, "client_id": c.client_id, "address": c.address, "language": c.language,
             "version": c.version, "subscriptions": " ".join(f"{t}:{e}" for t, e in c.subscriptions)}
            for c in admin.consumer_connections(args.group)]
    return rows, with_broker(rows, ["client_id", "address", "language", "version", "subscriptions"])


def _reset_offsets(admin: Admin, args):
    timestamp = args.to_datetime
    if args.by_duration is not None:
        timestamp = int(time.time() * 1000) - args.by_duration
    to = ("datetime" if timestamp is not None else "offset" if args.to_offset is not None
          else "shift" if args.shift_by is not None else "earliest" if args.to_earliest else "latest")
    resets = admin.reset_group_offsets(args.group, args.topic, to=to, timestamp_ms=timestamp, offset=args.to_offset,
                                       shift_by=args.shift_by, dry_run=not args.execute)
    rows = [{**dataclasses.asdict(r), "committed": args.execute} for r in resets]
    if not args.execute:
        print("rmq-admin: a plan only, nothing committed: add --execute to commit it", file=sys.stderr)
    return rows, with_broker(rows, ["group", "topic", "queue_id", "offset", "new_offset", "committed"], at=2)


def _delete(admin: Admin, args):
    if not admin.delete_group(args.group):
        raise GroupNotFoundError(f"no broker knows group {args.group!r} (no offsets, consumers or retry topic), so "
                                 "nothing was deleted (rmq-admin group list shows the groups)")
    return [{"group": args.group, "deleted": True}], ["group", "deleted"]
