"""rmq-admin: topics, consumer groups, messages, the cluster, transactions and the state of a
broker, as tables for people or --json; a failure exits non-zero (2: a mistake in the command)
with one line. Through --endpoint, a broker_sim broker; through --name-server, any RocketMQ
cluster (what mqadmin does, without a JVM). docs/operations.md maps mqadmin's and Kafka's
commands to these.

    rmq-admin --endpoint 127.0.0.1:10911 topic create orders --queues 16 --type BatchCQ
    rmq-admin --name-server 127.0.0.1:9876 topic describe orders   # any RocketMQ cluster
    rmq-admin topic list | describe T | route T | delete T | update T [--queues N] [--perm rw|r|w]
    rmq-admin group list | offsets G | connections G | delete G
    rmq-admin group reset-offsets G --topic T --to-earliest [--execute]   # or --to-latest, --to-offset N,
              # --to-datetime 2026-11-27T10:00:00Z, --shift-by -10, --by-duration PT1H; a plan unless --execute
    rmq-admin message send T [--file F] [--keys K] [--tags T] [--queue N] < lines   # a message a line
    rmq-admin message peek T [--queue 0 --offset 10 --count 5] | tail T [--from-beginning] [--max-messages N]
    rmq-admin message find T --key K | get ID [--topic T]
    rmq-admin cluster list | broker status [BROKER] | broker stats | broker corrupted
    rmq-admin transaction list [ID ...] | transaction rollback ID ... | transaction sink SINK BATCH
    rmq-admin sink list | sink release SINK                  # exactly-once writers' sink ids (an admin's)
    RMQ_SECRET_KEY=... rmq-admin --access-key ops topic list            # a broker with ACLs
    rmq-admin --tls [--tls-ca CA.pem] [--tls-cert CLIENT.pem --tls-key CLIENT-KEY.pem] ...   # a TLS broker

Each command is a module: topics.py, groups.py, messages.py, cluster.py, transactions.py; each
one's ``add_commands`` adds its noun and verbs, and a verb's function takes the Admin and the
arguments and returns rows and columns (output.py prints them), or prints as it goes (tail).
"""

from __future__ import annotations

import argparse
import difflib
import sys

from rmq_spark.cli import cluster, groups, messages, output, topics, transactions
from rmq_spark.client.admin import Admin
from rmq_spark.client.transport import TransportConfig
from rmq_spark.errors import RmqError
from rmq_spark.structs import SECRET_KEY_VARIABLE, Credentials

DEFAULT_ENDPOINT = "127.0.0.1:10911"


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        args.transport = _transport(p, args)
        with Admin(args.endpoint if args.name_server is None else None, args.transport,
                   name_server=args.name_server) as admin:
            shown = args.run(admin, args)
            if shown is not None:
                rows, columns = shown
                output.show(rows, columns, args.json)
    except BrokenPipeError:
        output.reader_gone()
        return 0
    except KeyboardInterrupt:  # Ctrl-C, as a tail ends
        return 130
    except (RmqError, OSError) as err:
        print(f"rmq-admin: {err}", file=sys.stderr)
        return 1
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
    for module in (topics, groups, messages, cluster, transactions):
        module.add_commands(commands, after)
    return parser


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
