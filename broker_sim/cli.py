"""`rmq-broker-sim`: run a broker until SIGTERM or SIGINT, then stop cleanly.

    rmq-broker-sim [--config broker.conf] --data-dir ./rmq-data --host 127.0.0.1 --port 10911
                   [--flush async|sync] [--dispatch serial|concurrent] [--remoting-port 9876
                   [--broker-name broker-a] [--cluster-name DefaultCluster] [--namesrv HOST:PORT[;HOST:PORT]]]
                   [--acl-file plain_acl.yml] [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
                   [--max-connections-per-ip N ...: the per-client limits, --help lists them]
                   [--log-level INFO] [--log-format text|json]

``--config FILE`` reads settings from key=value lines (RocketMQ's broker.conf keys where this
broker has the setting, the flags without their dashes for the rest: ``broker_conf``); flags
given on the command line win over it. It prints one line once it serves,
``rmq-broker-sim listening on HOST:PORT, data in DIR`` (``--port 0`` takes any free port: read
it there). Exit codes: 0 after a clean stop, 2 for a bad flag, said in one line (a TLS file or a
config file it cannot use too), a data directory in use by another broker, an address it cannot
listen on, state it cannot trust (lost or damaged: ``--accept-state-loss`` starts anyway and
logs the loss) or a disk too full to start.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import faulthandler
import io
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path

# gRPC's core logs its own line for failures this CLI reports in a sentence (a port in use):
# quiet unless asked for (GRPC_VERBOSITY=ERROR), before grpc is first imported.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from broker_sim import missing_dependencies  # noqa: E402

if missing_dependencies():  # an install without the extra `broker`: one sentence, not a traceback
    print(f"rmq-broker-sim: {missing_dependencies()}", file=sys.stderr)
    raise SystemExit(2)

from broker_sim import broker_conf  # noqa: E402
from broker_sim.acl import MAX_CLOCK_SKEW_S, AclConfigError, Guard  # noqa: E402
from broker_sim.common.logs import LOG_FORMATS, formatter  # noqa: E402
from broker_sim.core import AutoCreateTopics  # noqa: E402
from broker_sim.core.limits import ClientLimits  # noqa: E402
from broker_sim.doors import BROKER_NAME  # noqa: E402
from broker_sim.doors.checks import CheckSettings  # noqa: E402
from broker_sim.doors.tls import TlsOptions  # noqa: E402
from broker_sim.store import (  # noqa: E402
    DiskFullError,
    QueueType,
    StoreConfig,
    StoreError,
    full_at_start_sentence,
)
from broker_sim.txn.service import TransactionConfig  # noqa: E402
from rmq_wire.units import format_size, parse_size_bytes  # noqa: E402

PROG = "rmq-broker-sim"


def byte_size(text: str) -> int:
    """A byte count: 65536, 64k, 64KiB, 1g."""
    size = parse_size_bytes(text)
    if size is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write bytes (65536) or 64k, 16m, 1g")
    return size


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: use 1 to 65535, or 0 for any free port")
    return port


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 0")
    return value


def name_servers(text: str) -> tuple:
    addresses = tuple(a.strip() for a in text.split(";") if a.strip())
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{address!r} is not a name server address: write HOST:PORT, several "
                                             "separated by ';'")
    return addresses


# What each field of ClientLimits bounds, for its flag's help (ClientLimits documents them whole).
_LIMIT_HELP = {
    "max_connections_per_ip": "remoting connections one client address may hold open; past it a new connection's "
                              "first request is answered SYSTEM_BUSY with a remark, then it is closed",
    "max_connections": "remoting connections open from all clients, refused in the same way",
    "max_requests_in_flight_per_connection": "remoting requests of one connection served at once (suspended pulls "
                                             "included); past it a request is answered SYSTEM_BUSY at once",
    "max_requests_in_flight_per_ip": "gRPC calls of one client address served at once (both contracts; Telemetry "
                                     "and ReceiveMessage long polls not counted); past it a call is refused at once, "
                                     "RESOURCE_EXHAUSTED, or TOO_MANY_REQUESTS on RocketMQ 5's",
    "max_buffered_bytes_per_connection": "answers waiting for a remoting client that does not read them; past it "
                                         "the connection is closed",
    "write_buffer_high_bytes": "answers waiting above which a remoting connection's requests are not read",
    "write_buffer_low_bytes": "answers waiting below which that connection's requests are read again",
    "slow_reader_timeout_s": "a remoting client whose answers wait above the high mark this long is disconnected",
    "max_topics_created_per_client": "topics one client address may create and hold",
    "max_queues_created_per_client": "queues, in all its topics, one client address may create and hold",
    "max_topics": "topics on this broker in all, its own included; past it creations are refused",
    "max_queues": "queues on this broker in all, its own included",
    "memory_budget_bytes": "memory for what the broker buffers for clients, all together (answers waiting for slow "
                           "readers, unfinished remoting frames, parked pulls); past it the client holding the most "
                           "is cut off with a sentence and the others go on",
    "memory_budget_per_client_bytes": "what one client address may hold of that memory; past it its next buffer is "
                                      "refused",
    "idle_connection_timeout_s": "a remoting connection with no traffic and no request being served this long is "
                                 "closed",
    "unfinished_frame_timeout_s": "a remoting connection that began a request and has not finished it this long is "
                                  "closed",
    "max_parked_pulls": "long-polling pulls waiting for messages at once, per door; past it a pull is answered at once "
                        "(SYSTEM_BUSY on remoting)",
    "max_sinks_per_account": "sink ids (a Spark sink's exactly-once commits) one account owns; past it a new sink's "
                             "first commit is refused",
    "max_groups_per_client": "consumer groups one client brings into being (committing offsets, popping); past it a "
                             "new group is refused",
    "max_ranges_per_read": "offset ranges one ReadRanges call may name",
    "max_read_bytes_per_call": "stored bytes one ReadRanges call returns at most, whatever it asks (its reader asks "
                               "again for the rest)",
}
# Shorter names some limits are also known by.
_LIMIT_ALIASES = {"memory_budget_bytes": ("--memory-budget",)}


def _limit_type(name: str):
    return byte_size if "_bytes" in name else float if name.endswith("_s") else int


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    """A flag per ClientLimits field, named after it (--max-connections-per-ip)."""
    group = p.add_argument_group("per-client limits", "what one client may hold; past a limit the client gets an "
                                 "error saying which, and the broker serves the others")
    for field in dataclasses.fields(ClientLimits):
        kind = _limit_type(field.name)
        metavar = {byte_size: "BYTES", float: "SECONDS", int: "N"}[kind]
        shown = format_size(field.default) if kind is byte_size else f"{field.default:g}" if kind is float else \
            str(field.default)
        names = ("--" + field.name.replace("_", "-"), *_LIMIT_ALIASES.get(field.name, ()))
        group.add_argument(*names, dest=field.name, type=kind, metavar=metavar, default=field.default,
                           help=f"{_LIMIT_HELP[field.name]} (default: {shown})")


def limits_of(args: argparse.Namespace) -> ClientLimits:
    """The limits the flags give; ValueError saying which is wrong (a memory budget given above
    this machine's memory among them)."""
    limits = ClientLimits(**{field.name: getattr(args, field.name) for field in dataclasses.fields(ClientLimits)})
    memory = _machine_memory_bytes()
    given = limits.memory_budget_bytes != ClientLimits.memory_budget_bytes  # the default fits small machines too
    if memory and given and limits.memory_budget_bytes > memory:
        raise ValueError(f"--memory-budget {format_size(limits.memory_budget_bytes)} is more than this machine's "
                         f"memory ({format_size(memory)}): the budget bounds what the broker holds for clients before "
                         "it cuts the greediest off; give less than the machine has")
    return limits


def _machine_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not known here
        return None


class _Parser(argparse.ArgumentParser):
    """argparse with a wrong flag said in one line, not after the whole usage."""

    def error(self, message: str):
        message = re.sub(r"^argument (--[\w-]+)(/\S+)?: ", r"\1: ", message)
        unknown = re.match(r"unrecognized arguments: (--[\w-]+)", message)
        if unknown:
            close = difflib.get_close_matches(unknown.group(1), self._option_string_actions, n=1)
            message += f" (did you mean {close[0]}?)" if close else f" ({self.prog} --help lists the flags)"
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    """The flags, in groups: where to start first (--config, --data-dir, the ports), then the rest."""
    p = _Parser(prog=PROG, add_help=False,
                usage="%(prog)s [--config FILE] [--data-dir DIR] [--host HOST] [--port PORT]\n"
                      "                      [--remoting-port PORT] [more flags below]",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                description="A local broker with RocketMQ's batch storage model.",
                epilog="Every flag is also a key of --config's file, without its dashes (remoting-port=9876,\n"
                       "accept-state-loss=true); [broker.conf: KEY] names RocketMQ's key for the same setting,\n"
                       "read too. deploy/broker.conf shows them.")
    start = p.add_argument_group("where to start")
    start.add_argument("-h", "--help", action="help", help="show this help and exit")
    start.add_argument("-c", "--config", type=Path, default=None, metavar="FILE",
                       help="read settings from FILE (-c as RocketMQ's mqbroker -c), key=value lines: RocketMQ's "
                            "broker.conf keys where this "
                            "broker has the setting, and these flags without their dashes for the rest; a RocketMQ "
                            "key with no effect here is warned about, an unknown key refused. Flags given on the "
                            "command line win over the file")
    start.add_argument("--data-dir", type=Path, default=Path("./rmq-data"), metavar="DIR",
                       help="where the commitlog, indexes and offsets live (default: ./rmq-data)")
    start.add_argument("--host", default="127.0.0.1",
                       help="address to listen on, both ports (default: 127.0.0.1; 0.0.0.0: every interface)")
    start.add_argument("--port", type=port_number, default=10911,
                       help="our gRPC contract (rmq_spark, Spark) and RocketMQ 5's gRPC clients (default: 10911; "
                            "0: any free port, printed at start)")
    start.add_argument("--remoting-port", type=port_number, default=None, metavar="PORT",
                       help="also serve RocketMQ's remoting protocol on this port, as a broker and a name server, so "
                            "that RocketMQ's own clients and mqadmin use this broker (0: any free port; default: "
                            "off)")
    start.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT",
                       help="serve the broker's metrics in Prometheus' text format at http://HOST:PORT/metrics "
                            "(HTTPS with --tls-cert), named as RocketMQ 5 names them; docs/operations.md lists "
                            "them (0: any free port, printed at start; default: off, nothing is counted)")
    start.add_argument("--metrics-host", default=None, metavar="HOST",
                       help="the address the metrics port listens on, to keep it on a private interface (default: "
                            "--host's)")
    start.add_argument("--metrics-auth", choices=["none", "tls-client", "admin"], default="none",
                       help="what a scrape must show: tls-client, a client certificate signed by --tls-client-ca "
                            "(HTTPS); admin, an admin account's access key and secret key of --acl-file as HTTP Basic "
                            "credentials (default: none)")

    store = p.add_argument_group("storage")
    store.add_argument("--flush", choices=["async", "sync"], default="async",
                       help="async: flush on an interval (default); sync: acknowledge writes once on disk")
    store.add_argument("--dispatch", choices=["serial", "concurrent"], default="serial",
                       help="how the indexes are built: serial, one thread (default); concurrent, chunks parsed by "
                            "worker processes and written in order (RocketMQ's RIP-52)")
    store.add_argument("--segment-bytes", type=byte_size, default=StoreConfig.segment_bytes, metavar="SIZE",
                       help=f"size of a commitlog segment file (default: {format_size(StoreConfig.segment_bytes)})")
    store.add_argument("--disk-reserve", type=byte_size, default=StoreConfig.disk_reserve_bytes, metavar="SIZE",
                       help="refuse sends while the data directory's disk has less free than this, so that indexes "
                            f"and metadata keep room (default: {format_size(StoreConfig.disk_reserve_bytes)})")
    store.add_argument("--accept-state-loss", action="store_true",
                       help="start even when state the broker had is missing or damaged (the consumer offsets "
                            "file, the pop or transaction RocksDB): what was lost is logged, a damaged RocksDB is "
                            "moved aside. Without it such a start is refused with a sentence naming the file "
                            "(default: off)")

    topics = p.add_argument_group("topics")
    topics.add_argument("--auto-create-topics", type=str.lower, choices=["true", "false"], default="true",
                        help="a send to a topic that does not exist creates it, as RocketMQ's autoCreateTopicEnable "
                             "(its default too; ACLs decide who may send there); false: topics are created by "
                             "rmq-admin or an Admin client only (default: true)")
    topics.add_argument("--default-topic-queues", type=positive_int, default=AutoCreateTopics.queue_count,
                        metavar="N", help="the queues of a topic a send creates (RocketMQ's producers ask for 4, "
                                          f"which they get; default: {AutoCreateTopics.queue_count})")
    topics.add_argument("--default-topic-type", choices=["BatchCQ", "SimpleCQ"],
                        default=AutoCreateTopics.queue_type.value,
                        help="the queue type of a topic a send creates (RocketMQ's is SimpleCQ; default: "
                             f"{AutoCreateTopics.queue_type.value}, the batch model's)")

    cluster = p.add_argument_group("RocketMQ cluster (with --remoting-port)")
    cluster.add_argument("--broker-name", default=BROKER_NAME, metavar="NAME",
                         help="this broker's name in routes (default: broker-a)")
    cluster.add_argument("--cluster-name", default="DefaultCluster", metavar="NAME",
                         help="its cluster's name (default: DefaultCluster)")
    cluster.add_argument("--namesrv", type=name_servers, default=(), metavar="HOST:PORT[;HOST:PORT]",
                         help="other name servers this broker registers with every 30 s, as RocketMQ's brokers "
                              "do: brokers registered with one name server make one cluster")

    txn = p.add_argument_group("transactions")
    txn.add_argument("--transaction-timeout-ms", type=int, default=TransactionConfig.timeout_ms, metavar="MS",
                     help="roll back a transaction with no batch prepared for this long (default: 900000, 15 min)")
    txn.add_argument("--transaction-check-interval-ms", type=positive_int, default=CheckSettings.interval_ms,
                     metavar="MS",
                     help="remoting: check a transactional message left unknown this long with its producer, again "
                          "every interval (default: 30000, RocketMQ's)")
    txn.add_argument("--transaction-check-max", type=positive_int, default=CheckSettings.check_max, metavar="N",
                     help="remoting: roll back a transactional message still unknown after this many checks, "
                          "whether or not a producer of its group could be asked (default: 15, RocketMQ's)")

    trust = p.add_argument_group("accounts and TLS")
    trust.add_argument("--acl-file", type=Path, default=None, metavar="FILE",
                       help="RocketMQ's plain_acl.yml: accounts (accessKey, secretKey), their permissions per topic "
                            "and group, admin accounts. Every request on every port must then be signed by an "
                            "account; the file is read again when it changes (default: off, anyone who reaches the "
                            "ports may do anything) [broker.conf: aclEnable=true with acl-file=FILE]")
    trust.add_argument("--acl-clock-skew-s", type=non_negative_int, default=MAX_CLOCK_SKEW_S, metavar="SECONDS",
                       help="a gRPC call's signed date may be this far from the broker's clock: older ones are "
                            f"refused as replays (default: {MAX_CLOCK_SKEW_S})")
    trust.add_argument("--tls-cert", type=Path, default=None, metavar="FILE",
                       help="serve TLS only, on the gRPC port and the remoting port, with this PEM certificate "
                            "(chain); give --tls-key too")
    trust.add_argument("--tls-key", type=Path, default=None, metavar="FILE",
                       help="the certificate's PEM private key, unencrypted")
    trust.add_argument("--tls-client-ca", type=Path, default=None, metavar="FILE",
                       help="mutual TLS: clients must present a certificate signed by a CA of this PEM file")

    _add_limit_flags(p)

    logs = p.add_argument_group("logging")
    logs.add_argument("--log-level", type=str.upper, default="INFO",
                      choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], help="(default: INFO)")
    logs.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                      help="text: a sentence a line, 'TIME LEVEL LOGGER: MESSAGE' (default); json: one JSON object "
                           "a line, with time (ISO-8601 UTC), level, logger, message, the subject's fields when the "
                           "line has one (topic, group, client, account, ...) and exception. Warnings that may "
                           "repeat at a high rate are written 5 times per 10 s, then one line counts those left out")
    broker_conf.annotate_help(p)
    return p


