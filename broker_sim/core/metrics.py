"""What the broker counts for operators, in Prometheus' terms (prometheus_client), named as
RocketMQ 5 names its metrics where it has one (BrokerMetricsConstant, RemotingMetricsConstant,
DefaultStoreMetricsConstant), ``broker_sim_*`` for the rest.

Counters and the request histogram are kept as things happen (a send, a read, a pop, a
request answered), one update per request or batch, never per message. Gauges are read from the
core when Prometheus scrapes (``BrokerCore.gauges``). Labels are bounded: a topic, a consumer group,
a door and its request and response codes; never a queue, a client address or a message.

Without a metrics port the core counts into ``NO_METRICS``, which does nothing."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# RocketMQ's rpc latency buckets, in milliseconds (RemotingMetricsManager).
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)

# Every family the broker serves (as Prometheus names it: counters end in _total), with its help.
METRICS = {
    "rocketmq_messages_in_total": "Messages stored, by topic (a duplicate of an idempotent send is not counted)",
    "rocketmq_throughput_in_total": "Bytes of messages stored, by topic: bodies of single sends, payloads of "
                                    "batches as sent",
    "rocketmq_messages_out_total": "Messages delivered, by topic and consumer group (\"\" for range reads, "
                                   "which name no group)",
    "rocketmq_throughput_out_total": "Bytes of stored records delivered, by topic and consumer group",
    "rocketmq_rpc_latency": "Requests answered, by door (protocol_type: remoting, grpc for RocketMQ 5's "
                            "MessagingService, contract for ours), request and response code; milliseconds",
    "rocketmq_topic_number": "Topics, system topics (retry, schedule) included",
    "rocketmq_consumer_group_number": "Consumer groups known (with offsets, settings or live consumers)",
    "rocketmq_consumer_lag_messages": "Messages of a topic not yet consumed by a group: the queues' max offsets "
                                      "less the group's committed offsets",
    "rocketmq_consumer_inflight_messages": "Messages popped by a group and neither acked nor revived yet",
    "rocketmq_storage_size": "Bytes of the commit log held on disk (max less min offset)",
    "rocketmq_storage_flush_behind_bytes": "Bytes of the commit log written and not yet flushed to disk",
    "rocketmq_storage_dispatch_behind_bytes": "Bytes of the commit log not yet indexed by the dispatcher",
    "broker_sim_dispatch_lag_ms": "Age of the oldest record not yet indexed, in milliseconds",
    "rocketmq_half_messages": "Messages prepared under transactions not yet committed or rolled back",
    "broker_sim_transactions_open": "Transactions open or committing",
    "broker_sim_pop_revive_backlog_messages": "Popped messages past their invisible time and not yet revived "
                                              "(the revive service's backlog)",
    "broker_sim_memory_budget_held_bytes": "Bytes every door holds for its clients (answers being written, parked "
                                           "pulls), counted against the memory budget",
    "broker_sim_memory_budget_bytes": "The memory budget (--memory-budget)",
    "broker_sim_responses_waiting": "Stream responses written and not yet taken by their clients",
    "broker_sim_resident_memory_bytes": "The broker process's resident memory",
    "broker_sim_corrupted_records": "Damaged records the store found (reads end before them)",
}
METRIC_NAMES = frozenset(METRICS)


def _help(name: str) -> str:
    return METRICS[name]


class NoMetrics:
    """The core's metrics when nobody scrapes them: every update does nothing."""

    registry = None

    def took(self, topic: str, messages: int, body_bytes: int) -> None:
        pass

    def gave(self, topic: str, group: str, messages: int, record_bytes: int) -> None:
        pass

    def answered(self, protocol: str, request: str, response: str, seconds: float) -> None:
        pass

    def watch(self, gauges: Callable[[], Iterable[Metric]]) -> None:
        pass

    def forget_topic(self, topic: str) -> None:
        pass

    def forget_group(self, group: str) -> None:
        pass


NO_METRICS = NoMetrics()


