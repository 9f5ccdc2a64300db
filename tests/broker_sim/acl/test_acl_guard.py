"""The guard's replay window, as --acl-clock-skew-s sets it (the broker's clock injected), and
what the sink topic demands."""

from __future__ import annotations

import pytest

from broker_sim import cli
from broker_sim.acl import Demand, Guard, Perm
from broker_sim.core import BrokerFault, Reason
from rmq_spark import Credentials
from rmq_wire import signing
from rmq_wire.record import SINK_TOPIC

NOW_S = 1_800_000_000.0


def test_the_clock_skew_flag_sets_the_replay_window(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    args = cli.parser().parse_args(["--acl-file", str(acl_file), "--acl-clock-skew-s", "60"])
    guard = Guard(args.acl_file, max_clock_skew_s=args.acl_clock_skew_s, clock_s=lambda: NOW_S)
    credentials = Credentials("ops", "ops-secret")
    assert guard.grpc_account(signing.grpc_metadata(credentials, NOW_S - 30)).access_key == "ops"
    with pytest.raises(BrokerFault, match="120 s before the broker's clock; at most 60 s") as refused:
        guard.grpc_account(signing.grpc_metadata(credentials, NOW_S - 120))
    assert refused.value.reason is Reason.UNAUTHENTICATED


def test_the_sink_topic_is_an_admins_whatever_the_default_topic_permission(tmp_path):
    """RMQ_SYS_SINK_BATCHES holds every account's committed sink batches (issue 29): an account
    whose default grants every topic may still neither read it nor write to it."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: wide, secretKey: wide-secret, defaultTopicPerm: PUB|SUB}\n"
                        "  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    guard = Guard(acl_file, clock_s=lambda: NOW_S)
    wide, ops = guard.config.accounts["wide"], guard.config.accounts["ops"]
    guard.authorize(wide, [Demand.topic("orders", Perm.SUB), Demand.topic("orders", Perm.PUB)])
    for perm in (Perm.SUB, Perm.PUB):
        with pytest.raises(BrokerFault, match="every account's committed sink batches") as refused:
            guard.authorize(wide, [Demand.topic(SINK_TOPIC, perm)])
        assert refused.value.reason is Reason.PERMISSION_DENIED
    guard.authorize(ops, [Demand.topic(SINK_TOPIC, Perm.SUB)])


def test_a_query_by_unique_key_is_signed_as_rocketmq_checks_it(tmp_path):
    """A request of version V4_9_3 or older (the SDK's say 0) leaves _UNIQUE_KEY_QUERY out of what
    is signed, as RocketMQ's brokers check it (4.9 leaves it out always, 5 up to V4_9_3); a newer
    client's (RocketMQ's Java 5 clients) signs it, and the guard checks each by its version."""
    credentials = Credentials("ops", "ops-secret")
    fields = {"topic": "orders", "key": "7F0000010000", "_UNIQUE_KEY_QUERY": "true"}
    old = signing.sign_remoting(dict(fields), None, credentials)
    assert old["Signature"] == signing.sign_remoting({k: v for k, v in fields.items() if k != "_UNIQUE_KEY_QUERY"},
                                                     None, credentials)["Signature"]
    new = signing.sign_remoting(dict(fields), None, credentials, version=signing.V4_9_3 + 1)
    assert new["Signature"] != old["Signature"]
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    guard = Guard(acl_file)
    assert guard.remoting_account(old, None).access_key == "ops"
    assert guard.remoting_account(new, None, version=signing.V4_9_3 + 1).access_key == "ops"
    with pytest.raises(BrokerFault):
        guard.remoting_account(new, None)


def test_an_acl_file_emptied_while_the_broker_runs_revokes_every_account(tmp_path, caplog):
    """Issue 44: an ACL file emptied to ``accounts: []`` kept the old accounts."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    guard = Guard(acl_file, clock_s=lambda: NOW_S, reload_check_s=0)
    credentials = Credentials("ops", "ops-secret")
    assert guard.grpc_account(signing.grpc_metadata(credentials, NOW_S)).access_key == "ops"
    acl_file.write_text("accounts: []\n")
    with pytest.raises(BrokerFault, match="ops") as refused:
        guard.grpc_account(signing.grpc_metadata(credentials, NOW_S))
    assert refused.value.reason is Reason.UNAUTHENTICATED
    assert "it lists no account, so every request is refused until one is added" in caplog.text
    acl_file.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n")
    assert guard.grpc_account(signing.grpc_metadata(credentials, NOW_S)).access_key == "ops"
