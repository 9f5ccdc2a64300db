"""rmq-broker-sim's start: `--config FILE` (RocketMQ's broker.conf keys where this broker has
the setting, the flags without their dashes for the rest; flags win over the file; an unknown
key refused with the closest; a RocketMQ key with no effect here warned about), a wrong flag
said in one line, and a --help that shows sizes as written and the first flags first."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from pathlib import Path

import pytest

from broker_sim.broker_conf import ROCKETMQ_FLAGS
from broker_sim.cli import arguments, broker_of, parser
from broker_sim.doors.checks import CheckSettings
from support.grpc_client import Client
from support.paths import REPO_ROOT
from test_lifecycle import LISTENING, START_TIMEOUT_S, STOP_TIMEOUT_S, BrokerProcess, cli_command

ROOT = REPO_ROOT


def settings(tmp_path: Path, text: str, *flags: str):
    """The settings a config file of ``text`` gives, ``flags`` after it."""
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    return arguments(parser(), ["--config", str(conf), *flags])


def refused(tmp_path: Path, capsys, text: str, *flags: str) -> str:
    """The one line a start with this file is refused with (exit 2)."""
    with pytest.raises(SystemExit) as stopped:
        settings(tmp_path, text, *flags)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    return err


def test_rocketmq_keys_set_the_flags_of_the_same_setting(tmp_path):
    args = settings(tmp_path, "# ported from RocketMQ\n"
                              "brokerClusterName = ClusterB\n"
                              "brokerName=broker-b\n"
                              "brokerId=0\n"
                              "listenPort=9877\n"
                              "bindAddress=0.0.0.0\n"
                              "namesrvAddr=10.0.0.1:9876;10.0.0.2:9876\n"
                              "storePathRootDir=/var/rmq/store\n"
                              "flushDiskType=SYNC_FLUSH\n"
                              "mappedFileSizeCommitLog=67108864\n"
                              "transactionCheckInterval=5000\n"
                              "transactionCheckMax=40\n")
    assert (args.cluster_name, args.broker_name, args.remoting_port, args.host) == (
        "ClusterB", "broker-b", 9877, "0.0.0.0")
    assert args.namesrv == ("10.0.0.1:9876", "10.0.0.2:9876") and args.data_dir == Path("/var/rmq/store")
    assert (args.flush, args.segment_bytes, args.transaction_check_interval_ms) == ("sync", 64 << 20, 5000)
    assert args.transaction_check_max == 40
    assert args.port == 10911  # listenPort is the remoting door; our gRPC port keeps its own


def test_our_keys_are_the_flags_without_their_dashes_and_flags_win_over_the_file(tmp_path):
    text = "max-queues=500\nsegment-bytes=16m\naccept-state-loss=true\nlog-level=debug\nlistenPort=9877\n"
    args = settings(tmp_path, text)
    assert (args.max_queues, args.segment_bytes, args.accept_state_loss, args.log_level, args.remoting_port) == (
        500, 16 << 20, True, "DEBUG", 9877)
    args = settings(tmp_path, text, "--max-queues", "7", "--remoting-port", "9878")
    assert (args.max_queues, args.remoting_port, args.segment_bytes) == (7, 9878, 16 << 20)
    args = arguments(parser(), ["--max-queues", "8", "-c", str(tmp_path / "broker.conf")])  # mqbroker's -c
    assert (args.max_queues, args.remoting_port) == (8, 9877)


def test_a_file_saved_with_a_byte_order_mark_and_crlf_lines_reads(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_bytes(b"\xef\xbb\xbfbrokerName=b\r\nlistenPort=9877\r\n")
    assert arguments(parser(), ["--config", str(conf)]).broker_name == "b"


def test_every_flag_is_a_key(tmp_path):
    """A flag added later is a key too, with nothing to add to the config reader."""
    p = parser()
    p.add_argument("--idle-timeout-ms", type=int, default=0)
    conf = tmp_path / "broker.conf"
    conf.write_text("idle-timeout-ms=250\n")
    assert arguments(p, ["--config", str(conf)]).idle_timeout_ms == 250


@pytest.mark.parametrize("text, expected", [
    ("listenPrt=9876\n", "line 1: 'listenPrt' is not a setting (did you mean listenPort?)"),
    ("max_queues=5\n", "'max_queues' is not a setting (did you mean max-queues?)"),
    ("brokername=b\n", "(did you mean brokerName?)"),
    ("# a comment\n\nwhatever=1\n", "line 3: 'whatever' is not a setting: a key is a flag"),
    ("config=other.conf\n", "'config' is not a setting"),
    ("listenPort 9876\n", "line 1: 'listenPort 9876' is not a setting: write key=value"),
    ("listenPort=abc\n", "line 1: listenPort=abc: 'abc' is not a port: use 1 to 65535"),
    ("flushDiskType=FAST\n", "flushDiskType=FAST: use ASYNC_FLUSH or SYNC_FLUSH"),
    ("segment-bytes=lots\n", "segment-bytes=lots: 'lots' is not a size"),
    ("transaction-timeout-ms=soon\n", "transaction-timeout-ms=soon: 'soon' is not a whole number"),
    ("dispatch=parallel\n", "dispatch=parallel: use one of serial, concurrent"),
    ("transactionCheckMax=0\n", "transactionCheckMax=0: '0' is not a whole number of at least 1"),
    ("accept-state-loss=yes\n", "accept-state-loss=yes: use true or false"),
    ("brokerId=1\n", "brokerId=1: this broker is one master (brokerId=0), it has no replicas"),
    ("brokerRole=SLAVE\n", "brokerRole=SLAVE: this broker is one master (brokerRole=ASYNC_MASTER or SYNC_MASTER)"),
    ("listenPort=9876\nremoting-port=9877\n", "line 2: remoting-port sets --remoting-port as line 1's listenPort "
                                              "does: keep one"),
    ("aclEnable=true\n", "aclEnable=true needs the accounts' plain_acl.yml: add acl-file=PATH"),
    ("aclEnable=false\nacl-file=plain_acl.yml\n", "aclEnable=false and acl-file are both given: remove one"),
    ("listenPort=10911\n", "--port and --remoting-port are both 10911: give each its own port"),
])
def test_a_wrong_file_is_refused_in_one_line_naming_the_line_and_key(tmp_path, capsys, text, expected):
    err = refused(tmp_path, capsys, text)
    assert err.startswith("rmq-broker-sim: error: ") and expected in err, err


def test_a_missing_file_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        arguments(parser(), ["--config", str(tmp_path / "nope.conf")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err == f"rmq-broker-sim: error: --config {tmp_path / 'nope.conf'}: cannot " \
                                              "read it (No such file or directory)\n"


def test_rocketmq_keys_with_no_effect_here_are_warned_about_one_line_each(tmp_path, capsys):
    args = settings(tmp_path, "brokerName=b\ndeleteWhen=04\nsendMessageThreadPoolNums=16\nbrokerIP1=10.0.0.5\n"
                              "dLegerGroup=g\nbrokerRole=SYNC_MASTER\nbrokerRole=ASYNC_MASTER\n")
    assert args.broker_name == "b"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("rmq-broker-sim: warning: ") for line in lines), lines
    assert "line 2: deleteWhen has no effect here: the broker keeps every commitlog segment" in lines[0]
    assert "line 3: sendMessageThreadPoolNums has no effect here: this broker has no such setting" in lines[1]
    assert "line 4: brokerIP1 has no effect here: the broker gives clients the address it listens on" in lines[2]
    assert "line 5: dLegerGroup has no effect here" in lines[3]  # setdLegerGroup: RocketMQ reads dLegerGroup
    assert "line 6: brokerRole=SYNC_MASTER has no effect here: this broker has no replicas to wait for" in lines[4]


def test_acl_enable_with_the_accounts_file(tmp_path):
    args = settings(tmp_path, "aclEnable=true\nacl-file=/etc/plain_acl.yml\n")
    assert args.acl_file == Path("/etc/plain_acl.yml")
    assert settings(tmp_path, "aclEnable=true\n", "--acl-file", "a.yml").acl_file == Path("a.yml")


def test_the_sample_config_reads_without_a_warning(capsys):
    args = arguments(parser(), ["--config", str(ROOT / "deploy" / "broker.conf")])
    assert capsys.readouterr().err == ""
    assert (args.remoting_port, args.port, args.broker_name, args.flush, args.max_queues) == (
        9876, 10911, "broker-a", "async", 1_000_000)
    written = [line.split("=", 1)[0] for line in (ROOT / "deploy" / "broker.conf").read_text().splitlines()
               if line and not line.startswith("#")]
    assert set(ROCKETMQ_FLAGS) - {"namesrvAddr"} <= set(written), "the sample shows every RocketMQ key read"


def test_the_apache_rocketmq_broker_conf_of_the_compose_file_ports_with_warnings(capsys):
    """deploy/rocketmq/broker.conf, Apache RocketMQ's own broker's file: every key is read or warned
    about, none refused."""
    args = arguments(parser(), ["--config", str(ROOT / "deploy" / "rocketmq" / "broker.conf")])
    assert (args.cluster_name, args.broker_name, args.namesrv, args.flush) == (
        "DefaultCluster", "broker-a", ("rocketmq-namesrv:9876",), "async")
    warned = re.findall(r"line \d+: (\w+) has no effect here", capsys.readouterr().err)
    assert warned == ["brokerIP1", "autoCreateSubscriptionGroup", "timerWheelEnable"]
    assert args.auto_create_topics == "false"  # autoCreateTopicEnable=false, as that broker runs


def test_help_shows_sizes_as_written_and_the_first_flags_first():
    text = parser().format_help()
    assert "\noptions:" not in text, "each flag belongs to a group: argparse's default one is printed first"
    assert "1e+06" not in text and "(default: 1000000)" in text
    assert "(default: 64m)" in text and "(default: 1m)" in text and "(default: 1g)" in text
    assert "67108864" not in text and "1073741824" not in text
    first = [text.index(flag + " ") for flag in ("--config", "--data-dir", "--port", "--remoting-port")]
    assert first == sorted(first) and first[-1] < text.index("--flush ") < text.index("--max-connections-per-ip ")
    assert "listenPort" in text and "[broker.conf: storePathRootDir]" in text


@pytest.mark.parametrize("args, expected", [
    (["--port", "abc"], "rmq-broker-sim: error: --port: 'abc' is not a port: use 1 to 65535, or 0 for any free port"),
    (["--prot", "1"], "rmq-broker-sim: error: unrecognized arguments: --prot 1 (did you mean --port?)"),
    (["--max-queues", "x"], "rmq-broker-sim: error: --max-queues: invalid int value: 'x'"),
    (["--port", "5", "--remoting-port", "5"], "rmq-broker-sim: error: --port and --remoting-port are both 5"),
])
def test_a_wrong_flag_is_one_line_not_the_usage(tmp_path, args, expected):
    result = subprocess.run(cli_command() + ["--data-dir", str(tmp_path / "data"), *args], capture_output=True,
                            text=True, timeout=STOP_TIMEOUT_S)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr
    assert not (tmp_path / "data").exists()


def test_the_broker_starts_from_a_broker_conf_and_flags_win(tmp_path, processes):
    """A real start: the file's remoting door (listenPort=0: any free port) and broker name, its
    SYNC_FLUSH, a warned RocketMQ key; the command line's --data-dir over its storePathRootDir."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=from-conf\nlistenPort=0\nflushDiskType=SYNC_FLUSH\ndeleteWhen=04\n"
                    f"storePathRootDir={tmp_path / 'conf-data'}\n")
    process = BrokerProcess(tmp_path, tmp_path / "data", "--config", str(conf))
    processes.append(process)
    remoting_line = process.lines.get(timeout=START_TIMEOUT_S)
    assert remoting_line and remoting_line.startswith("rmq-broker-sim remoting (RocketMQ broker from-conf "), (
        remoting_line, process.stderr())
    listening = LISTENING.match(process.lines.get(timeout=START_TIMEOUT_S).rstrip("\n"))
    assert listening and listening.group(3) == str((tmp_path / "data").resolve())
    client = Client(listening.group(1))
    assert client.stats().flush_mode == "sync"
    client.close()
    assert process.stop() == 0
    assert not (tmp_path / "conf-data").exists()
    assert "warning: " + str(conf) + " line 4: deleteWhen has no effect here" in process.stderr()


