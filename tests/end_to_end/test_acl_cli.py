"""The CLIs with ACLs: rmq-admin signs with --access-key and the secret from RMQ_SECRET_KEY;
rmq-broker-sim refuses an ACL file it cannot use, saying where and what, before it starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def admin(acl_broker, *args: str, secret: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RMQ_SECRET_KEY"}
    if secret is not None:
        env["RMQ_SECRET_KEY"] = secret
    return subprocess.run([sys.executable, "-m", "rmq_spark.cli", "--endpoint", acl_broker.endpoint, *args],
                          capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)


def test_rmq_admin_signs_with_the_account_given(acl_broker):
    listed = admin(acl_broker, "--access-key", "ops", "--json", "topic", "list", secret="ops-secret")
    assert listed.returncode == 0 and '"orders"' in listed.stdout
    unsigned = admin(acl_broker, "topic", "list")
    assert unsigned.returncode == 1 and "authorization header" in unsigned.stderr
    no_secret = admin(acl_broker, "--access-key", "ops", "topic", "list")
    assert no_secret.returncode == 1 and "RMQ_SECRET_KEY" in no_secret.stderr
    denied = admin(acl_broker, "--access-key", "writer", "topic", "delete", "orders", secret="writer-secret")
    assert denied.returncode == 1 and "needs an admin account" in denied.stderr


@pytest.mark.parametrize("content, says", [
    ("accounts: [", "is not valid YAML"),
    ("accounts: []", "lists no account"),
    ("accounts:\n  - {accessKey: a, secretKey: short}", "at least 6 characters"),
    ("accounts:\n  - {accessKey: a, secretKey: secret-1, topicPerms: [orders=WRITE]}", "write DENY, PUB, SUB"),
    ("accounts:\n  - {accessKey: a, secretKey: secret-1}\n  - {accessKey: a, secretKey: secret-2}", "given twice"),
    ("accounts:\n  - {accessKey: a, secretKey: secret-1, topicPerm: [x=PUB]}", "unknown keys ['topicPerm']"),
])
def test_the_broker_refuses_an_acl_file_it_cannot_use(tmp_path, content, says):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(content)
    started = subprocess.run([sys.executable, "-m", "broker_sim.cli", "--data-dir", str(tmp_path / "data"),
                              "--port", "0", "--acl-file", str(acl_file)], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert started.returncode == 2
    assert str(acl_file) in started.stderr and says in started.stderr
