"""rmq-admin cluster and broker: the cluster's brokers, a broker's runtime figures, broker_sim's
stats and damaged records (mqadmin clusterList, brokerStatus)."""

from __future__ import annotations

import dataclasses

from rmq_spark.client.admin import Admin


def add_commands(commands, after) -> None:
    cluster = commands.add_parser("cluster", help="the cluster's brokers").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    cluster.add_parser("list", help="every broker: its cluster, name and address",
                       parents=[after]).set_defaults(run=_cluster_list)
    broker = commands.add_parser("broker", help="a broker's state").add_subparsers(
        dest="verb", required=True, metavar="COMMAND")
    status = broker.add_parser("status", help="a broker's runtime figures, as it reports them (through name "
                                              "servers: RocketMQ's brokerStatus)", parents=[after])
    status.add_argument("broker", nargs="?", default="", help="its name (default: the cluster's only broker)")
    status.set_defaults(run=_broker_status)
    broker.add_parser("stats", help="broker_sim's log positions, dispatch lag, counters, damaged records",
                      parents=[after]).set_defaults(run=_broker_stats)
    broker.add_parser("corrupted", help="damaged records broker_sim keeps and never serves",
                      parents=[after]).set_defaults(run=_corrupted)


def _cluster_list(admin: Admin, args):
    rows = [dataclasses.asdict(b) for b in admin.brokers()]
    return rows, ["cluster", "name", "address"]


def _broker_status(admin: Admin, args):
    return [{"name": name, "value": value} for name, value in admin.broker_status(args.broker).items()], [
        "name", "value"]


def _broker_stats(admin: Admin, args):
    stats = dataclasses.asdict(admin.broker_stats())
    del stats["corrupted"]  # listed by `broker corrupted`
    return [{"stat": name, "value": value} for name, value in stats.items()], ["stat", "value"]


_CORRUPTED_COLUMNS = ["commitlog_offset", "size", "topic", "queue_id", "first_offset", "end_offset", "reason",
                      "found_by"]


def _corrupted(admin: Admin, args):
    return [dataclasses.asdict(r) for r in admin.broker_stats().corrupted], _CORRUPTED_COLUMNS