@pytest.mark.parametrize("remoting", [False, True], ids=["grpc port only", "with the remoting door"])
def test_the_settings_both_rocketmq_doors_share_reach_both(tmp_path, remoting):
    """The transaction check settings and the broker's name are built once (flags over
    broker.conf) and handed to both RocketMQ doors: RocketMQ 5's gRPC door too when the broker has
    no remoting port (it once kept its own default of 15 checks whatever --transaction-check-max
    said, and named itself broker-a whatever --broker-name said)."""
    p = parser()
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionCheckMax=3\ntransactionCheckInterval=700\nbrokerName=broker-conf\n")
    flags = ["--config", str(conf), "--data-dir", str(tmp_path / "data"), "--port", "0", "--transaction-check-max",
             "2", *(["--remoting-port", "0"] if remoting else [])]
    broker = broker_of(p, arguments(p, flags))
    with broker:
        doors = [broker.v2, *([broker.remoting] if remoting else [])]
        assert [door.checks.settings for door in doors] == [CheckSettings(interval_ms=700, check_max=2)] * len(doors)
        assert [door.broker_name for door in doors] == ["broker-conf"] * len(doors)
        assert (broker.remoting is None) is not remoting


def test_transaction_check_max_rolls_back_what_nobody_answers_after_that_many_checks(tmp_path, processes):
    """--transaction-check-max (broker.conf transactionCheckMax) reaches the remoting door: a half
    message whose producer answers no check is rolled back after 2 checks, not RocketMQ's 15."""
    from rmq_spark import Admin, OffsetRange, RangeReader
    from rmq_spark.client.connect import connect

    process = BrokerProcess(tmp_path, tmp_path / "data", "--remoting-port", "0",
                            "--transaction-check-interval-ms", "100", "--transaction-check-max", "2")
    processes.append(process)
    remoting_line = process.lines.get(timeout=START_TIMEOUT_S)
    assert remoting_line and " on " in remoting_line, process.stderr()
    name_server = remoting_line.rsplit(" on ", 1)[1].strip()
    endpoint = process.wait_listening()
    with Admin(endpoint) as admin:
        admin.create_topic("unanswered", 1, "SimpleCQ")
    transport = connect(name_server=name_server)  # a producer of the group that answers no check
    try:
        [queue] = transport.route("unanswered").writable()
        transport.send_half("unanswered", queue, b"never answered", {}, "silent-group").result(30)  # prepared
        deadline = time.monotonic() + 30
        while "unanswered after" not in process.stderr():
            assert time.monotonic() < deadline, f"no rollback in 30 s: {process.stderr()}"
            time.sleep(0.05)
    finally:
        transport.close()
    assert "unanswered after 2 checks: rolled back" in process.stderr()
    with RangeReader(endpoint) as reader:
        assert reader.read_table([OffsetRange("unanswered", 0, 0, 1)]).num_rows == 0  # never committed
    assert process.stop() == 0


