"""A broker process with ACLs on (its gRPC port and its remoting door), and the accounts of its
ACL file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from acl_helpers import ACL_FILE, config
from broker_sim.testing import broker_process
from peers.process import free_port


@dataclass
class AclBroker:
    endpoint: str  # our door and v2's
    name_server: str  # the remoting door
    acl_file: Path
    process: object


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """A broker process with --acl-file, its topics 'orders' and 'audit' made by the admin."""
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