def _tls(p: argparse.ArgumentParser, args) -> TlsOptions | None:
    """The TLS files, read and checked; None without --tls-cert (a TlsConfigError is a ValueError)."""
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            p.error("--tls-client-ca asks clients for certificates over TLS: give --tls-cert and --tls-key too")
        return None
    if args.tls_cert is None or args.tls_key is None:
        p.error("TLS needs both --tls-cert and --tls-key (the broker's PEM certificate and its key)")
    return TlsOptions.load(args.tls_cert, args.tls_key, args.tls_client_ca)


def _auto_create_topics(args) -> AutoCreateTopics | None:
    if args.auto_create_topics == "false":
        return None
    return AutoCreateTopics(args.default_topic_queues, QueueType.parse(args.default_topic_type))


def _start_failure(err: Exception, bind_error: type) -> str | None:
    """The sentence for a start that failed with ``err``; None for a fault of the broker."""
    if isinstance(err, DiskFullError):
        return full_at_start_sentence(err)
    if isinstance(err, (StoreError, bind_error)):  # DataDirInUseError, StateLossError included
        return str(err)
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):  # a metadata file (the queue table)
        return full_at_start_sentence(f"{err.filename or 'a file'}: {err.strerror}")
    if type(err) is Exception and "No space left on device" in str(err):  # RocksDB's status, through rocksdict
        return full_at_start_sentence(f"the pop or transaction state (RocksDB) could not be written ({err})")
    return None