# Each flag of `rmq-broker-sim start` with a value other than its default, and where it must show
# in the broker broker_of builds (its settings, as the parts are handed them). The log flags set up
# logging before a broker is built; --config is the file the others are read from.
NOT_BROKER_SETTINGS = {"help", "config", "log_level", "log_format"}
FLAG_VALUES = {
    "data_dir": ("--data-dir", "{tmp}/elsewhere"), "host": ("--host", "127.0.0.2"), "port": ("--port", "10999"),
    "remoting_port": ("--remoting-port", "0"), "metrics_port": ("--metrics-port", "0"),
    "metrics_host": ("--metrics-host", "127.0.0.3"), "metrics_auth": ("--metrics-auth", "admin"),
    "flush": ("--flush", "sync"), "dispatch": ("--dispatch", "concurrent"), "segment_bytes": ("--segment-bytes", "8m"),
    "disk_reserve": ("--disk-reserve", "1m"), "accept_state_loss": ("--accept-state-loss",),
    "auto_create_topics": ("--auto-create-topics", "false"), "default_topic_queues": ("--default-topic-queues", "3"),
    "default_topic_type": ("--default-topic-type", "SimpleCQ"), "broker_name": ("--broker-name", "broker-z"),
    "cluster_name": ("--cluster-name", "OtherCluster"), "namesrv": ("--namesrv", "127.0.0.1:9"),
    "transaction_timeout_ms": ("--transaction-timeout-ms", "1234"),
    "transaction_check_interval_ms": ("--transaction-check-interval-ms", "777"),
    "transaction_check_max": ("--transaction-check-max", "3"), "acl_file": ("--acl-file", "{acl}"),
    "acl_clock_skew_s": ("--acl-clock-skew-s", "5"), "tls_cert": ("--tls-cert", "{cert}", "--tls-key", "{key}"),
    "tls_key": ("--tls-key", "{key}", "--tls-cert", "{cert}"), "tls_client_ca": ("--tls-client-ca", "{ca}"),
    "memory_budget_bytes": ("--memory-budget", "512m"),
}
# flags that only mean something beside others: given to the broker compared with too
BESIDE = {"namesrv": ("--remoting-port", "0"), "cluster_name": ("--remoting-port", "0"),
          "metrics_auth": ("--acl-file", "{acl}", "--metrics-port", "0", "--tls-cert", "{cert}", "--tls-key", "{key}"),
          "acl_clock_skew_s": ("--acl-file", "{acl}"), "tls_client_ca": ("--tls-cert", "{cert}", "--tls-key", "{key}")}


