"""RemotingTransport: the SDK over RocketMQ's remoting protocol, to any RocketMQ 4.x / 5.x
cluster reached through its name servers (broker_sim's remoting door included).

The one module of the SDK that knows RocketMQ's request headers: routes come from the name
servers (``routes.py``), requests go to each broker's master on one connection per broker,
many in flight (``RemotingConnection``), and answers become the SDK's types. A topic's queues
are (broker, queue id). Reads are pulls by offset (``pulls.py``); writes are RocketMQ's own
sends (a batch in RocketMQ's MessageBatch encoding, which a BatchCQ topic stores as one inner
batch); group offsets are RocketMQ's consumer offsets, which its tools show.

Transactions are RocketMQ's transactional messages: a message is prepared alone (a half
message, never in a batch) and ended alone (END_TRANSACTION, which is not idempotent: a commit
sent twice stores the message twice), and a message's UNIQ_KEY finds it once committed
(QUERY_MESSAGE). Not here, because RocketMQ has no such thing: transactions that end a writer's
batches in one step with a fence against replays (the Spark sink builds exactly once on the half
messages: rmq_spark/spark/sink_rocketmq.py), and idempotent sends (a retried send may be stored
twice: sends are at least once, each message carrying the UNIQ_KEY its producer gave it).
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import itertools
import os
import socket
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Iterator, Sequence

import numpy as np
import orjson

from rmq_spark.client.acl_refusals import acl_refusal
from rmq_spark.client.broker_versions import BATCH_CQ, POP, BrokerVersion, refusal
from rmq_spark.client.message_ids import UniqueKeys
from rmq_spark.client.pulls import PULL_SUBSCRIPTION, PULL_SUSPEND, Pulls
from rmq_spark.client.routes import PERM_WRITE, NameServers, TopicRoute
from rmq_spark.client.tls import ssl_context, tls_mismatch
from rmq_spark.client.transport import (
    AckFailure,
    InnerBatch,
    Popped,
    PopQuery,
    RangeChunk,
    Send,
    SendAnswer,
    Stored,
    Transport,
    TransportConfig,
)
from rmq_spark.errors import (
    BrokerError,
    BrokerUnavailableError,
    ConfigError,
    GroupNotFoundError,
    InvalidRequestError,
    MessageTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
    RmqError,
    TopicConflictError,
    TopicNotFoundError,
)
from rmq_spark.structs import (
    BrokerStats,
    CommitResult,
    GroupInfo,
    GroupOffset,
    HalfMessage,
    Message,
    OffsetRange,
    PreparedTransaction,
    QueueOffsets,
    QueueType,
    SinkBatchStatus,
    SinkInfo,
    TopicInfo,
    TransactionInfo,
    is_system_topic,
)
from rmq_wire.codec import Codec, Compression
from rmq_wire.codec.records import read_headers
from rmq_wire.record import (
    AUTO_CREATE_TOPIC,
    PROPERTY_CHECK_IMMUNITY_SECONDS,
    PROPERTY_INNER_NUM,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    SysFlag,
    decode_record,
    find_property,
)
from rmq_wire.remoting import RemotingCommand, RemotingConnection, RequestCode, ResponseCode, fastjson

PRODUCER_GROUP = "rocketmq-batch-producer"  # RocketMQ's sends name a producer group
NEW_TOPIC_QUEUES = 4  # what a first send asks of a topic it creates (RocketMQ's producers' defaultTopicQueueNums)
MAX_SUSPENDED_PULLS = 256  # the queues a long poll of offsets waits on at most, a suspended pull each
TRANSACTIONS_REFUSED = (
    "transactions of batches (a Producer's transaction_id, Transactions) are broker_sim's (through endpoint): "
    "RocketMQ prepares and ends transactional messages one at a time and has no fence against a replayed batch. "
    "Through name servers, send at least once (each message carries a UNIQ_KEY, so readers can drop repeats), or "
    "write a stream exactly once with the Spark sink (deliveryGuarantee=exactlyOnce: RocketMQ's transactional "
    "messages)")
_QUEUE_TYPE_ATTRIBUTE = "queue.type"
_STORED = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, 11, 12)  # 11, 12: the slave's lag: stored
_HEARTBEAT_S = 60.0
_PULL_GROUP = "rocketmq-batch-reader"
_RETRY_PREFIX = "%RETRY%"  # a group's retry topic: %RETRY%{group}
_CONNECT_S = 10.0


def _client_id() -> str:
    """RocketMQ's client id: IP@instance, unique per process and transport."""
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    return f"{host}@rocketmq-batch-{os.getpid()}-{next(_instances)}"


_instances = itertools.count(1)


