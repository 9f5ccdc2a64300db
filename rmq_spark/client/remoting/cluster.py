"""The cluster as operators see it: its brokers as the name servers list them
(GET_BROKER_CLUSTER_INFO, mqadmin clusterList) and a broker's runtime figures
(GET_BROKER_RUNTIME_INFO, mqadmin brokerStatus)."""

from __future__ import annotations

import time

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import MASTER_ID, NameServers
from rmq_spark.errors import BrokerError
from rmq_spark.structs import BrokerInfo
from rmq_wire.remoting import RequestCode, ResponseCode, fastjson


class Cluster:
    def __init__(self, calls: Calls, names: NameServers):
        self.calls = calls
        self.names = names

    def brokers(self) -> list[BrokerInfo]:
        """Every broker with a master, by cluster and name."""
        answer = self.names.ask(RequestCode.GET_BROKER_CLUSTER_INFO)
        if answer.code != ResponseCode.SUCCESS:
            raise refused(answer, "the name server refused the cluster info")
        info = fastjson.loads(answer.body)
        cluster_of = {broker: cluster for cluster, brokers in (info.get("clusterAddrTable") or {}).items()
                      for broker in brokers}
        return sorted((BrokerInfo(cluster_of.get(name, ""), name, entry["brokerAddrs"][MASTER_ID])
                       for name, entry in (info.get("brokerAddrTable") or {}).items()
                       if (entry.get("brokerAddrs") or {}).get(MASTER_ID)),
                      key=lambda b: (b.cluster, b.name))

    def status(self, broker: str = "") -> dict[str, str]:
        """The runtime figures of ``broker`` ("": the cluster's only one), by name."""
        masters = self.names.masters()
        if not broker:
            if len(masters) != 1:
                raise BrokerError(f"the cluster has brokers {', '.join(masters) or 'none'}: name one")
            broker = next(iter(masters))
        address = masters.get(broker)
        if address is None:
            raise BrokerError(f"no broker {broker!r} is registered at the name servers (brokers: "
                              f"{', '.join(masters) or 'none'})")
        deadline = time.monotonic() + self.calls.config.timeout_ms / 1000
        while True:
            answer = self.calls.invoke(address, RequestCode.GET_BROKER_RUNTIME_INFO, {})
            # A RocketMQ broker samples its rates every second from its start: asked sooner, its
            # StoreStatsService fails on the empty sample list (LinkedList.getLast). Asked again.
            not_sampled = answer.code == ResponseCode.SYSTEM_ERROR and "NoSuchElementException" in (answer.remark or "")
            if not not_sampled or time.monotonic() > deadline:
                break
            self.calls.sleep(0.2)
        if answer.code != ResponseCode.SUCCESS:
            raise refused(answer, f"broker {broker} ({address}) refused its runtime info")
        table = fastjson.loads(answer.body).get("table") or {}
        return {str(name): str(value) for name, value in sorted(table.items())}
