"""rmq-admin topic: create, list, describe, route, update, delete (mqadmin updateTopic,
topicList, topicStatus, topicRoute, deleteTopic; kafka-topics.sh --create / --list /
--describe / --alter / --delete)."""

from __future__ import annotations

from rmq_spark.cli.output import with_broker
from rmq_spark.client.admin import Admin
from rmq_spark.errors import TopicNotFoundError
from rmq_spark.structs import perm_text


def add_commands(commands, after) -> None:
    topic = commands.add_parser("topic", help="create, change, list and describe topics").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    create = topic.add_parser("create", help="create a topic", parents=[after])
    create.add_argument("name")
    create.add_argument("--queues", type=int, required=True, help="number of queues (per broker)")
    create.add_argument("--type", default="BatchCQ", choices=["BatchCQ", "SimpleCQ"], help="index type")
    create.set_defaults(run=_create)
    topic.add_parser("list", help="list topics", parents=[after]).set_defaults(run=_list)
    describe = topic.add_parser("describe", help="per-queue min / max offsets", parents=[after])
    describe.add_argument("name")
    describe.set_defaults(run=_describe)
    route = topic.add_parser("route", help="the brokers that serve a topic, their queues and permission",
                             parents=[after])
    route.add_argument("name")
    route.set_defaults(run=_route)
    update = topic.add_parser("update", help="change a topic's queue count or permission", parents=[after])
    update.add_argument("name")
    update.add_argument("--queues", type=int, help="its queues (per broker): more add queues; fewer leave those "
                                                   "past the count unserved, their messages kept")
    update.add_argument("--perm", choices=["rw", "r", "w"], help="rw: read and write; r: refuse sends; w: refuse "
                                                                 "reads (mqadmin -p 6, 4, 2)")
    update.set_defaults(run=_update)
    delete = topic.add_parser("delete", help="delete a topic", parents=[after])
    delete.add_argument("name")
    delete.set_defaults(run=_delete)


_COLUMNS = ["name", "queues", "type", "perm"]


def _row(topic) -> dict:
    return {"name": topic.name, "queues": topic.queue_count, "type": topic.queue_type.value,
            "perm": perm_text(topic.perm)}


def _create(admin: Admin, args):
    return [_row(admin.create_topic(args.name, args.queues, args.type))], _COLUMNS


def _list(admin: Admin, args):
    return [_row(t) for t in admin.list_topics()], _COLUMNS[:3]


def _describe(admin: Admin, args):
    _topic, queues = admin.describe_topic(args.name)
    rows = [{"broker": q.broker, "queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
             "messages": q.messages} for q in queues]
    return rows, with_broker(rows, ["queue_id", "min_offset", "max_offset", "messages"])


def _route(admin: Admin, args):
    rows = [{"broker": b.broker, "address": b.address, "read_queues": b.read_queues,
             "write_queues": b.write_queues, "perm": perm_text(b.perm)} for b in admin.topic_route(args.name)]
    return rows, ["broker", "address", "read_queues", "write_queues", "perm"]


def _update(admin: Admin, args):
    return [_row(admin.update_topic(args.name, queue_count=args.queues, perm=args.perm))], _COLUMNS


def _delete(admin: Admin, args):
    if not admin.delete_topic(args.name):
        raise TopicNotFoundError(f"topic {args.name!r} does not exist, so nothing was deleted (rmq-admin topic list "
                                 "shows the topics)")
    return [{"name": args.name, "deleted": True}], ["name", "deleted"]
