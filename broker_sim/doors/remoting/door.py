"""RemotingDoor: RocketMQ's remoting protocol over one BrokerCore, a broker and a name server on
one port, and the broker's registration with other name servers."""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass, field

import orjson

from broker_sim.acl import Guard
from broker_sim.common.service_thread import ServiceThread
from broker_sim.core import BrokerCore, BrokerFault, Reason
from broker_sim.core.limits import ClientLimits
from broker_sim.doors import BROKER_NAME
from broker_sim.doors.checks import DEFAULT_CHECKS, CheckSettings, TransactionChecks
from broker_sim.doors.hold import PullHold
from broker_sim.doors.remoting.acl import RemotingAdmission
from broker_sim.doors.remoting.broker import BrokerRequests
from broker_sim.doors.remoting.clients import ClientRegistry
from broker_sim.doors.remoting.namesrv import DEFAULT_BROKER_TIMEOUT_MS, LocalBroker, NameServer, RouteTable
from broker_sim.doors.remoting.pop import PopRequests
from broker_sim.doors.remoting.server import Handler, RemotingServer
from broker_sim.doors.remoting.transactions import TransactionRequests
from rmq_wire import record as fmt
from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode
from rmq_wire.types import Credentials

log = logging.getLogger(__name__)
_TOPIC_CHANGE_CHECK_S = 1.0


@dataclass(frozen=True)
class RemotingOptions:
    """The door's settings, with RocketMQ's defaults.

    Attributes
    ----------
    port : int
        Where the broker and its name server listen (0: any free port).
    cluster_name : str
        How routes name this broker's cluster (RocketMQ's brokerClusterName); its name is the
        broker's (``broker_name``, both RocketMQ doors').
    name_servers : tuple of str
        Other name servers ("host:port") this broker registers with, every
        ``register_interval_ms`` (registerNameServerPeriod, 30 s).
    broker_timeout_ms : int
        How long a name server keeps a broker that stopped registering (120 s); sent with
        each registration, as RocketMQ's brokers send heartbeatTimeoutMillis.
    """

    port: int = 9876
    cluster_name: str = "DefaultCluster"
    name_servers: tuple = field(default_factory=tuple)
    register_interval_ms: int = 30_000
    broker_timeout_ms: int = DEFAULT_BROKER_TIMEOUT_MS


