"""The remoting targets every RocketMQ-client scenario runs against: the real Apache RocketMQ
(name server + broker, from the peers), broker_sim's remoting door, and a two-broker broker_sim
cluster; some scenarios run on the real RocketMQ 4 (4.9.7) too (``with_rocketmq4``). Each gives
a name-server address and creates topics and groups its own way; a scenario sees only this."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import orjson
import pytest

from broker_sim.testing import broker_process
from peers.process import free_port
from peers.rocketmq import mqadmin
from rmq_spark import Admin
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode

# The target fixture's parameters (tests/conftest.py); the real RocketMQs among them, and RocketMQ 4.
TARGETS = ("broker_sim", "broker_sim_cluster", "rocketmq")
ROCKETMQ4 = "rocketmq4"
REAL_ROCKETMQ_TARGETS = ("rocketmq", ROCKETMQ4)


def with_rocketmq4():
    """Marks a scenario that runs on RocketMQ 4 too: the targets and ``rocketmq4``."""
    return pytest.mark.parametrize("target", (*TARGETS, ROCKETMQ4), indirect=True)


def with_rocketmq4_by_queue_type():
    """Marks a scenario of each target and queue type (``queue_type``), and RocketMQ 4 with
    SimpleCQ, its only one."""
    cases = [(target, queue_type) for target in TARGETS for queue_type in ("BatchCQ", "SimpleCQ")]
    return pytest.mark.parametrize("target,queue_type", (*cases, (ROCKETMQ4, "SimpleCQ")), indirect=["target"])


class BrokerSimTarget:
    """broker_sim in a process of its own, its remoting door (name server + broker) on one port."""

    kind = "broker_sim"
    batch_cq = True  # it has BatchCQ topics

    def __init__(self, endpoint: str, remoting_port: int, process, args: tuple = ()):
        self.endpoint = endpoint  # our gRPC door, for checks through our own SDK
        self.namesrv = f"127.0.0.1:{remoting_port}"
        self.process = process
        self.args = args  # how it was started: a restart starts it the same way, on its data and its port

    @contextlib.contextmanager
    def restarted(self):
        """Start it again (after it stopped, or was killed) on its data directory, at its
        remoting address; stopped again at the end of the block."""
        with broker_process(*self.args) as (endpoint, process):
            self.endpoint, self.process = endpoint, process
            yield self

    def create_topic(self, name: str, queues: int, batch_cq: bool = True) -> None:
        with Admin(self.endpoint) as admin:
            admin.create_topic(name, queues, "BatchCQ" if batch_cq else "SimpleCQ")

    def create_group(self, name: str, orderly: bool = False) -> None:
        """Groups need no creation on broker_sim (as with autoCreateSubscriptionGroup); an
        orderly one is made as mqadmin updateSubGroup -o true makes it."""
        if orderly:
            create_orderly_group(self.namesrv, name)


class ClusterTarget:
    """Two broker_sim processes, one cluster: the first is the name server, the second registers
    with it (--namesrv); every topic has queues on both."""

    kind = "broker_sim_cluster"
    batch_cq = True

    def __init__(self, first: BrokerSimTarget, second: BrokerSimTarget):
        self.brokers = (first, second)
        self.namesrv = first.namesrv
        self.endpoint = first.endpoint

    def create_topic(self, name: str, queues: int, batch_cq: bool = True) -> None:
        for broker in self.brokers:
            broker.create_topic(name, queues, batch_cq)
        with RemotingConnection(self.namesrv) as conn:  # the second broker registers it within a second
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                answer = conn.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name})
                if answer.code == ResponseCode.SUCCESS and len(orjson.loads(answer.body)["queueDatas"]) == 2:
                    return
                time.sleep(0.1)
        raise RuntimeError(f"topic {name} did not reach the name server from both brokers in 10 s")

    def create_group(self, name: str, orderly: bool = False) -> None:
        for broker in self.brokers:
            broker.create_group(name, orderly)


class RocketMQTarget:
    """The real broker of the session's RocketMQCluster (peers/rocketmq.py): RocketMQ 5, or 4
    (kind "rocketmq4", no BatchCQ)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.namesrv = cluster.namesrv_addr
        self.kind = "rocketmq" if cluster.major == 5 else ROCKETMQ4
        self.batch_cq = cluster.major >= 5

    def mqadmin(self, *commands: tuple) -> list[str]:
        """The outputs of this version's own mqadmin, each of ``commands`` against the name server."""
        if self.cluster.major == 5:
            return mqadmin(self.namesrv, *commands)
        return [self.cluster.admin(*command, "-n", self.namesrv) for command in commands]

    def create_topic(self, name: str, queues: int, batch_cq: bool = True) -> None:
        self.cluster.create_topic(name, queues, batch_cq)

    def create_group(self, name: str, orderly: bool = False) -> None:
        self.cluster.create_group(name, orderly)


def create_orderly_group(address: str, name: str) -> None:
    with RemotingConnection(address) as conn:
        answer = conn.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                             orjson.dumps({"groupName": name, "consumeMessageOrderly": True}))
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"creating group {name} failed: {answer.remark}")


@contextlib.contextmanager
def cluster_target(data_dir: Path):
    with broker_sim_target(data_dir / "a") as first:
        with broker_sim_target(data_dir / "b", "--broker-name", "broker-b", "--namesrv", first.namesrv) as second:
            wait_for_brokers(first.namesrv, {"broker-a", "broker-b"})
            yield ClusterTarget(first, second)


def wait_for_brokers(namesrv: str, names: set, timeout_s: float = 15) -> None:
    """Until the name server lists ``names`` in its cluster info (a broker registers as it starts)."""
    deadline = time.monotonic() + timeout_s
    with RemotingConnection(namesrv) as conn:
        while True:
            info = orjson.loads(conn.invoke(RequestCode.GET_BROKER_CLUSTER_INFO).body)
            if names <= set(info["brokerAddrTable"]):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server {namesrv} lists {sorted(info['brokerAddrTable'])}, not "
                                   f"{sorted(names)}, after {timeout_s} s")
            time.sleep(0.1)


@contextlib.contextmanager
def broker_sim_target(data_dir: Path, *extra_args: str):
    port = free_port()
    # transactions left unknown are checked within seconds, and sends create no topic, as the real
    # broker is configured (peers/rocketmq.py)
    args = (data_dir, "--remoting-port", str(port), "--transaction-check-interval-ms", "2000",
            "--transaction-check-max", "60", "--auto-create-topics", "false", *extra_args)
    with broker_process(*args) as (endpoint, process):
        yield BrokerSimTarget(endpoint, port, process, args)
