"""The ACL tests' broker (a process with ACLs on: ``acl_broker``, a fixture of every test, loaded
by tests/conftest.py), the accounts of its ACL file and the transport configs that sign as them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_sim.testing import broker_process
from peers.process import free_port
from rmq_spark import Credentials, TransportConfig

ACL_FILE = """\
accounts:
  - accessKey: writer
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=PUB, audit=PUB]
  - accessKey: writer2
    secretKey: writer2-secret
    topicPerms: [orders=PUB]
  - accessKey: reader
    secretKey: reader-secret
    topicPerms: [orders=SUB, audit=DENY]
    groupPerms: [billing=SUB, rocketmq-batch-reader=SUB]
  - accessKey: ops
    secretKey: ops-secret
    admin: true
  - accessKey: stranger
    secretKey: stranger-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
  - accessKey: etl
    secretKey: etl-secret
    defaultTopicPerm: DENY
    sinkPerms: [orders-etl=PUB|SUB]
"""
SECRETS = {"writer": "writer-secret", "writer2": "writer2-secret", "reader": "reader-secret", "ops": "ops-secret",
           "stranger": "stranger-secret", "etl": "etl-secret"}  # stranger: an account granted nothing


def config(access_key: str, secret_key: str | None = None) -> TransportConfig:
    """The transport config of an account (its secret from the file, unless given)."""
    return TransportConfig(credentials=Credentials(access_key, secret_key or SECRETS[access_key]), retries=0)


@dataclass
class AclBroker:
    endpoint: str  # our door and v2's
    name_server: str  # the remoting door
    acl_file: Path
    process: object


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """A broker process with --acl-file (ACL_FILE) and its remoting door, its topics 'orders' and
    'audit' made by the admin; one per test module."""
    home = tmp_path_factory.mktemp("acl")
    acl_file = home / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    port = free_port()
    with broker_process(home / "data", "--remoting-port", str(port), "--acl-file", str(acl_file)) as (endpoint,
                                                                                                       process):
        from rmq_spark import Admin

        admin = Admin(endpoint, config("ops"))
        admin.create_topic("orders", 4, "SimpleCQ")
        admin.create_topic("audit", 2, "SimpleCQ")
        yield AclBroker(endpoint, f"127.0.0.1:{port}", acl_file, process)