class RemotingTransport(Transport):
    """Name servers ``name_server`` ("host:port;host:port") and a connection per broker."""

    native_rocketmq = True
    supports_transactions = False
    supports_half_messages = True
    transactions_refused = TRANSACTIONS_REFUSED
    write_form = (Codec.RMQ, Compression.NONE)
    write_form_reason = ("through name servers a batch is RocketMQ's MessageBatch, uncompressed, which RocketMQ's "
                         "brokers and clients read")

    def __init__(self, name_server: str, config: TransportConfig, *, pull_group: str = _PULL_GROUP,
                 sleep: Callable[[float], None] = time.sleep):
        self.endpoint = name_server
        self.config = config
        self.pull_group = pull_group
        self.client_id = _client_id()
        self._sleep = sleep
        self._tls = ssl_context(config) if config.tls else None
        self._connections: dict[str, RemotingConnection] = {}
        self._spoken: set[str] = set()  # addresses that answered once: a later failure is not TLS's
        self._lock = threading.Lock()
        self._heartbeats: dict[tuple[str, str], float] = {}  # (broker address, group) -> when
        self._check_answers: dict[str, Callable[[dict], bool | None]] = {}  # producer group -> its answers
        self.checks_answered: dict[str, bool] = {}  # UNIQ_KEY -> the answer sent (committed or not)
        self._answering: concurrent.futures.ThreadPoolExecutor | None = None  # started by the first check
        self._versions: dict[str, BrokerVersion] = {}  # broker address -> its RocketMQ version
        self._pop_turns = itertools.count()
        self.unique_keys = UniqueKeys()
        self.names = NameServers(name_server.split(";"), self._invoke)
        self._pulls = Pulls(self)

    # --- calls -------------------------------------------------------------------------------

    def _connection(self, address: str) -> RemotingConnection:
        connection = self._connections.get(address)  # one read of a dict: no lock (made and replaced under it)
        if connection is not None and not connection.closed:
            return connection
        if connection is not None and connection.answered:
            self._spoken.add(address)
        try:  # a connection is made or refused quickly; the config's timeout is for answers
            connection = RemotingConnection(address, timeout_s=min(self.config.timeout_ms / 1000, _CONNECT_S),
                                            credentials=self.config.credentials, tls=self._tls)
        except OSError as err:
            raise self._unavailable(address, f"cannot connect to {address}: {err.strerror or err}") from None
        with self._lock:
            current = self._connections.get(address)
            if current is not None and not current.closed:
                connection.close()
                return current
            self._connections[address] = connection
        connection.on_request = lambda command: self._asked(connection, command)
        return connection

    def request(self, address: str, code: int, fields: dict, body: bytes = b"") -> Future:
        """Send a request without waiting: a Future of its answer (ConnectionError when the
        connection fails before it)."""
        connection = self._connection(address)
        try:
            return connection.request(code, fields, body)
        except (OSError, ConnectionError) as err:
            raise self._unavailable(address, f"the connection to {address} failed: {err}") from None

    def request_many(self, address: str, code: int, many_fields: list) -> list[Future]:
        """``request`` of many requests without bodies to one broker, written together."""
        connection = self._connection(address)
        try:
            return connection.request_many(code, many_fields)
        except (OSError, ConnectionError) as err:
            raise self._unavailable(address, f"the connection to {address} failed: {err}") from None

    def wait(self, future: Future, address: str, code: int, timeout_ms: int | None = None) -> RemotingCommand:
        """A request's answer, or RequestTimeoutError / BrokerUnavailableError."""
        timeout_s = (timeout_ms or self.config.timeout_ms) / 1000
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            connection = self._connections.get(address)
            if connection is not None:
                connection.forget(future)
            raise RequestTimeoutError(f"{address} did not answer request {_name(code)} within {timeout_s:.0f} s") \
                from None
        except (ConnectionError, OSError) as err:
            raise self._unavailable(address, f"{address}: {err}") from None

    def _unavailable(self, address: str, failure: str) -> RmqError:
        """BrokerUnavailableError saying ``failure``; or a ConfigError when TLS, on one side only,
        is why (tls.py asks the broker with one more connection, never after the address answered
        us once: TLS cannot be why then, and the probe's handshake would have the broker log a
        TLS client at a plain port): trying again would not help."""
        connection = self._connections.get(address)
        if address in self._spoken or (connection is not None and connection.answered):
            self._spoken.add(address)
            return BrokerUnavailableError(failure)
        mismatch = tls_mismatch(address, self.config)
        if mismatch is not None:
            return ConfigError(f"{mismatch} ({failure})")
        return BrokerUnavailableError(failure)

    def _invoke(self, address: str, code: int, fields: dict, body: bytes = b"",
                timeout_ms: int | None = None) -> RemotingCommand:
        """One request and its answer, retried on a broken connection or a timeout (only for
        requests that are safe to repeat: every one sent through here)."""
        attempts = 1 + self.config.retries
        for attempt in range(attempts):
            try:
                return self.wait(self.request(address, code, fields, body), address, code, timeout_ms)
            except (BrokerUnavailableError, RequestTimeoutError):
                if attempt + 1 == attempts:
                    raise
                self._sleep(self.backoff_s(attempt))
        raise AssertionError("unreachable")

    def _invoke_all(self, calls: list[tuple[str, int, dict]], failures: bool = False) -> list[RemotingCommand]:
        """Many requests (address, code, fields) in flight at once; their answers in order. A
        request that failed is sent again alone (they are all safe to repeat); with
        ``failures`` one that fails again has its error in its place instead of raising it."""
        futures = []
        for address, code, fields in calls:
            try:
                futures.append(self.request(address, code, fields))
            except BrokerUnavailableError:
                futures.append(None)
        answers, down = [], {}  # down: brokers that failed even alone, not asked again in this call
        for (address, code, fields), future in zip(calls, futures):
            try:
                if future is None:
                    raise BrokerUnavailableError(address)
                answers.append(self.wait(future, address, code))
            except (BrokerUnavailableError, RequestTimeoutError):
                try:
                    if address in down:
                        raise down[address]
                    answers.append(self._invoke(address, code, fields))
                except (BrokerUnavailableError, RequestTimeoutError) as err:
                    down[address] = err
                    if not failures:
                        raise
                    answers.append(err)
        return answers

    # --- routes ------------------------------------------------------------------------------

    def route(self, topic: str, refresh: bool = False, last_known: bool = True) -> TopicRoute:
        """The topic's route; while the name servers cannot be reached or list no broker for it, its
        last known route (sends, reads, pops and offsets go on at its brokers, which say if the
        topic is gone); ``last_known=False`` for what must be true now (creating, deleting)."""
        return self.names.route(topic, refresh, last_known)

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
                servers = ";".join(self.names.addresses)
                raise TopicNotFoundError(f"topic {topic!r} is not served by any broker registered at the name servers "
                                         f"{servers} now, and they create no topic on a first send "
                                         f"(autoCreateTopicEnable=false): create it first (mqadmin updateTopic -n "
                                         f"{servers} -c <cluster> -t {topic}); if it exists and its brokers are down "
                                         "or restarting, it is served again once they register") from None
        return TopicRoute(topic, tuple(dataclasses.replace(entry, read_queues=min(entry.read_queues, NEW_TOPIC_QUEUES),
                                                           write_queues=min(entry.write_queues, NEW_TOPIC_QUEUES))
                                       for entry in stand_in.brokers if entry.perm & PERM_WRITE))

    def new_topic(self, name: str) -> TopicInfo | None:
        try:
            route = self.send_route(name)
        except TopicNotFoundError:
            return None
        stand_in = self._topic_info(self.route(AUTO_CREATE_TOPIC))
        brokers = tuple((entry.broker, entry.write_queues) for entry in route.brokers)
        return TopicInfo(name, sum(count for _b, count in brokers), stand_in.queue_type, brokers)

    @staticmethod
    def refused(answer: RemotingCommand, what: str) -> RmqError:
        """A broker's refusal as a typed error (for the pulls)."""
        return _refused(answer, what)

    def broker_of(self, route: TopicRoute, broker: str) -> str:
        """``broker``, or the topic's only broker for "" (a queue named without its broker)."""
        return broker or route.only_broker()

    # --- versions ----------------------------------------------------------------------------

    def broker_version(self, address: str) -> BrokerVersion:
        """The RocketMQ version of the broker at ``address``, as its answer says (every remoting
        answer carries it, a refusal too: broker_versions.py); asked once per broker."""
        with self._lock:
            known = self._versions.get(address)
        if known is None:
            known = BrokerVersion(self._invoke(address, RequestCode.GET_BROKER_RUNTIME_INFO, {}).version)
            with self._lock:
                self._versions[address] = known
        return known

    def require(self, feature: str, broker: str, address: str) -> None:
        """ConfigError naming the broker's version when it lacks ``feature`` (broker_versions.py)."""
        version = self.broker_version(address)
        if not version.has(feature):
            raise refusal(feature, version, f"broker {broker} ({address})")

    # --- topics and offsets --------------------------------------------------------------------

    def create_topic(self, name: str, queue_count: int, queue_type: QueueType) -> TopicInfo:
        if queue_type is QueueType.BATCH_CQ:  # RocketMQ 4 would make a SimpleCQ topic of it, silently
            for broker, address in self.names.masters().items():
                self.require(BATCH_CQ, broker, address)
        existing = self._existing(name)
        if existing is not None:
            if all(count == queue_count for _broker, count in existing.brokers) and existing.queue_type is queue_type:
                return existing
            raise TopicConflictError(f"topic {name!r} exists with {existing.queue_type.value} queues "
                                     f"{dict(existing.brokers)} per broker; asked for {queue_count} "
                                     f"{queue_type.value} queues per broker: delete it first, or use it as it is")
        masters = self.names.masters()
        if not masters:
            raise BrokerUnavailableError(f"the name servers {self.endpoint} know no broker with a master")
        fields = {"topic": name, "defaultTopic": AUTO_CREATE_TOPIC, "readQueueNums": queue_count,
                  "writeQueueNums": queue_count, "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                  "order": "false"}
        if queue_type is QueueType.BATCH_CQ:
            fields["attributes"] = f"+{_QUEUE_TYPE_ATTRIBUTE}=BatchCQ"
        for broker, address in masters.items():
            answer = self._invoke(address, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {broker} ({address}) refused to create topic {name!r}")
        deadline = time.monotonic() + self.config.timeout_ms / 1000
        while True:  # the brokers register the topic with the name servers
            try:
                route = self.route(name, refresh=True, last_known=False)
                if {b.broker for b in route.brokers} >= set(masters):
                    break
            except TopicNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise RequestTimeoutError(f"topic {name!r} was created on {', '.join(masters)} but the name servers "
                                          f"do not route it after {self.config.timeout_ms} ms")
            self._sleep(0.1)
        return TopicInfo(name, queue_count * len(masters), queue_type,
                         tuple((broker, queue_count) for broker in sorted(masters)))

    def _existing(self, name: str) -> TopicInfo | None:
        try:
            route = self.route(name, refresh=True, last_known=False)
        except TopicNotFoundError:
            return None
        return self._topic_info(route)

    def _topic_info(self, route: TopicRoute) -> TopicInfo:
        """The topic as its route and its first broker's config say (the queue type)."""
        answer = self._invoke(route.brokers[0].address, RequestCode.GET_TOPIC_CONFIG, {"topic": route.topic})
        queue_type = QueueType.SIMPLE_CQ
        if answer.code == ResponseCode.SUCCESS:
            config = fastjson.loads(answer.body)
            queue_type = _queue_type(config.get("topicConfig", config))
        brokers = tuple((b.broker, b.read_queues) for b in route.brokers)
        return TopicInfo(route.topic, sum(count for _b, count in brokers), queue_type, brokers)

    def delete_topic(self, name: str) -> bool:
        try:
            route = self.route(name, refresh=True, last_known=False)
        except TopicNotFoundError:
            return False
        for entry in route.brokers:
            answer = self._invoke(entry.address, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name})
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {entry.broker} refused to delete topic {name!r}")
        for address in self.names.addresses:
            try:
                self._invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": name})
            except RmqError:
                pass  # that name server forgets it when the brokers register again
        self.names.forget(name)
        return True

    def list_topics(self) -> list[TopicInfo]:
        """User topics (not RocketMQ's system, retry and dead-letter topics), from each
        broker's topic configs, those of every topic at once (GET_ALL_TOPIC_CONFIG, a request
        per broker).

        A broker that keeps that table for admins (broker_sim with ACLs; RocketMQ leaves it
        open) refuses it to other accounts. Then the topics are those the name servers list
        (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, open, as mqadmin topicList lists them), each with
        its own config (GET_TOPIC_CONFIG, all in flight), which a broker gives an account that
        may publish or subscribe to the topic; the others are left out. A list is for choosing
        what to use: a topic the account may not use would be a name without its queue type
        (which is in the config refused), and would fail the whole of a ``topicPattern`` read
        that matched it, so the list is what the account may use (an admin's: every topic, as
        before). An account that may use none of the topics (or whose signature is wrong) gets
        the broker's refusal, not an empty list that would read as "no topics"."""
        masters = self.names.masters()
        system = set(masters) | self.names.clusters
        answers = self._invoke_all([(address, RequestCode.GET_ALL_TOPIC_CONFIG, {}) for address in masters.values()])
        configs = []  # (broker, topic, config)
        for broker, answer in zip(masters, answers):
            if answer.code == ResponseCode.NO_PERMISSION:
                configs = self._usable_topic_configs(masters, system)
                break
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {broker} refused its topic list")
            configs.extend((broker, name, config)
                           for name, config in (fastjson.loads(answer.body).get("topicConfigTable") or {}).items())
        found: dict[str, list] = {}
        types: dict[str, QueueType] = {}
        for broker, name, config in configs:
            if _is_system_topic(name, system):
                continue
            found.setdefault(name, []).append((broker, int(config.get("readQueueNums", 0))))
            types[name] = _queue_type(config)
        return [TopicInfo(name, sum(c for _b, c in brokers), types[name], tuple(sorted(brokers)))
                for name, brokers in sorted(found.items())]

    def _usable_topic_configs(self, masters: dict[str, str], system: set) -> list:
        """(broker, topic, config) of each topic the name servers list that the account may
        use, asking every broker for each (one that does not have it says so); a refusal when
        it may use none."""
        names = [name for name in self.names.topic_names() if not _is_system_topic(name, system)]
        asked = [(broker, address, name) for name in names for broker, address in masters.items()]
        answers = self._invoke_all([(address, RequestCode.GET_TOPIC_CONFIG, {"topic": name})
                                    for _broker, address, name in asked])
        configs, refused = [], None
        for (broker, _address, name), answer in zip(asked, answers):
            if answer.code == ResponseCode.SUCCESS:
                config = fastjson.loads(answer.body)
                configs.append((broker, name, config.get("topicConfig", config)))
            elif answer.code == ResponseCode.NO_PERMISSION:
                refused = refused or answer
            elif answer.code != ResponseCode.TOPIC_NOT_EXIST:
                raise _refused(answer, f"broker {broker} refused the config of topic {name!r}")
        if not configs and refused is not None:
            raise _refused(refused, f"listing topics: the account may use none of the {len(names)} topics the name "
                                    f"servers {self.endpoint} list (only an admin lists them all)")
        return configs

    def _topic_configs(self, masters: dict[str, str]) -> dict[str, dict]:
        """Each broker's topic configs, by topic name (system topics too)."""
        answers = self._invoke_all([(address, RequestCode.GET_ALL_TOPIC_CONFIG, {}) for address in masters.values()])
        tables = {}
        for broker, answer in zip(masters, answers):
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {broker} refused its topic list")
            tables[broker] = fastjson.loads(answer.body).get("topicConfigTable") or {}
        return tables

    def describe_topic(self, name: str) -> tuple[TopicInfo, list[QueueOffsets]]:
        route = self.route(name)
        return self._topic_info(route), self.offsets([name])[name]

    def offsets(self, topics: list[str], unreachable: set | None = None, past: dict | None = None,
                wait_ms: int = 0) -> dict[str, list[QueueOffsets]]:
        """Every readable queue's min / max offsets: a topic stats request per (topic, broker),
        all in flight at once (with ``past`` and ``wait_ms``, once ``_wait_past`` returns)."""
        if past and wait_ms > 0:
            self._wait_past(past, wait_ms)
        if not topics:
            topics = [t.name for t in self.list_topics()]
        # A topic's last known route while the name servers have none: its brokers away are
        # reported unreachable (in ``unreachable``, when given), not the topic missing.
        routes = {topic: self.route(topic) for topic in topics}
        calls = [(topic, entry) for topic, route in routes.items() for entry in route.brokers]
        answers = self._invoke_all([(entry.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
                                    for topic, entry in calls], failures=unreachable is not None)
        out: dict[str, list[QueueOffsets]] = {topic: [] for topic in topics}
        for (topic, entry), answer in zip(calls, answers):
            if isinstance(answer, RmqError):  # the broker cannot be reached now
                unreachable.add(entry.broker)
                continue
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                self.names.forget(topic)
                raise TopicNotFoundError(f"topic {topic!r} is gone from broker {entry.broker}: {answer.remark}")
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {entry.broker} refused the offsets of topic {topic!r}")
            table = fastjson.loads(answer.body).get("offsetTable") or {}
            for queue, offsets in table.items():
                queue = dict(queue)
                if queue.get("brokerName", entry.broker) == entry.broker and queue["queueId"] < entry.read_queues:
                    out[topic].append(QueueOffsets(topic, int(queue["queueId"]), int(offsets["minOffset"]),
                                                   int(offsets["maxOffset"]), entry.broker))
        for queues in out.values():
            queues.sort(key=lambda q: (q.broker, q.queue_id))
        return out

    def _wait_past(self, past: dict, wait_ms: int) -> None:
        """RocketMQ's long polling: a suspended PULL_MESSAGE of one message for each queue of
        ``past`` at its offset, all in flight; returns once one is answered with messages (or
        anything but "none yet": a queue gone, a broker away), or after ``wait_ms``. The rest are
        forgotten (the brokers answer them into the void when their wait ends). More queues than
        ``MAX_SUSPENDED_PULLS`` are not waited for (a pull held for each would load the brokers
        more than polling): the answer comes at once."""
        if len(past) > MAX_SUSPENDED_PULLS:
            return
        futures: dict[Future, str] = {}
        try:
            for (topic, broker, queue_id), offset in past.items():
                route = self.route(topic)
                address = route.address(self.broker_of(route, broker))
                futures[self.request(address, RequestCode.PULL_MESSAGE, {
                    "consumerGroup": self.pull_group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                    "maxMsgNums": 1, "sysFlag": PULL_SUSPEND | PULL_SUBSCRIPTION, "commitOffset": 0,
                    "suspendTimeoutMillis": wait_ms, "subscription": "*", "subVersion": 0,
                    "expressionType": "TAG"})] = address
            deadline = time.monotonic() + wait_ms / 1000 + 1  # a second for the answers to travel
            pending = set(futures)
            while pending and (left := deadline - time.monotonic()) > 0:
                done, pending = concurrent.futures.wait(pending, left, concurrent.futures.FIRST_COMPLETED)
                if any(f.exception() is not None or f.result().code != ResponseCode.PULL_NOT_FOUND for f in done):
                    return
        except RmqError:  # a route or a broker cannot be had now: the offsets say what is there
            return
        finally:
            for future, address in futures.items():
                connection = self._connections.get(address)
                if connection is not None and not future.done():
                    connection.forget(future)

    def offsets_for_timestamp(self, topic: str, timestamp_ms: int, queue_ids: list[int],
                              broker: str = "") -> dict[int, int]:
        route = self.route(topic)
        broker = self.broker_of(route, broker)
        address = route.address(broker)
        if not queue_ids:
            queue_ids = [q for b, q in route.readable() if b == broker]
        answers = self._invoke_all([(address, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                     {"topic": topic, "queueId": q, "timestamp": timestamp_ms}) for q in queue_ids])
        out = {}
        for queue_id, answer in zip(queue_ids, answers):
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"broker {broker} refused the offset by time of {topic!r} queue {queue_id}")
            out[queue_id] = int(answer.ext_fields["offset"])
        return self._stored_from(address, topic, out, timestamp_ms)

    def _stored_from(self, address: str, topic: str, offsets: dict[int, int], timestamp_ms: int) -> dict[int, int]:
        """The first offsets stored at or after ``timestamp_ms``, from a broker's answers
        ({queue id: offset}): the message at each is looked at (one pull each, all in flight),
        and a unit stored before the time is stepped over (RocketMQ 5's BatchCQ answers a time
        after its last message with its last batch's offset)."""
        offsets, check = dict(offsets), dict(offsets)
        for _ in range(8):
            if not check:
                break
            calls = [(address, RequestCode.PULL_MESSAGE, {
                "consumerGroup": self.pull_group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                "maxMsgNums": 1, "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                "subVersion": 0, "expressionType": "TAG"}) for queue_id, offset in check.items()]
            answers, check = self._invoke_all(calls), {}
            for (_address, _code, fields), answer in zip(calls, answers):
                if (answer.code == ResponseCode.SUCCESS and answer.body
                        and int(read_headers(answer.body).store_ms[0]) < timestamp_ms):
                    queue_id = fields["queueId"]
                    offsets[queue_id] = check[queue_id] = int(answer.ext_fields["nextBeginOffset"])
        return offsets

    def commit_group_offsets(self, group: str, offsets: dict[tuple[str, str, int], int]) -> None:
        """RocketMQ's consumer offsets (UPDATE_CONSUMER_OFFSET), which its tools show. The
        group is first announced to each broker by a heartbeat, then unregistered: the broker
        makes the group's retry topic, which ``mqadmin consumerProgress`` looks up, and no
        consumer of the group counts this client when it shares out queues."""
        calls = []
        for (topic, broker, queue_id), offset in offsets.items():
            route = self.route(topic)
            address = route.address(self.broker_of(route, broker))
            self._announce(address, group, topic)
            calls.append((address, RequestCode.UPDATE_CONSUMER_OFFSET,
                          {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}))
        for (address, _code, fields), answer in zip(calls, self._invoke_all(calls)):
            if answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise GroupNotFoundError(f"consumer group {group!r} does not exist on the broker at {address}: create "
                                         f"it (mqadmin updateSubGroup -g {group}) or turn on "
                                         "autoCreateSubscriptionGroup")
            if answer.code != ResponseCode.SUCCESS:
                raise _refused(answer, f"the broker at {address} refused the offset of {fields['topic']!r} queue "
                                       f"{fields['queueId']} for group {group!r}")

    def _announce(self, address: str, group: str, topic: str) -> None:
        key = (address, group)
        if time.monotonic() - self._heartbeats.get(key, -_HEARTBEAT_S) < _HEARTBEAT_S:
            return
        data = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
                "topic": topic, "subString": "*", "classFilterMode": False, "tagsSet": [], "codeSet": [],
                "subVersion": int(time.time() * 1000), "expressionType": "TAG"}]}]}
        self._invoke(address, RequestCode.HEART_BEAT, {}, orjson.dumps(data))
        self._invoke(address, RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "consumerGroup": group})
        self._heartbeats[key] = time.monotonic()

    def group_offsets(self, group: str, topics: list[str]) -> list[GroupOffset]:
        if not topics:
            return self._group_offsets_everywhere(group)
        calls, queues = [], []
        for topic in topics:
            route = self.route(topic)
            for broker, queue_id in route.readable():
                fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "setZeroIfNotFound": "false"}
                calls.append((route.address(broker), RequestCode.QUERY_CONSUMER_OFFSET, fields))
                queues.append((topic, broker, queue_id))
        out = []
        for (topic, broker, queue_id), answer in zip(queues, self._invoke_all(calls)):
            if answer.code == ResponseCode.SUCCESS:
                out.append(GroupOffset(group, topic, queue_id, int(answer.ext_fields["offset"]), broker))
            elif answer.code not in (ResponseCode.QUERY_NOT_FOUND, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST):
                raise _refused(answer, f"broker {broker} refused group {group!r}'s offset of {topic!r} queue "
                                       f"{queue_id}")
        return out

    def _group_offsets_everywhere(self, group: str) -> list[GroupOffset]:
        """Every topic's offsets of ``group``, as each broker's consume stats list them."""
        masters = self.names.masters()
        answers = self._invoke_all([(address, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})
                                    for address in masters.values()])
        out = []
        for broker, answer in zip(masters, answers):
            if answer.code != ResponseCode.SUCCESS:
                continue  # the group has nothing on that broker
            for queue, stats in (fastjson.loads(answer.body).get("offsetTable") or {}).items():
                queue = dict(queue)
                if not queue["topic"].startswith("%RETRY%"):
                    out.append(GroupOffset(group, queue["topic"], int(queue["queueId"]),
                                           int(stats["consumerOffset"]), queue.get("brokerName", broker)))
        return sorted(out, key=lambda o: (o.topic, o.broker, o.queue_id))

    def groups(self, names: list[str]) -> list[GroupInfo]:
        """The groups named, or every group with a retry topic on a broker (RocketMQ makes it at a
        consumer's heartbeat; ``mqadmin consumerProgress`` finds groups so), each with the live
        consumers the brokers know from their heartbeats (GET_CONSUMER_LIST_BY_GROUP)."""
        masters = self.names.masters()
        if not names:
            names = sorted({name[len(_RETRY_PREFIX):] for table in self._topic_configs(masters).values()
                            for name in table if name.startswith(_RETRY_PREFIX)})
        calls = [(group, broker, address) for group in names for broker, address in masters.items()]
        answers = self._invoke_all([(address, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
                                    for group, _broker, address in calls])
        consumers: dict[str, set] = {group: set() for group in names}
        for (group, broker, _address), answer in zip(calls, answers):
            if answer.code == ResponseCode.SUCCESS:
                consumers[group].update(fastjson.loads(answer.body).get("consumerIdList") or [])
            elif answer.code != ResponseCode.SYSTEM_ERROR:  # SYSTEM_ERROR: no consumer of the group is connected
                raise _refused(answer, f"broker {broker} refused the consumers of group {group!r}")
        return [GroupInfo(group, tuple(sorted(consumers[group]))) for group in names]

    def broker_stats(self) -> BrokerStats:
        raise ConfigError("broker stats are broker_sim's (rmq-admin broker stats, through its endpoint); through "
                          "name servers ask each broker with mqadmin brokerStatus")

    # --- messages ----------------------------------------------------------------------------

    def send_many(self, sends: list[Send], timeout_ms: int, answer: SendAnswer) -> None:
        """Each send a request to its queue's broker, all in flight at once; ``answer`` is
        called once every one is answered or its time is over (on a connection's thread, or
        a timer's)."""
        call = _SendCall(len(sends), answer)
        for index, send in enumerate(sends):
            try:
                address, code, fields, body, ids = self._send_request(send)
                future = self.request(address, code, fields, body)
            except RmqError as error:
                call.done(index, error)
                continue
            except (TypeError, ValueError) as error:  # e.g. a property that is not a string
                call.done(index, ConfigError(f"the message cannot be sent: {error}"))
                continue
            call.watch(index, future, lambda result, s=send, i=ids, a=address: self._stored(s, result, i, a))
        call.start(timeout_ms / 1000)

    def _send_request(self, send: Send):
        """(address, code, fields, body, message ids) of one send."""
        content = send.content
        form = (content.codec, content.compression) if isinstance(content, InnerBatch) else self.write_form
        self.check_write(*form, send.transaction_id)
        route = self.send_route(send.topic)
        broker = self.broker_of(route, send.broker)
        address = route.address(broker)
        born = int(time.time() * 1000)
        fields = {"a": PRODUCER_GROUP, "b": send.topic, "c": AUTO_CREATE_TOPIC, "d": NEW_TOPIC_QUEUES,
                  "e": send.queue_id, "g": born,
                  "h": 0, "j": 0, "k": "false", "n": broker}
        if isinstance(content, Message):
            unique_key = (content.properties or {}).get("UNIQ_KEY") or self.unique_keys.next()
            properties = {**(content.properties or {}), "UNIQ_KEY": unique_key, "WAIT": "true"}
            if content.tags:
                properties["TAGS"] = content.tags
            if content.keys:
                properties["KEYS"] = content.keys
            fields.update(f=0, i=_properties_text(properties), m="false")
            return address, RequestCode.SEND_MESSAGE_V2, fields, bytes(content.body), (unique_key,)
        # The batch's own UNIQ_KEY makes it one inner batch. RocketMQ 4 has none, and copies a
        # batch's properties into each of its messages, where a second UNIQ_KEY would hide each
        # message's own from RocketMQ's clients (the last one wins): it is left out there.
        properties = {"UNIQ_KEY": self.unique_keys.next()} if self.broker_version(address).has(BATCH_CQ) else {}
        properties["WAIT"] = "true"
        if isinstance(content, InnerBatch) and content.tags:
            properties["TAGS"] = content.tags  # a BatchCQ unit's tag
        ids = content.message_ids  # the producer's (a list, or an Arrow array of a batch of rows)
        fields.update(f=0, i=_properties_text(properties), m="true")
        return address, RequestCode.SEND_BATCH_MESSAGE, fields, bytes(content.payload), ids

    def _stored(self, send: Send, answer: RemotingCommand, ids: tuple, address: str) -> Stored | RmqError:
        if answer.code not in _STORED:
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                self.names.forget(send.topic)
            return _refused(answer, f"the broker at {address} refused a send to {send.topic!r} queue "
                                    f"{send.queue_id}")
        head = answer.ext_fields
        count = 1 if isinstance(send.content, Message) else send.content.count
        if len(ids) == 0:
            offset_ids = (head.get("msgId") or "").split(",")
            ids = tuple(offset_ids) if len(offset_ids) == count else tuple(f"{offset_ids[0]}-{i}" for i in range(count))
        return Stored(int(head.get("queueId", send.queue_id)), int(head.get("queueOffset", -1)), count, ids, 0)

    def read_ranges(self, ranges: Sequence[OffsetRange], max_bytes: int, tag_filter: str) -> Iterator[RangeChunk]:
        return self._pulls.read(ranges, max_bytes, tag_filter)

    # --- pop ---------------------------------------------------------------------------------

    def pop(self, query: PopQuery) -> Popped:
        """A POP_MESSAGE; the acks it carries go first, as a batch ack (RocketMQ's pop takes none)."""
        if query.ack_handles:
            failures = self.ack(query.group, list(query.ack_handles))
            return self.pop(query._replace(ack_handles=()))._replace(ack_failures=failures)
        route = self.route(query.topic)
        readers = [b for b in route.brokers if b.read_queues]
        if query.queue_id >= 0:
            entry = next(b for b in route.brokers if b.broker == route.only_broker())
        else:  # a pop goes to one broker: the brokers in turn
            entry = readers[next(self._pop_turns) % len(readers)]
        self.require(POP, entry.broker, entry.address)
        fields = {"consumerGroup": query.group, "topic": query.topic, "queueId": query.queue_id,
                  "maxMsgNums": query.max_messages, "invisibleTime": query.invisible_ms, "pollTime": query.poll_ms,
                  "bornTime": int(time.time() * 1000), "initMode": 0, "expType": "TAG",
                  "exp": query.tag_filter or "*", "order": str(query.orderly).lower()}
        answer = self._invoke(entry.address, RequestCode.POP_MESSAGE, fields,
                              timeout_ms=self.config.timeout_ms + query.poll_ms)
        head = answer.ext_fields
        invisible_until = int(head.get("popTime", 0)) + int(head.get("invisibleTime", query.invisible_ms))
        if answer.code != ResponseCode.SUCCESS:
            if answer.code not in (ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL, ResponseCode.PULL_NOT_FOUND,
                                   ResponseCode.NO_MESSAGE):
                raise _refused(answer, f"broker {entry.broker} refused a pop of {query.topic!r} by {query.group!r}")
            return Popped(query.topic, invisible_until, answer.code == ResponseCode.POLLING_FULL, (), (), (), (), (),
                          (), (), memoryview(b""), entry.broker)
        return _popped(query, answer, entry.broker, invisible_until)

    def ack(self, group: str, receipt_handles: list[str]) -> list[AckFailure]:
        """One BATCH_ACK_MESSAGE a broker (RocketMQ 5.1.3 and later, and broker_sim), else an
        ACK_MESSAGE a handle. A batch ack's answer is one for all its handles: a refusal fails
        each of them (RocketMQ answers SUCCESS whatever it could ack)."""
        failures, by_address = [], {}
        for index, handle in enumerate(receipt_handles):
            try:
                receipt = _Receipt.parse(handle)
                address = self.route(receipt.topic).address(receipt.broker)
            except (ValueError, RmqError) as err:
                failures.append(AckFailure(index, True, f"not a receipt handle of this client: {err}"))
                continue
            by_address.setdefault(address, []).append((index, receipt))
        calls, sent = [], []
        for address, receipts in by_address.items():
            body = _batch_ack_body(group, receipts) if len(receipts) > 1 else None
            if body is not None and self.broker_version(address).batch_ack:
                answer = self._invoke(address, RequestCode.BATCH_ACK_MESSAGE, {}, body)
                if answer.code != ResponseCode.SUCCESS:
                    failures += [AckFailure(index, answer.code != ResponseCode.NO_MESSAGE, answer.remark or "")
                                 for index, _receipt in receipts]
                continue
            calls += [(address, RequestCode.ACK_MESSAGE, receipt.fields(group)) for _index, receipt in receipts]
            sent += [index for index, _receipt in receipts]
        for index, answer in zip(sent, self._invoke_all(calls)):
            if answer.code != ResponseCode.SUCCESS:
                failures.append(AckFailure(index, answer.code != ResponseCode.NO_MESSAGE, answer.remark or ""))
        return sorted(failures)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> tuple[str, int]:
        try:
            receipt = _Receipt.parse(receipt_handle)
        except ValueError as err:
            raise InvalidRequestError(f"not a receipt handle of this client: {err}") from None
        address = self.route(receipt.topic).address(receipt.broker)
        answer = self._invoke(address, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                              {**receipt.fields(group), "invisibleTime": invisible_ms})
        if answer.code != ResponseCode.SUCCESS:
            raise _refused(answer, f"broker {receipt.broker} refused to change the invisible time")
        head = answer.ext_fields
        renewed = receipt.renewed(int(head["popTime"]), int(head["invisibleTime"]), head.get("reviveQid", "0"))
        return renewed.encode(), int(head["popTime"]) + int(head["invisibleTime"])

    # --- RocketMQ's transactional messages -------------------------------------------------------

    def send_half(self, topic: str, queue: tuple[str, int], body: bytes, properties: dict, group: str,
                  check_immunity_s: int = 0) -> Future:
        """Prepare one message under RocketMQ's transactional messages, as producer ``group``
        (whose name END_TRANSACTION must repeat); a Future of its HalfMessage, or of the
        RmqError that refused it. ``properties`` are the message's own (TAGS, KEYS, ...);
        ``check_immunity_s``: the broker checks it no sooner (CHECK_IMMUNITY_TIME_IN_SECONDS; at
        least its transactionTimeOut; 0: the broker's own). A
        broker that sheds load (SYSTEM_BUSY: the request waited too long in its queue and was
        not run) is asked again, as RocketMQ's producers do."""
        broker, queue_id = queue
        route = self.send_route(topic)
        address = route.address(self.broker_of(route, broker))
        self._as_producer(address, group)
        unique_key = self.unique_keys.next()
        own = {**properties, PROPERTY_CHECK_IMMUNITY_SECONDS: str(check_immunity_s)} if check_immunity_s else properties
        text = _properties_text({**own, "UNIQ_KEY": unique_key, "WAIT": "true",
                                 PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: group})
        fields = {"a": group, "b": topic, "c": AUTO_CREATE_TOPIC, "d": NEW_TOPIC_QUEUES, "e": queue_id,
                  "f": SysFlag.TRANSACTION_PREPARED,
                  "g": int(time.time() * 1000), "h": 0, "i": text, "j": 0, "k": "false", "m": "false", "n": broker}
        half: Future = Future()

        def send(attempt: int) -> None:
            try:
                self.request(address, RequestCode.SEND_MESSAGE_V2, fields, body).add_done_callback(
                    lambda future: answered(future, attempt))
            except RmqError as error:
                half.set_exception(error)

        def answered(future: Future, attempt: int) -> None:
            try:
                answer = future.result()
            except (ConnectionError, OSError) as err:
                half.set_exception(self._unavailable(address, f"{address}: {err}"))
                return
            if answer.code == ResponseCode.SYSTEM_BUSY and attempt < self.config.retries:
                threading.Timer(self.backoff_s(attempt), send, (attempt + 1,)).start()
                return
            if answer.code not in _STORED:
                half.set_exception(_refused(answer, f"the broker at {address} refused a transactional message "
                                                    f"to {topic!r} queue {queue_id}"))
                return
            head = answer.ext_fields
            half.set_result(HalfMessage(broker, topic, head.get("transactionId") or unique_key,
                                        int(head["msgId"][-16:], 16), int(head.get("queueOffset", 0))))

        send(0)
        return half

    def end_halves(self, halves: Sequence[HalfMessage], commit: bool, group: str, timeout_ms: int | None = None,
                   in_flight: int = 128, ended: Callable[[int], None] | None = None) -> None:
        """END_TRANSACTION for each half message, committing or rolling it back, ``in_flight``
        at a time, each answered (RocketMQ's clients send them oneway); raises the first
        refusal or failure once those in flight are answered. ``ended(n)`` is told how many
        are answered so far. An end is sent again only when the broker shed it unrun
        (SYSTEM_BUSY, its flow control) or refused it before it ran (ILLEGAL_OPERATION: RocketMQ
        5 takes a producer's end of a half message older than its CHECK_IMMUNITY_TIME_IN_SECONDS
        only as the answer to a check, so it is sent again as one): a commit run twice stores the
        message twice."""
        decision = "8" if commit else "12"  # MessageSysFlag.TRANSACTION_COMMIT_TYPE / ROLLBACK_TYPE
        pending: deque = deque()
        done = 0

        def send(half: HalfMessage, attempt: int, as_answer: bool = False) -> None:
            route = self.route(half.topic)
            address = route.address(self.broker_of(route, half.broker))
            self._as_producer(address, group)
            fields = {"producerGroup": group, "tranStateTableOffset": str(half.queue_offset),
                      "commitLogOffset": str(half.commit_log_offset), "commitOrRollback": decision,
                      "fromTransactionCheck": "true" if as_answer else "false", "msgId": half.unique_key,
                      "transactionId": half.unique_key, "topic": half.topic, "bname": half.broker}
            future = self.request(address, RequestCode.END_TRANSACTION, fields)
            pending.append((address, half, attempt, as_answer, future))

        def settle(upto: int) -> None:
            nonlocal done
            while len(pending) > upto:
                address, half, attempt, as_answer, future = pending.popleft()
                answer = self.wait(future, address, RequestCode.END_TRANSACTION, timeout_ms)
                if answer.code == ResponseCode.SYSTEM_BUSY and attempt < self.config.retries:
                    self._sleep(self.backoff_s(attempt))
                    send(half, attempt + 1, as_answer)
                    continue
                if answer.code == ResponseCode.ILLEGAL_OPERATION and not as_answer:
                    send(half, attempt, True)
                    continue
                if answer.code != ResponseCode.SUCCESS:
                    raise _refused(answer, f"the broker at {address} refused to {'commit' if commit else 'roll back'} "
                                           f"transactional message {half.unique_key} of {half.topic!r}")
                done += 1
                if ended is not None:
                    ended(done)

        for half in halves:
            send(half, 0)
            settle(in_flight)
        settle(0)

    def answer_checks(self, group: str, answer: Callable[[dict], bool | None]) -> None:
        """Answer the broker's checks of producer ``group``'s half messages (CHECK_TRANSACTION_STATE)
        while this transport lives: ``answer(properties)`` of the checked half message says commit
        (True), roll back (False) or not known yet (None: the broker asks again later). The
        transport says it is a producer of ``group`` (HEART_BEAT) to each broker it sends that
        group's half messages to or ends them on, so that the broker's checks come to it.

        RocketMQ checks a copy: before it asks, its check service writes the half message again
        (a new commit log offset) and takes the answer as the end of that copy alone."""
        self._check_answers[group] = answer

    def _as_producer(self, address: str, group: str) -> None:
        """Tell the broker at ``address`` that this client produces for ``group`` (and renew it
        before the broker forgets it, 120 s without one), when its checks are answered here."""
        if group not in self._check_answers:
            return
        key = (address, group)
        if time.monotonic() - self._heartbeats.get(key, -_HEARTBEAT_S) < _HEARTBEAT_S:
            return
        self._heartbeats[key] = time.monotonic()
        data = {"clientID": self.client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
        self.request(address, RequestCode.HEART_BEAT, {}, orjson.dumps(data))  # its answer is not needed

    def _asked(self, connection: RemotingConnection, command: RemotingCommand) -> None:
        """A request the broker sent on ``connection``: a check of a half message is answered
        on the transport's thread for answers (an answer may read files, and a broker may check
        thousands at once; the connection's reader must not wait)."""
        if command.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        with self._lock:
            if self._answering is None:
                self._answering = concurrent.futures.ThreadPoolExecutor(1, "rocketmq-batch-check")
            try:
                self._answering.submit(self._answer_check, connection, command)
            except RuntimeError:  # closed meanwhile: the broker asks again
                pass

    def _answer_check(self, connection: RemotingConnection, command: RemotingCommand) -> None:
        head = command.ext_fields or {}
        try:
            record = decode_record(memoryview(command.body or b""), 0)
        except (ValueError, IndexError):
            return  # not a message: nothing to answer
        group = record.properties.get(PROPERTY_PRODUCER_GROUP)
        answer = self._check_answers.get(group)
        if answer is None:
            return
        try:
            commit = answer(record.properties)
        except Exception:  # noqa: BLE001 - an answer not known is asked again
            return
        if commit is None:
            return
        unique_key = record.properties.get("UNIQ_KEY") or head.get("transactionId", "")
        fields = {"producerGroup": group, "tranStateTableOffset": head.get("tranStateTableOffset", "0"),
                  "commitLogOffset": head.get("commitLogOffset", "0"), "commitOrRollback": "8" if commit else "12",
                  "fromTransactionCheck": "true", "msgId": head.get("msgId", unique_key),
                  "transactionId": head.get("transactionId", unique_key), "topic": record.topic,
                  "bname": head.get("brokerName", "")}
        try:
            connection.oneway(RequestCode.END_TRANSACTION, fields)  # as RocketMQ's producers answer
        except (ConnectionError, OSError):
            return
        self.checks_answered[unique_key] = commit

    def message_exists(self, topic: str, broker: str, unique_key: str) -> bool:
        """Whether ``broker`` stores a message of ``topic`` with this UNIQ_KEY: a committed half
        message (the broker's index of keys; RocketMQ's mqadmin queryMsgByUniqueKey)."""
        route = self.route(topic)
        address = route.address(self.broker_of(route, broker))
        answer = self._invoke(address, RequestCode.QUERY_MESSAGE, {
            "topic": topic, "key": unique_key, "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**63 - 1,
            "_UNIQUE_KEY_QUERY": "true"})
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            return False
        if answer.code != ResponseCode.SUCCESS:
            raise _refused(answer, f"the broker at {address} could not look up message {unique_key} of {topic!r}")
        body, at = memoryview(answer.body or b""), 0
        while at < len(body):  # the index finds keys by hash: the records say which are this one
            record = decode_record(body, at)
            if record.topic == topic and record.properties.get("UNIQ_KEY") == unique_key:
                return True
            at += record.total_size
        return False

    # --- transactions: not RocketMQ's --------------------------------------------------------------

    def end_transactions(self, commit: bool, transactions: list[PreparedTransaction],
                         sink_batch: tuple[str, int] | None, timeout_ms: int) -> CommitResult:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def sink_batch(self, sink_id: str, batch_id: int) -> SinkBatchStatus:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def list_transactions(self, transaction_ids: list[str]) -> list[TransactionInfo]:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def list_sinks(self) -> list[SinkInfo]:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def release_sink(self, sink_id: str) -> str | None:
        raise ConfigError(TRANSACTIONS_REFUSED)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
            if self._answering is not None:
                self._answering.shutdown(wait=False, cancel_futures=True)
        for connection in connections:
            connection.close()


class _SendCall:
    """The answers of one send_many: outcomes filled as requests are answered, ``answer``
    called once, when the last is in or the time is over (those left then time out)."""

    def __init__(self, count: int, answer: SendAnswer):
        self.outcomes: list = [None] * count
        self.left = count
        self.answer = answer
        self.watched: list = []
        self._started = self._finished = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def watch(self, index: int, future: Future, convert: Callable) -> None:
        self.watched.append((index, future))

        def done(f: Future) -> None:
            if f.cancelled():
                return
            error = f.exception()
            self.done(index, convert(f.result()) if error is None else BrokerUnavailableError(str(error)))
        future.add_done_callback(done)

    def start(self, timeout_s: float) -> None:
        with self._lock:
            self._started = True
            if self.left:
                self._timer = threading.Timer(timeout_s, self._expire, (timeout_s,))
                self._timer.daemon = True
                self._timer.start()
        self._finish_if_done()

    def done(self, index: int, outcome) -> None:
        with self._lock:
            if self.outcomes[index] is not None:
                return
            self.outcomes[index] = outcome
            self.left -= 1
        self._finish_if_done()

    def _expire(self, timeout_s: float) -> None:
        for index, future in self.watched:
            if future.cancel():
                self.done(index, RequestTimeoutError(f"no answer to the send within {timeout_s:.0f} s"))

    def _finish_if_done(self) -> None:
        with self._lock:
            if not self._started or self.left or self._finished:
                return
            self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        self.answer(list(self.outcomes), None)


class _Receipt:
    """Where a popped message is and the pop that handed it out: what an ack or a change of
    invisible time names (RocketMQ's extra info), as one string."""

    SEPARATOR = "\x1f"

    def __init__(self, broker: str, topic: str, queue_id: int, offset: int, extra: list[str]):
        self.broker, self.topic, self.queue_id, self.offset, self.extra = broker, topic, queue_id, offset, extra

    @classmethod
    def parse(cls, handle: str) -> "_Receipt":
        parts = handle.split(cls.SEPARATOR)
        if len(parts) != 5 or len(parts[4].split(" ")) != 8:
            raise ValueError(f"{handle[:60]!r} is not broker, topic, queue, offset and pop info")
        return cls(parts[0], parts[1], int(parts[2]), int(parts[3]), parts[4].split(" "))

    def encode(self) -> str:
        parts = [self.broker, self.topic, str(self.queue_id), str(self.offset), " ".join(self.extra)]
        return self.SEPARATOR.join(parts)

    def fields(self, group: str) -> dict:
        return {"consumerGroup": group, "topic": self.topic, "queueId": self.queue_id, "offset": self.offset,
                "extraInfo": " ".join(self.extra)}

    def renewed(self, pop_time: int, invisible_ms: int, revive_queue: str) -> "_Receipt":
        extra = list(self.extra)
        extra[1:4] = [str(pop_time), str(invisible_ms), revive_queue]
        return _Receipt(self.broker, self.topic, self.queue_id, self.offset, extra)


def _batch_ack_body(group: str, receipts: list[tuple[int, "_Receipt"]]) -> bytes:
    """A BatchAckMessageRequestBody as RocketMQ's Java client makes one: an ack per pop of a
    queue (its retry mark, queue, start offset and pop time), with the offsets acked as a
    java.util.BitSet from the start offset (its bytes, little-endian, in Base64). None when a
    handle's pop info does not fit one (each is then acked alone, and answered on its own)."""
    acks = {}
    for _index, receipt in receipts:
        start, pop_time, invisible, revive_queue, mark = receipt.extra[:5]
        if not all(part.lstrip("-").isdigit() for part in (start, pop_time, invisible, revive_queue)) or \
                receipt.offset < int(start):
            return None
        ack = acks.get((mark, receipt.queue_id, start, pop_time))
        if ack is None:
            ack = acks[(mark, receipt.queue_id, start, pop_time)] = {
                "c": group, "t": receipt.topic, "r": mark, "so": int(start), "q": receipt.queue_id,
                "rq": int(revive_queue), "pt": int(pop_time), "it": int(invisible), "b": []}
        ack["b"].append(receipt.offset - int(start))
    for ack in acks.values():
        bits = np.zeros(max(ack["b"]) + 1, dtype=bool)
        bits[ack["b"]] = True
        ack["b"] = base64.b64encode(np.packbits(bits, bitorder="little").tobytes()).decode()
    broker = receipts[0][1].broker
    return orjson.dumps({"brokerName": broker, "acks": list(acks.values())})


def _popped(query: PopQuery, answer: RemotingCommand, broker: str, invisible_until: int) -> Popped:
    """A pop answer's records as the SDK's deliveries (one a stored record)."""
    head = answer.ext_fields
    starts = {}
    for part in (head.get("startOffsetInfo") or "").split(";"):
        mark, queue_id, start = (part.split(" ") + ["", "", ""])[:3]
        if start:
            starts[(mark, int(queue_id))] = start
    records = read_headers(answer.body)
    view = memoryview(answer.body)
    handles, counts, retry, reconsumes = [], [], [], []
    for i in range(len(records)):
        topic = bytes(view[records.topic_start[i]:records.topic_start[i] + records.topic_length[i]]).decode()
        is_retry = topic.startswith("%RETRY%")
        mark = ("2" if "+" in topic else "1") if is_retry else "0"
        queue_id, offset = int(records.queue_id[i]), int(records.queue_offset[i])
        start = records.start[i]
        reconsumes.append(int.from_bytes(view[start + 72:start + 76], "big", signed=True))
        extra = [starts.get((mark, queue_id), str(offset)), head.get("popTime", "0"), head.get("invisibleTime", "0"),
                 head.get("reviveQid", "0"), mark, broker, str(queue_id), str(offset)]
        handles.append(_Receipt(broker, query.topic, queue_id, offset, extra).encode())
        counts.append(_inner_num(view, records, i))
        retry.append(is_retry)
    return Popped(query.topic, invisible_until, False, handles, records.queue_id.tolist(),
                  records.queue_offset.tolist(), counts, reconsumes, retry, records.total.tolist(), view, broker)


def _inner_num(view: memoryview, records, i: int) -> int:
    if not records.sys_flag[i] & SysFlag.INNER_BATCH:
        return 1
    props = bytes(view[records.props_start[i]:records.props_start[i] + records.props_length[i]])
    count = find_property(props, PROPERTY_INNER_NUM.encode())
    return int(count) if count is not None else 1


def _properties_text(properties: dict) -> str:
    """RocketMQ's properties string; names and values are strings without its separators (checked on
    the whole string: one is made per message sent alone)."""
    try:
        text = "".join([name + "\x01" + value + "\x02" for name, value in properties.items()])
    except TypeError:
        wrong = next(name for name, value in properties.items()
                     if not (isinstance(name, str) and isinstance(value, str)))
        raise TypeError(f"property {wrong!r}: names and values are strings") from None
    if text.count("\x01") != len(properties) or text.count("\x02") != len(properties):
        wrong = next(name for name, value in properties.items() if any(c in name + value for c in "\x01\x02"))
        raise ValueError(f"property {wrong!r} holds \\x01 or \\x02, RocketMQ's property separators")
    return text


def _queue_type(config: dict) -> QueueType:
    attributes = config.get("attributes") or {}
    value = attributes.get(_QUEUE_TYPE_ATTRIBUTE) or attributes.get("+" + _QUEUE_TYPE_ATTRIBUTE) or "SimpleCQ"
    return QueueType.BATCH_CQ if value.lower() == "batchcq" else QueueType.SIMPLE_CQ


def _is_system_topic(name: str, brokers_and_clusters: set) -> bool:
    """RocketMQ's own topics (``is_system_topic``), and those a broker and a cluster make under
    their names."""
    return is_system_topic(name) or name in brokers_and_clusters


def _name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


_ERRORS = {
    ResponseCode.TOPIC_NOT_EXIST: TopicNotFoundError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: GroupNotFoundError,
    ResponseCode.MESSAGE_ILLEGAL: InvalidRequestError,
    ResponseCode.INVALID_PARAMETER: InvalidRequestError,
    ResponseCode.SERVICE_NOT_AVAILABLE: BrokerUnavailableError,
    ResponseCode.SYSTEM_BUSY: BrokerUnavailableError,
    ResponseCode.TOPIC_EXIST_ALREADY: TopicConflictError,
    ResponseCode.NO_PERMISSION: PermissionDeniedError,  # RocketMQ's answer to bad credentials too
}


def _refused(answer: RemotingCommand, what: str) -> RmqError:
    """A broker's refusal as a typed error: what was refused, the broker's code and remark (a real
    RocketMQ's ACL refusal: our sentence, acl_refusals)."""
    if answer.code in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR):
        error = acl_refusal(answer.remark, what)
        if error is not None:
            error.code = answer.code
            return error
    cls = _ERRORS.get(answer.code, BrokerError)
    if answer.code == ResponseCode.MESSAGE_ILLEGAL and "too large" in (answer.remark or "").lower():
        cls = MessageTooLargeError
    try:
        code = ResponseCode(answer.code).name
    except ValueError:
        code = str(answer.code)
    return cls(f"{what}: {code}, {answer.remark or 'no remark'}", code=answer.code)
