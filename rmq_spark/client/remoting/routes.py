"""What RocketMQ's name servers say: which brokers serve a topic with how many queues, where
each broker listens, which brokers make up the cluster. Routes are cached per topic and asked
again every ``refresh_s`` (RocketMQ's clients poll every 30 s), and at once when a broker
says it does not have the topic or cannot be reached (``forget``).

A cluster that restarts is ridden through as RocketMQ's own clients ride it: a name server
drops a broker's routes the moment its connection closes, and knows nothing after its own
restart until the brokers register again (every 30 s). So reads and sends
(``route(..., last_known=True)``) go on with a topic's last known route while the name servers
have none for it or cannot be reached, and its brokers' own answers decide (a broker that no
longer has the topic says so, and the route is forgotten). The last known routes are the
process's, shared by its transports of the same name servers (RocketMQ's clients share one
MQClientInstance per process): a Spark worker's next task finds what its last one learned.
Where no route was ever known, a cluster with no broker registered is unavailable (retriable,
waited for), not a missing topic.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from rmq_spark.errors import BrokerError, BrokerUnavailableError, TopicNotFoundError
from rmq_spark.structs import PERM_READ, PERM_WRITE, BrokerQueues
from rmq_wire.record import AUTO_CREATE_TOPIC
from rmq_wire.remoting import RequestCode, ResponseCode, fastjson

log = logging.getLogger(__name__)

# (name servers, topic) -> the topic's last route the name servers gave, in this process; and
# those used now, while the name servers have none (said once each, for every client of the process)
_LAST_KNOWN: dict[tuple[str, str], "TopicRoute"] = {}
_ON_LAST_KNOWN: set[tuple[str, str]] = set()
_LAST_KNOWN_LOCK = threading.Lock()

MASTER_ID = "0"  # brokerAddrs key of a broker set's master
REFRESH_S = 30.0
NEW_TOPIC_QUEUES = 4  # what a first send asks of a topic it creates (RocketMQ's producers' defaultTopicQueueNums)


@dataclass(frozen=True)
class TopicRoute:
    """A topic's brokers, in broker-name order."""

    topic: str
    brokers: tuple  # of BrokerQueues

    def readable(self) -> list[tuple[str, int]]:
        """(broker, queue id) of every queue read from."""
        return [(b.broker, q) for b in self.brokers if b.perm & PERM_READ for q in range(b.read_queues)]

    def writable(self) -> list[tuple[str, int]]:
        """(broker, queue id) of every queue written to."""
        return [(b.broker, q) for b in self.brokers if b.perm & PERM_WRITE for q in range(b.write_queues)]

    def named(self, broker: str) -> str:
        """``broker``, or the topic's only broker for "" (a queue named without its broker)."""
        return broker or self.only_broker()

    def address(self, broker: str) -> str:
        """The master address of ``broker`` ("": the topic's only broker)."""
        broker = self.named(broker)
        for entry in self.brokers:
            if entry.broker == broker:
                return entry.address
        served = ", ".join(b.broker for b in self.brokers) or "none"
        raise BrokerError(f"topic {self.topic!r} has no broker {broker!r} (its brokers: {served}): the broker left "
                          "the cluster, or the queue was named wrong")

    def only_broker(self) -> str:
        """The topic's one broker; BrokerError when there are several (a queue id alone is ambiguous)."""
        if len(self.brokers) == 1:
            return self.brokers[0].broker
        raise BrokerError(f"topic {self.topic!r} is served by brokers {', '.join(b.broker for b in self.brokers)}, "
                          "each with its own queue ids: name the broker of the queue too")


def parse_route(topic: str, body: bytes) -> TopicRoute:
    """A GET_ROUTEINFO_BY_TOPIC answer's TopicRouteData; brokers without a master are left out
    (nothing is read from or written to a broker set without one here)."""
    data = fastjson.loads(body)
    addresses = {}
    for broker in data.get("brokerDatas") or []:
        master = (broker.get("brokerAddrs") or {}).get(MASTER_ID)
        if master:
            addresses[broker["brokerName"]] = master
    entries = [BrokerQueues(q["brokerName"], addresses[q["brokerName"]], int(q.get("readQueueNums", 0)),
                            int(q.get("writeQueueNums", 0)), int(q.get("perm", PERM_READ | PERM_WRITE)))
               for q in data.get("queueDatas") or [] if q.get("brokerName") in addresses]
    return TopicRoute(topic, tuple(sorted(entries, key=lambda b: b.broker)))