def arguments(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The settings of ``argv``: --config's file, if given, then the flags over it. A wrong one
    exits 2 with its sentence (``p.error``); a RocketMQ key with no effect here is warned about."""
    args = p.parse_args(argv)
    if args.config is not None:  # the file's settings, then the command line's flags over them
        try:
            conf = broker_conf.read(args.config, p)
        except broker_conf.BrokerConfigError as err:
            p.error(str(err))
        for warning in conf.warnings:
            print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        args = p.parse_args(conf.argv + argv)
        if conf.acl_enabled and args.acl_file is None:
            p.error(f"{args.config}: aclEnable=true needs the accounts' plain_acl.yml: add acl-file=PATH to the "
                    "file, or give --acl-file PATH")
    if args.remoting_port is not None and args.remoting_port == args.port != 0:
        p.error(f"--port and --remoting-port are both {args.port}: give each its own port (RocketMQ's listenPort "
                "is --remoting-port; --port serves gRPC)")
    return args


def broker_of(p: argparse.ArgumentParser, args: argparse.Namespace):
    """The broker the settings describe, not started: each setting built once, here, and handed
    to every part that uses it (a wrong one exits 2 with its sentence, ``p.error``)."""
    try:
        config = StoreConfig(segment_bytes=args.segment_bytes, flush_mode=args.flush, dispatch_mode=args.dispatch,
                             disk_reserve_bytes=args.disk_reserve)
        transaction_config = TransactionConfig(timeout_ms=args.transaction_timeout_ms)
        checks = CheckSettings(args.transaction_check_interval_ms, args.transaction_check_max)
        limits = limits_of(args)
        acl = Guard(args.acl_file, max_clock_skew_s=args.acl_clock_skew_s) if args.acl_file else None
        tls = _tls(p, args)
    except AclConfigError as err:
        p.error(f"--acl-file: {err}")
    except ValueError as err:
        p.error(str(err))
    data_dir = args.data_dir.resolve()
    if data_dir.exists() and not data_dir.is_dir():
        p.error(f"--data-dir {args.data_dir}: that is a file, not a directory: name the broker's data directory "
                "(it is made when it does not exist)")
    remoting = None
    if args.remoting_port is not None:
        from broker_sim.doors.remoting import RemotingOptions

        remoting = RemotingOptions(args.remoting_port, args.cluster_name, args.namesrv)
    elif args.namesrv:
        p.error("--namesrv registers the remoting door with name servers: give --remoting-port too")
    from broker_sim.broker import Broker  # after the settings are checked: grpc takes a moment to import

    try:
        broker = Broker(data_dir, args.host, args.port, config, transaction_config=transaction_config,
                        remoting=remoting, broker_name=args.broker_name, transaction_checks=checks, limits=limits,
                        acl=acl, tls=tls,
                        accept_state_loss=args.accept_state_loss,
                        metrics_port=args.metrics_port, auto_create_topics=_auto_create_topics(args),
                        metrics_host=args.metrics_host, metrics_auth=args.metrics_auth)
    except ValueError as err:
        p.error(str(err))
    return broker


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = arguments(p, sys.argv[1:] if argv is None else list(argv))
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(formatter(args.log_format))
    logging.basicConfig(level=args.log_level, handlers=[log_handler])

    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger(PROG).info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:  # `kill -USR1 PID`: every thread's stack to stderr, for a broker that hangs
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):  # stderr is no file (main() called in a test)
        pass

    # gRPC core's own log lines (a failed bind is one) repeat what the broker says in its
    # sentences: shown with --log-level DEBUG only, unless GRPC_VERBOSITY is set.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR" if args.log_level == "DEBUG" else "NONE")
    broker = broker_of(p, args)
    from broker_sim.broker import BindError
    data_dir = broker.data_dir
    try:
        broker.start()
    except Exception as err:  # a sentence for what the user can fix (a full disk, lost state); others raise
        sentence = _start_failure(err, BindError)
        if sentence is None:
            raise
        print(f"{PROG}: error: {sentence}", file=sys.stderr, flush=True)
        return 2
    try:
        if broker.remoting is not None:
            print(f"{PROG} remoting (RocketMQ broker {args.broker_name} and name server) on {broker.remoting.address}",
                  flush=True)
        if broker.metrics_url is not None:
            print(f"{PROG} metrics on {broker.metrics_url}", flush=True)
        print(f"{PROG} listening on {broker.endpoint}, data in {data_dir}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        broker.stop(grace=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