def _broker_settings(broker) -> dict:
    """What broker_of handed on: every setting of the broker and its parts, as comparable values."""
    guard = broker.acl
    return {"data_dir": broker.data_dir, "host": broker.host, "port": broker.port, "store": broker.store_config,
            "remoting": broker.remoting_options, "metrics": (broker.metrics_port, broker.metrics_host,
                                                             broker.metrics_auth),
            "accept_state_loss": broker.accept_state_loss, "auto_create_topics": broker.auto_create_topics,
            "broker_name": broker.broker_name, "transactions": broker.transaction_config,
            "checks": broker.transaction_checks, "limits": broker.limits,
            "acl": None if guard is None else (guard.path, guard.max_clock_skew_s),
            "tls": None if broker.tls is None else (broker.tls.cert_file, broker.tls.key_file,
                                                    broker.tls.client_ca_file)}


@pytest.fixture(scope="module")
def flag_files(tmp_path_factory):
    from support.acl import ACL_FILE
    from support.tls_certs import make_certs

    directory = tmp_path_factory.mktemp("flags")
    acl = directory / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    certs = make_certs(directory)
    return {"acl": str(acl), "cert": str(certs.server.cert), "key": str(certs.server.key), "ca": str(certs.ca),
            "tmp": str(directory)}