class NameServers:
    """Asks RocketMQ's name servers, the first that answers (starting from the one that
    answered last), and caches topic routes.

    ``invoke(address, code, fields, body)`` is the transport's call: a RemotingCommand, or
    BrokerUnavailableError / RequestTimeoutError.
    """

    def __init__(self, addresses: list[str], invoke: Callable, refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic):
        self.addresses = addresses
        self._servers = ";".join(sorted(addresses))
        self._invoke = invoke
        self.refresh_s = refresh_s
        self._clock = clock
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._first = 0
        self.clusters: set = set()  # the cluster names the last ``masters`` call saw
        self._lock = threading.Lock()

    def ask(self, code: int, fields: dict | None = None, body: bytes = b""):
        """The first answer of a name server; BrokerUnavailableError naming them if none answers."""
        failure = None
        for turn in range(len(self.addresses)):
            index = (self._first + turn) % len(self.addresses)
            try:
                answer = self._invoke(self.addresses[index], code, fields or {}, body)
            except BrokerError as err:
                failure = err
                continue
            except Exception as err:  # noqa: BLE001 - unreachable, timed out: try the next one
                failure = err
                continue
            self._first = index
            return answer
        if not (isinstance(failure, OSError) or getattr(failure, "retriable", False)):
            raise failure  # a refusal that holds for every name server (TLS, credentials): as it is
        raise BrokerUnavailableError(f"no name server answers ({';'.join(self.addresses)}): {failure}") from failure

    def route(self, topic: str, refresh: bool = False, last_known: bool = True) -> TopicRoute:
        """The topic's route, cached for ``refresh_s``. Where no broker serves it now:
        TopicNotFoundError, or BrokerUnavailableError when no broker at all is registered (the
        cluster is down or restarting). ``last_known``: for reads, sends, pops and offsets, the
        topic's last known route instead while the name servers have none or cannot be reached
        (its brokers say if the topic is gone); False for what must be true now (creating,
        deleting)."""
        now = self._clock()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[0] < self.refresh_s:
            return cached[1]
        try:
            route = self._asked_route(topic)
        except (TopicNotFoundError, BrokerUnavailableError) as away:
            with _LAST_KNOWN_LOCK:
                known = _LAST_KNOWN.get((self._servers, topic)) if last_known else None
                said = (self._servers, topic) in _ON_LAST_KNOWN
                if known is not None:
                    _ON_LAST_KNOWN.add((self._servers, topic))
            if known is None:
                raise
            with self._lock:
                self._routes[topic] = (now, known)  # asked again after refresh_s
            if not said:
                log.warning("topic %s has no route at the name servers now (%s); it is read and written at its last "
                            "known brokers %s until they answer otherwise", topic, away,
                            ", ".join(f"{b.broker} ({b.address})" for b in known.brokers))
            return known
        with self._lock:
            self._routes[topic] = (now, route)
        with _LAST_KNOWN_LOCK:
            _LAST_KNOWN[(self._servers, topic)] = route
            _ON_LAST_KNOWN.discard((self._servers, topic))
        return route

    def _asked_route(self, topic: str) -> TopicRoute:
        answer = self.ask(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if answer.code not in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
            raise BrokerError(f"the name server refused the route of topic {topic!r}: {answer.remark}")
        route = parse_route(topic, answer.body) if answer.code == ResponseCode.SUCCESS else TopicRoute(topic, ())
        if route.brokers:
            return route
        servers = ";".join(self.addresses)
        masters = self.masters()
        if not masters:
            raise BrokerUnavailableError(f"no broker is registered at the name servers {servers} now: the cluster's "
                                         f"brokers are down or restarting (topic {topic!r} is asked for)")
        raise TopicNotFoundError(f"topic {topic!r} is not served by any broker registered at the name servers "
                                 f"{servers} now (brokers {', '.join(masters)}): create it (mqadmin updateTopic, or "
                                 "Admin(name_server=...).create_topic); if its brokers are down or restarting, it is "
                                 "served again once they register")

    def send_route(self, topic: str) -> TopicRoute:
        """The route a send to ``topic`` takes: its own, or where it does not exist yet and the
        brokers create topics on a first send (RocketMQ's autoCreateTopicEnable: they serve TBW102),
        TBW102's brokers with RocketMQ's producer's NEW_TOPIC_QUEUES at most, as RocketMQ's
        producers send a new topic's first messages; TopicNotFoundError otherwise."""
        try:
            return self.route(topic)
        except TopicNotFoundError:
            try:
                stand_in = self.route(AUTO_CREATE_TOPIC)
            except TopicNotFoundError:
                servers = ";".join(self.addresses)
                raise TopicNotFoundError(f"topic {topic!r} is not served by any broker registered at the name servers "
                                         f"{servers} now, and they create no topic on a first send "
                                         f"(autoCreateTopicEnable=false): create it first (mqadmin updateTopic -n "
                                         f"{servers} -c <cluster> -t {topic}); if it exists and its brokers are down "
                                         "or restarting, it is served again once they register") from None
        return TopicRoute(topic, tuple(replace(entry, read_queues=min(entry.read_queues, NEW_TOPIC_QUEUES),
                                               write_queues=min(entry.write_queues, NEW_TOPIC_QUEUES))
                                       for entry in stand_in.brokers if entry.perm & PERM_WRITE))

    def forget(self, topic: str) -> None:
        """A broker said it does not have the topic: nothing of its route is kept."""
        with self._lock:
            self._routes.pop(topic, None)
        with _LAST_KNOWN_LOCK:
            _LAST_KNOWN.pop((self._servers, topic), None)
            _ON_LAST_KNOWN.discard((self._servers, topic))

    def topic_names(self) -> list[str]:
        answer = self.ask(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if answer.code != ResponseCode.SUCCESS:
            raise BrokerError(f"the name server refused the topic list: {answer.remark}")
        return list(fastjson.loads(answer.body).get("topicList") or [])

    def masters(self) -> dict[str, str]:
        """{broker name: master address} of every broker of every cluster."""
        answer = self.ask(RequestCode.GET_BROKER_CLUSTER_INFO)
        if answer.code != ResponseCode.SUCCESS:
            raise BrokerError(f"the name server refused the cluster info: {answer.remark}")
        info = fastjson.loads(answer.body)
        self.clusters = set(info.get("clusterAddrTable") or {})
        table = info.get("brokerAddrTable") or {}
        return {name: entry["brokerAddrs"][MASTER_ID] for name, entry in sorted(table.items())
                if (entry.get("brokerAddrs") or {}).get(MASTER_ID)}