class RemotingDoor:
    """The door of ``core`` (given at ``start``; ``bind`` may come before the core opens, so
    that records name the remoting address as their store host, as RocketMQ's clients expect).
    With ``tls`` (a server context) the port serves TLS only; registrations with other name
    servers stay plain."""

    def __init__(self, host: str, advertised_ip: str, options: RemotingOptions, limits: ClientLimits | None = None,
                 guard: Guard | None = None, tls: ssl.SSLContext | None = None,
                 checks: CheckSettings = DEFAULT_CHECKS, broker_name: str = BROKER_NAME):
        self.core: BrokerCore | None = None
        self.options = options
        self.broker_name = broker_name
        self.check_settings = checks
        self.guard = guard
        self.clients = ClientRegistry()
        self.server = RemotingServer({}, host, options.port, limits=limits, tls=tls)
        self.hold = PullHold(self.server.loop, self.server.limits.max_parked_pulls, pool=self.server.pool)
        self._advertised_ip = advertised_ip
        self.checks: TransactionChecks | None = None
        self._registrar = ServiceThread("rmq-remoting-register", _TOPIC_CHANGE_CHECK_S, self._register_if_due,
                                        task="registering with the name servers")
        self._registered: tuple[dict | None, float] = (None, 0.0)  # the topics registered last, and when

    @property
    def address(self) -> str:
        return f"{self._advertised_ip}:{self.server.port}"

    def bind(self) -> int:
        return self.server.bind()

    def start(self, core: BrokerCore) -> int:
        """Serve ``core``: every handler is in place before the first request is read (a client
        that connected while the broker recovered is answered, not refused as unsupported)."""
        self.core = core
        self.server.memory = core.memory  # one budget for every door
        self.server.metrics = core.metrics
        self.hold.end_offset = core.indexed_offset
        self.clients.consumers = core.consumers
        local = LocalBroker(self.options.cluster_name, self.broker_name, self.address,
                            self.core.list_topics, self.core.find_topic)
        self.routes = RouteTable(local)
        self.checks = checks = TransactionChecks(core, self.check_settings)
        broker = BrokerRequests(self.core, self.clients, checks, self.broker_name, self.options.cluster_name,
                                self.address, self.hold)
        handlers = {code: Handler(call) for code, call in NameServer(self.routes).handlers().items()}
        handlers.update(broker.handlers())
        transactions = TransactionRequests(self.core, self.clients, checks, self.broker_name)
        handlers.update({code: Handler(call) for code, call in transactions.handlers().items()})
        handlers.update({code: Handler(call, blocking) for code, (call, blocking) in
                         PopRequests(self.core).handlers().items()})
        self.server.handlers.update(handlers)
        if self.guard is not None:
            self.server.check_request = RemotingAdmission(self.guard, handlers, self._record_topic)
        self.server.close_listeners.append(self.clients.forget)
        port = self.server.start()
        checks.start(transactions.ask, "rmq-remoting-txn-check")
        self.core.add_arrival_listener(self.hold.arrived)
        if self.options.name_servers:
            self._registrar.start()
            self._registrar.wake()  # the first registration at once
        log.info("remoting door (broker %s and name server) serving on %s", self.broker_name, self.address)
        return port

    def _record_topic(self, physical_offset: int) -> str | None:
        """The topic of the record at a commitlog offset; None when no message starts there."""
        try:
            return fmt.decode_record(self.core.message_at(physical_offset)).topic
        except BrokerFault as err:
            if err.reason is Reason.MESSAGE_NOT_FOUND:
                return None
            raise

    def stop(self) -> None:
        if self._registrar.running:
            self._registrar.stop(10)
            self._unregister_all()
        if self.checks is not None:
            self.checks.stop()
        self.server.stop()

    # --- registration with other name servers ----------------------------------------------

    def _register_if_due(self) -> None:
        """Register every interval, and at once when this broker's topics change (RocketMQ's
        brokers register again after a topic is created or deleted): looked at every second."""
        topics = self.routes.local.registered_topics()
        registered, last = self._registered
        if topics != registered or time.monotonic() - last >= self.options.register_interval_ms / 1000:
            for address in self.options.name_servers:
                self._register(address, topics)
            self._registered = (topics, time.monotonic())

    def _register(self, address: str, topics: dict) -> None:
        body = orjson.dumps({"topicConfigSerializeWrapper": {
            "topicConfigTable": topics,
            "dataVersion": {"timestamp": 0, "counter": 0}}, "filterServerList": []})
        try:
            with RemotingConnection(address, timeout_s=3, credentials=self._credentials()) as connection:
                answer = connection.invoke(RequestCode.REGISTER_BROKER, self._identity() | {
                    "haServerAddr": "", "heartbeatTimeoutMillis": self.options.broker_timeout_ms,
                    "enableActingMaster": "false", "compressed": "false", "bodyCrc32": 0}, body, timeout_s=3)
            if answer.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused this broker's registration: %s", address, answer.remark,
                            extra={"name_server": address})
        except (OSError, TimeoutError) as err:
            log.warning("cannot register with name server %s: %s", address, err, extra={"name_server": address})

    def _unregister_all(self) -> None:
        for address in self.options.name_servers:
            try:
                with RemotingConnection(address, timeout_s=2, credentials=self._credentials()) as connection:
                    connection.invoke(RequestCode.UNREGISTER_BROKER, self._identity(), timeout_s=2)
            except (OSError, TimeoutError) as err:
                log.info("cannot unregister from name server %s: %s", address, err, extra={"name_server": address})

    def _credentials(self) -> Credentials | None:
        """With ACLs, registrations are signed by an admin account of this broker's ACL file (the
        brokers of a cluster share theirs, as RocketMQ's do)."""
        admin = self.guard.config.admin_account if self.guard is not None else None
        return Credentials(admin.access_key, admin.secret_key) if admin is not None else None

    def _identity(self) -> dict:
        return {"brokerName": self.broker_name, "brokerAddr": self.address,
                "clusterName": self.options.cluster_name, "brokerId": 0}