def _limit_flags() -> dict:
    """The client limits' flags (core/limits.py ClientLimits: a flag a field), each with its
    default doubled."""
    from broker_sim.core.limits import ClientLimits

    return {f.name: (f"--{f.name.replace('_', '-')}", str(int(f.default * 2)))
            for f in dataclasses.fields(ClientLimits) if isinstance(f.default, (int, float))}


def test_every_flag_is_known_to_this_test():
    """A flag added later gets a row above (or in ClientLimits), so the next test checks it."""
    p = parser()
    flags = set()
    for action in p._actions:
        for command in (action.choices or {}).values() if isinstance(action.choices, dict) else ():
            flags |= {a.dest for a in command._actions if a.option_strings}
    assert flags - NOT_BROKER_SETTINGS - set(FLAG_VALUES) - set(_limit_flags()) == set()


@pytest.mark.parametrize("dest", sorted(set(FLAG_VALUES) | set(_limit_flags())))
def test_every_flag_reaches_the_broker_it_builds(tmp_path, flag_files, dest):
    """A flag set to another value than its default changes what broker_of hands the broker's
    parts: no flag is read and dropped on the way (the v2 door once kept its own transaction
    checks and name whatever the flags said)."""
    flag = FLAG_VALUES.get(dest) or _limit_flags()[dest]
    beside = [part.format(**flag_files) for part in BESIDE.get(dest, ())]
    base = ["--data-dir", str(tmp_path / "data"), *beside]
    p = parser()
    default = broker_of(p, arguments(p, base))
    given = broker_of(p, arguments(p, [*base, *(part.format(**flag_files) for part in flag)]))
    before, after = _broker_settings(default), _broker_settings(given)
    assert before != after, f"{' '.join(flag)} changed nothing in the broker built"
