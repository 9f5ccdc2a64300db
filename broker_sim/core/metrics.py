"""What the broker counts for operators, in Prometheus' terms (prometheus_client), named as
RocketMQ 5 names its metrics where it has one (BrokerMetricsConstant, RemotingMetricsConstant,
DefaultStoreMetricsConstant), ``broker_sim_*`` for the rest.

Counters and the request histogram are kept as things happen (a send, a read, a pop, a
request answered), one update per request or batch, never per message. Gauges are read from the
core when Prometheus scrapes (``BrokerGauges``). Labels are bounded: a topic, a consumer group,
a door and its request and response codes; never a queue, a client address or a message.

Without a metrics port the core counts into ``NO_METRICS``, which does nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
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

    def watch(self, gauges: Callable[[], Iterable[GaugeMetricFamily]]) -> None:
        pass


NO_METRICS = NoMetrics()


class BrokerMetrics(NoMetrics):
    """The broker's registry: counters and the request histogram, updated by the core and the
    doors, and the gauges ``watch`` is given, read at each scrape."""

    def __init__(self):
        disable_created_metrics()  # no *_created series beside each counter: half the series, nothing lost
        self.registry = CollectorRegistry(auto_describe=True)
        # prometheus_client adds _total to a counter's name.
        self._in = Counter("rocketmq_messages_in", _help("rocketmq_messages_in_total"), ["topic"],
                           registry=self.registry)
        self._in_bytes = Counter("rocketmq_throughput_in", _help("rocketmq_throughput_in_total"), ["topic"],
                                 registry=self.registry)
        self._out = Counter("rocketmq_messages_out", _help("rocketmq_messages_out_total"),
                            ["topic", "consumer_group"], registry=self.registry)
        self._out_bytes = Counter("rocketmq_throughput_out", _help("rocketmq_throughput_out_total"),
                                  ["topic", "consumer_group"], registry=self.registry)
        self._rpc = Histogram("rocketmq_rpc_latency", _help("rocketmq_rpc_latency"),
                              ["protocol_type", "request_code", "response_code"], buckets=RPC_LATENCY_BUCKETS_MS,
                              registry=self.registry)

    def took(self, topic: str, messages: int, body_bytes: int) -> None:
        self._in.labels(topic).inc(messages)
        self._in_bytes.labels(topic).inc(body_bytes)

    def gave(self, topic: str, group: str, messages: int, record_bytes: int) -> None:
        if messages:
            self._out.labels(topic, group).inc(messages)
            self._out_bytes.labels(topic, group).inc(record_bytes)

    def answered(self, protocol: str, request: str, response: str, seconds: float) -> None:
        self._rpc.labels(protocol, request, response).observe(seconds * 1000)

    def watch(self, gauges: Callable[[], Iterable[GaugeMetricFamily]]) -> None:
        """Serve the families ``gauges()`` makes, made anew at each scrape."""
        self.registry.register(_Gauges(gauges))


class _Gauges(Collector):
    def __init__(self, gauges: Callable[[], Iterable[GaugeMetricFamily]]):
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