class BrokerMetrics(NoMetrics):
    """The broker's registry: counters and the request histogram, updated by the core and the
    doors, and the gauges ``watch`` is given, read at each scrape.

    The counts are plain numbers under one lock, made into prometheus_client's families at each
    scrape: its own Counter and Histogram cost 2.3 us an update here (a labels lookup under their
    locks), which on AutoBatch's sends, three updates a request, slowed the broker by 6-10%
    (bench/metrics_bench.py); these cost 0.4 and 0.8 us."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._in: dict[str, list] = {}  # topic -> [messages, bytes]
        self._out: dict[tuple[str, str], list] = {}  # (topic, group) -> [messages, bytes]
        self._rpc: dict[tuple[str, str, str], list] = {}  # (door, request, response) -> [bucket counts..., sum]
        self.registry.register(_Gauges(self._counted))

    def took(self, topic: str, messages: int, body_bytes: int) -> None:
        with self._lock:
            tally = self._in.get(topic)
            if tally is None:
                tally = self._in[topic] = [0, 0]
            tally[0] += messages
            tally[1] += body_bytes

    def gave(self, topic: str, group: str, messages: int, record_bytes: int) -> None:
        if not messages:
            return
        with self._lock:
            tally = self._out.get((topic, group))
            if tally is None:
                tally = self._out[(topic, group)] = [0, 0]
            tally[0] += messages
            tally[1] += record_bytes

    def answered(self, protocol: str, request: str, response: str, seconds: float) -> None:
        ms = seconds * 1000
        key = (protocol, request, response)
        with self._lock:
            counts = self._rpc.get(key)
            if counts is None:
                counts = self._rpc[key] = [0] * (len(RPC_LATENCY_BUCKETS_MS) + 1) + [0.0]
            counts[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1  # le: at most the bound
            counts[-1] += ms

    def watch(self, gauges: Callable[[], Iterable[Metric]]) -> None:
        """Serve the families ``gauges()`` makes, made anew at each scrape."""
        self.registry.register(_Gauges(gauges))

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: its series go with it (the counts of one made again start anew)."""
        with self._lock:
            self._in.pop(topic, None)
            for key in [key for key in self._out if key[0] == topic]:
                del self._out[key]

    def forget_group(self, group: str) -> None:
        """The consumer group was deleted: its series go with it (a group made again starts anew)."""
        with self._lock:
            for key in [key for key in self._out if key[1] == group]:
                del self._out[key]

    def _counted(self) -> list[Metric]:
        with self._lock:
            taken = [(topic, *tally) for topic, tally in sorted(self._in.items())]
            given = [(*key, *tally) for key, tally in sorted(self._out.items())]
            requests = [(key, list(counts)) for key, counts in sorted(self._rpc.items())]
        families = []
        for name, rows, labels in (("rocketmq_messages_in_total", [(r[:1], r[1]) for r in taken], ["topic"]),
                                   ("rocketmq_throughput_in_total", [(r[:1], r[2]) for r in taken], ["topic"]),
                                   ("rocketmq_messages_out_total", [(r[:2], r[2]) for r in given],
                                    ["topic", "consumer_group"]),
                                   ("rocketmq_throughput_out_total", [(r[:2], r[3]) for r in given],
                                    ["topic", "consumer_group"])):
            family = CounterMetricFamily(name, _help(name), labels=labels)
            for label_values, count in rows:
                family.add_metric(list(label_values), count)
            families.append(family)
        latency = HistogramMetricFamily("rocketmq_rpc_latency", _help("rocketmq_rpc_latency"),
                                        labels=["protocol_type", "request_code", "response_code"])
        for key, counts in requests:
            cumulative = list(itertools.accumulate(counts[:-1]))
            bounds = [str(float(b)) for b in RPC_LATENCY_BUCKETS_MS] + ["+Inf"]
            latency.add_metric(list(key), list(zip(bounds, cumulative)), counts[-1])
        families.append(latency)
        return families


class _Gauges(Collector):
    def __init__(self, gauges: Callable[[], Iterable[Metric]]):
        self._gauges = gauges

    def collect(self):
        return self._gauges()

    def describe(self):
        return []  # made at each scrape: nothing to check at registration


def gauge(name: str, value: float | None = None, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    """A gauge family of ``METRICS``; with ``labels``, add its samples with ``add_metric``."""
    if labels:
        return GaugeMetricFamily(name, _help(name), labels=list(labels))
    return GaugeMetricFamily(name, _help(name), value=value)
