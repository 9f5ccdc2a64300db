"""A real Apache RocketMQ on loopback ports, in a temporary directory: a name server and a broker.
RocketMQ 5 (the default) runs the proxy in local mode, whose process runs the broker too
(remoting clients reach the broker by the name server; gRPC clients reach the proxy); RocketMQ 4
(``RocketMQCluster(major=4)``, 4.9.7 as versions.properties pins it) has no proxy: its broker
runs alone. Heaps are sized for a small machine.

    with RocketMQCluster() as rocketmq:
        rocketmq.create_topic("orders", queues=8, batch_cq=True)
        java_produce(rocketmq.namesrv_addr, "orders", messages=10_000)
        java_pull(rocketmq.namesrv_addr, "orders", expect=10_000)
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from rmq_wire.remoting import RemotingConnection, RequestCode, ResponseCode, fastjson
from rmq_wire.types import Credentials

from . import classpath, harness_classpath, loopback_agent, versions
from .process import JavaProcess, free_port, port_open, run_java

CLUSTER = "DefaultCluster"
UPDATE_BROKER_CONFIG = 25  # RocketMQ's RequestCode.UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig)
BROKER_NAME = "broker-a"
# The admin account of a cluster started with ACLs (``acl=True``): a super user.
ACL_ADMIN = Credentials("rocketmq-admin", "admin-secret-12345")
AUTH_CREATE_USER, AUTH_CREATE_ACL = 3001, 3006  # RocketMQ 5's RequestCode (mqadmin createUser, createAcl)
UPDATE_AND_CREATE_ACL_CONFIG = 50  # RocketMQ 4's (mqadmin updateAclConfig)
# Each major version's peers group (peers/poms/) and its key in versions.properties.
RELEASES = {5: ("rocketmq", "rocketmq.version"), 4: ("rocketmq4", "rocketmq4.version")}
# RocketMQ 4 on Java 17: its MappedFile frees mapped buffers through the JDK's cleaner by reflection.
_ROCKETMQ4_OPENS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens",
                    "java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"]
# A minimal logback configuration: RocketMQ 4's startups read conf/logback_<role>.xml below their
# home and exit without it; the logs go to a file of the temporary directory.
_LOGBACK = """<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level [%thread] %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="file"/></root>
</configuration>
"""


class RocketMQCluster:
    """Start with ``with``. ``namesrv_addr`` for remoting clients, ``proxy_endpoint`` for
    RocketMQ 5's gRPC clients (None for RocketMQ 4), ``broker_addr`` for the broker itself,
    ``store_dir`` its data; ``major`` 5 or 4, ``version`` the pinned version of that major."""

    def __init__(self, heap_mb: int = 512, major: int = 5, broker_settings: dict | None = None, acl: bool = False):
        if major not in RELEASES:
            raise ValueError(f"no RocketMQ {major} among the peers; the majors are {sorted(RELEASES)}")
        self.major = major
        self.group, version_key = RELEASES[major]
        self.version = versions()[version_key]
        self.heap_mb = heap_mb
        self.broker_settings = broker_settings or {}  # over the harness's own (a benchmark's: RocketMQ's defaults)
        self.dir = Path(tempfile.mkdtemp(prefix=f"rocketmq{major}-peer-"))
        self.store_dir = self.dir / "store"
        self.namesrv_port = free_port()
        self.broker_port = free_port(count=2)  # the broker also listens on port - 2 and port + 1
        self.grpc_port = free_port()
        self.remoting_proxy_port = free_port()
        self.namesrv_addr = f"127.0.0.1:{self.namesrv_port}"
        self.broker_addr = f"127.0.0.1:{self.broker_port}"
        self.proxy_endpoint = f"127.0.0.1:{self.grpc_port}" if major == 5 else None
        self._processes: list[JavaProcess] = []
        # acl: the broker checks every request's signature and the account's permissions (see
        # _acl_conf); the harness's own requests are signed with the admin account ``credentials``.
        self.credentials = ACL_ADMIN if acl else None

    def __enter__(self) -> "RocketMQCluster":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _jvm(self, heap_mb: int) -> list[str]:
        # user.home and rocketmq.home.dir: RocketMQ writes its logs and state below them, not in $HOME.
        return [f"-Xms{heap_mb // 2}m", f"-Xmx{heap_mb}m", "-XX:MaxDirectMemorySize=768m", "-XX:+UseG1GC",
                f"-Duser.home={self.dir}", f"-Drocketmq.home.dir={self.dir}", f"-Djava.io.tmpdir={self.dir}",
                *self._version_jvm()]

    def _version_jvm(self) -> list[str]:
        """RocketMQ 4's servers listen on every interface and have no setting for it (5 has
        bindAddress): the harness's loopback agent makes them listen on 127.0.0.1."""
        if self.major == 5:
            return []
        return [f"-javaagent:{loopback_agent()}", "--add-exports",
                "java.base/jdk.internal.org.objectweb.asm=ALL-UNNAMED", *_ROCKETMQ4_OPENS]

    def _start(self) -> None:
        # bindAddress: the name server and the broker listen on loopback only (RocketMQ 4 ignores
        # it: the loopback agent, _version_jvm, does it there).
        if self.major == 4:
            (self.dir / "conf").mkdir()
            for role in ("namesrv", "broker", "tools"):
                log = self.dir / "logs" / f"{role}.log"
                (self.dir / "conf" / f"logback_{role}.xml").write_text(_LOGBACK.format(log=log))
        (self.dir / "namesrv.properties").write_text(f"listenPort={self.namesrv_port}\nbindAddress=127.0.0.1\n")
        (self.dir / "broker.conf").write_text("\n".join([
            f"brokerClusterName={CLUSTER}", f"brokerName={BROKER_NAME}", "brokerId=0",
            f"namesrvAddr={self.namesrv_addr}", "brokerIP1=127.0.0.1", "bindAddress=127.0.0.1",
            f"listenPort={self.broker_port}",
            f"storePathRootDir={self.store_dir}", f"storePathCommitLog={self.store_dir / 'commitlog'}",
            "mappedFileSizeCommitLog=134217728", "flushDiskType=ASYNC_FLUSH",
            "autoCreateTopicEnable=false",  # as in production, and as broker_sim: topics are created first
            "autoCreateSubscriptionGroup=true",
            # transactional messages left unknown are checked within seconds, not a minute; 60 checks
            # (2 minutes, not 15 of 30 s) before the broker rolls one back unanswered, so that a test's
            # producer on a busy host has time to come and answer
            "transactionCheckInterval=2000", "transactionTimeOut=3000", "transactionCheckMax=60",
            # RocketMQ refuses a send that waited 200 ms in its queue, or a page cache busy for 1 s
            # (SYSTEM_BUSY, its flow control): on this shared 2-core machine that refused 770 of 5,000
            # sends of its own Java producer once, and 115 with 5 s at a load of 17. The tests check
            # what is stored, not that: a send waits as long as the client's own timeout (30 s).
            "waitTimeMillsInSendQueue=30000", "osPageCacheBusyTimeOutMills=30000",
            *(self._broker_conf_5() if self.major == 5 else []),
            *(self._acl_conf() if self.credentials else []),
            *(f"{name}={value}" for name, value in self.broker_settings.items()),
        ]) + "\n")
        self._processes.append(self._start_name_server())
        self._processes.append(self._start_broker_process())
        self._processes[-1].wait_until(self.broker_registered, "broker registered with the name server",
                                       timeout_s=60)

    def _start_name_server(self) -> JavaProcess:
        namesrv = JavaProcess(f"rocketmq {self.version} name server", classpath(self.group),
                              "org.apache.rocketmq.namesrv.NamesrvStartup",
                              ["-c", str(self.dir / "namesrv.properties")], self.dir / "namesrv.out",
                              jvm=self._jvm(256))
        return _started(namesrv, lambda: port_open(self.namesrv_port), "name server port", 60)

    def _start_broker_process(self) -> JavaProcess:
        server = classpath(self.group)
        return self._start_proxy(server) if self.major == 5 else self._start_broker(server)

    # --- faults: a process SIGKILLed, and started again on its data and ports ------------------

    def kill_broker(self) -> None:
        """SIGKILL the broker (and RocketMQ 5's proxy with it): the name server drops its routes."""
        self._processes[1].kill()

    def start_broker(self, timeout_s: float = 120) -> None:
        """Start the killed broker again on its store; back once the name server lists it."""
        self._processes[1] = self._start_broker_process()
        self._processes[1].wait_until(self.broker_registered, "broker registered with the name server",
                                      timeout_s=timeout_s)

    @property
    def name_server_pid(self) -> int:
        return self._processes[0].popen.pid

    def running(self) -> dict:
        """{"name server": bool, "broker": bool}: which of the cluster's processes are alive."""
        name_server, broker = self._processes[:2]
        return {"name server": name_server.popen.poll() is None, "broker": broker.popen.poll() is None}

    def kill_name_server(self) -> None:
        self._processes[0].kill()

    def start_name_server(self) -> None:
        """Start the killed name server again (empty: the broker registers again within 30 s)."""
        self._processes[0] = self._start_name_server()

    @staticmethod
    def _broker_conf_5() -> list[str]:
        return [
            "timerWheelEnable=true",  # pop (the gRPC SimpleConsumer) needs the timer wheel
            # Its TimerFlushService compares the whole wheel file (7 days of slots, 38.7 MB) with its
            # copy byte by byte at each flush, every timerFlushIntervalMs (1 s): a quarter to a third
            # of a core for good under C1 (the suite's JVM option), on an idle broker. A peer lives
            # one test session and its store is removed after: nothing needs the wheel on disk sooner.
            "timerFlushIntervalMs=60000",
            # RocketMQ 5.5.0's TransactionalOpBatchService spins a core for good once its batch of
            # commit/rollback marks (op messages) drains and the interval passes (apache/rocketmq
            # issue 10966): each mark is written at once (a batch of at most 1 byte) and the idle
            # wait is an hour, so it sleeps between transactions; marks written at once also leave
            # the check fewer committed half messages to ask the producer about again.
            "transactionOpMsgMaxSize=1", "transactionOpBatchInterval=3600000",
        ]

    def _acl_conf(self) -> list[str]:
        """RocketMQ 5's ACL 2.0: authentication (each request's signature, by its user) and
        authorization (the user's ACLs) in the broker, users and ACLs kept in its store
        (config/users and config/acls below storePathRootDir); the initial user is a super user,
        and the broker's own clients sign as it (innerClientAuthenticationCredentials).
        RocketMQ 4's ACL 1.0 (aclEnable): the accounts of conf/plain_acl.yml below the home
        directory, at first the admin alone (RocketMQ 5 keeps ACL 1.0 too, deprecated for 2.0)."""
        admin = self.credentials
        if self.major == 4:
            (self.dir / "conf" / "plain_acl.yml").write_text(
                f"accounts:\n  - accessKey: {admin.access_key}\n    secretKey: {admin.secret_key}\n    admin: true\n")
            return ["aclEnable=true"]
        return [
            "authenticationEnabled=true", "authorizationEnabled=true",
            "authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
            "authenticationMetadataProvider="
            "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
            "authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
            "authorizationMetadataProvider="
            "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
            "initAuthenticationUser=" + json.dumps({"username": admin.access_key, "password": admin.secret_key}),
            "innerClientAuthenticationCredentials=" + json.dumps(
                {"accessKey": admin.access_key, "secretKey": admin.secret_key}),
        ]

    def add_account(self, access_key: str, secret_key: str, topics: tuple, groups: tuple) -> None:
        """An account of a broker started with ``acl`` that may publish to and subscribe to
        ``topics`` and subscribe with ``groups`` (names; RocketMQ 5 takes ``prefix*`` and ``*``
        too), and nothing else: RocketMQ 5's user and ACL as mqadmin's createUser and createAcl
        make them, RocketMQ 4's account as its updateAclConfig adds it to plain_acl.yml; requests
        to the broker signed by the admin."""
        if self.major == 4:
            fields = {"accessKey": access_key, "secretKey": secret_key, "whiteRemoteAddress": "", "admin": "false",
                      "defaultTopicPerm": "DENY", "defaultGroupPerm": "DENY",
                      "topicPerms": ",".join(f"{topic}=PUB|SUB" for topic in topics),
                      "groupPerms": ",".join(f"{group}=SUB" for group in groups)}
            with RemotingConnection(self.broker_addr, credentials=self.credentials) as broker:
                answer = broker.invoke(UPDATE_AND_CREATE_ACL_CONFIG, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"creating account {access_key} failed: code {answer.code}, {answer.remark}")
            return
        user = {"username": access_key, "password": secret_key, "userType": "Normal"}
        entries = [{"resource": f"Topic:{topic}", "actions": ["Pub", "Sub", "Get"], "decision": "Allow"}
                   for topic in topics]
        entries += [{"resource": f"Group:{group}", "actions": ["Sub", "Get", "Update"], "decision": "Allow"}
                    for group in groups]
        acl = {"subject": f"User:{access_key}", "policies": [{"policyType": "Custom", "entries": entries}]}
        with RemotingConnection(self.broker_addr, credentials=self.credentials) as broker:
            for code, fields, body in ((AUTH_CREATE_USER, {"username": access_key}, user),
                                       (AUTH_CREATE_ACL, {"subject": f"User:{access_key}"}, acl)):
                answer = broker.invoke(code, fields, json.dumps(body).encode())
                if answer.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"creating account {access_key} failed: code {answer.code}, {answer.remark}")

    def _start_proxy(self, server: str) -> JavaProcess:
        (self.dir / "proxy.json").write_text(json.dumps({
            "rocketMQClusterName": CLUSTER, "namesrvAddr": self.namesrv_addr, "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_proxy_port}))
        proxy = JavaProcess("rocketmq proxy and broker", server, "org.apache.rocketmq.proxy.ProxyStartup",
                            ["-pm", "local", "-bc", str(self.dir / "broker.conf"), "-pc", str(self.dir / "proxy.json")],
                            self.dir / "proxy.out", jvm=self._jvm(self.heap_mb))
        return _started(proxy, lambda: port_open(self.broker_port) and port_open(self.grpc_port),
                        "broker and gRPC ports", 120)

    def _start_broker(self, server: str) -> JavaProcess:
        broker = JavaProcess(f"rocketmq {self.version} broker", server, "org.apache.rocketmq.broker.BrokerStartup",
                             ["-c", str(self.dir / "broker.conf")], self.dir / "broker.out",
                             jvm=self._jvm(self.heap_mb))
        return _started(broker, lambda: port_open(self.broker_port), "broker port", 120)

    @property
    def broker_pid(self) -> int:
        """The process id of the JVM that runs the broker (and RocketMQ 5's proxy)."""
        return self._processes[1].popen.pid

    def broker_registered(self) -> bool:
        """The name server lists the broker (what mqadmin clusterList asks, without a JVM a try)."""
        with RemotingConnection(self.namesrv_addr) as namesrv:
            answer = namesrv.invoke(RequestCode.GET_BROKER_CLUSTER_INFO)
        return answer.code == ResponseCode.SUCCESS and BROKER_NAME in (
            fastjson.loads(answer.body).get("brokerAddrTable") or {})

    def admin(self, *args: str) -> str:
        """This version's mqadmin (MQAdminStartup) against this cluster; its output."""
        return run_java(classpath(self.group), "org.apache.rocketmq.tools.command.MQAdminStartup", list(args),
                        jvm=["-Xmx128m", f"-Duser.home={self.dir}", f"-Drocketmq.home.dir={self.dir}",
                             *(_ROCKETMQ4_OPENS if self.major == 4 else [])])

    def create_topic(self, name: str, queues: int, batch_cq: bool = True, message_type: str = "") -> None:
        """Create a topic on the broker (queue.type BatchCQ, or RocketMQ's default SimpleCQ;
        message.type as given: the proxy takes only that type of message) as mqadmin's
        updateTopic does, by a request to the broker, and wait until the name server routes it.
        (A request, not mqadmin: a JVM a topic costs seconds; tests/end_to_end/test_mqadmin.py
        runs mqadmin itself.)"""
        if batch_cq and self.major < 5:
            raise ValueError(f"RocketMQ {self.version} has no BatchCQ: create the topic with batch_cq=False")
        attributes = (["+queue.type=BatchCQ"] if batch_cq else []) + \
            ([f"+message.type={message_type}"] if message_type else [])
        fields = {"topic": name, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
                  "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}
        if attributes:
            fields["attributes"] = ",".join(attributes)
        with RemotingConnection(self.broker_addr, credentials=self.credentials) as broker:
            answer = broker.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"creating topic {name} failed: code {answer.code}, {answer.remark}")
        with RemotingConnection(self.namesrv_addr) as namesrv:
            deadline = time.monotonic() + 30
            while namesrv.invoke(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": name}).code != ResponseCode.SUCCESS:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topic {name} was created but the name server has no route for it in 30 s")
                time.sleep(0.1)

    def update_broker_config(self, settings: dict) -> None:
        """Change broker settings while it runs, as ``mqadmin updateBrokerConfig -k KEY -v VALUE``
        does (a request to the broker; its store reads settings such as
        maxTransferCountOnMessageInMemory at each pull)."""
        body = "".join(f"{key}={value}\n" for key, value in settings.items()).encode()
        with RemotingConnection(self.broker_addr) as broker:
            answer = broker.invoke(UPDATE_BROKER_CONFIG, {}, body)
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"updating the broker's config {settings} failed: code {answer.code}, {answer.remark}")

    def create_group(self, name: str, orderly: bool = False) -> None:
        """Create a consumer group on the broker, as mqadmin's updateSubGroup does (``orderly``:
        its -o, consumeMessageOrderly: gRPC consumers of the group are FIFO)."""
        config = {"groupName": name, "consumeMessageOrderly": orderly}
        with RemotingConnection(self.broker_addr, credentials=self.credentials) as broker:
            answer = broker.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps(config).encode())
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"creating group {name} failed: code {answer.code}, {answer.remark}")

    def log_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in self._processes)

    def close(self) -> None:
        for process in reversed(self._processes):
            process.kill()  # its store is removed below
        self._processes.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _started(process: JavaProcess, ready: Callable[[], bool], what: str, timeout_s: float) -> JavaProcess:
    """``process`` once ``ready()``; killed if it is not within ``timeout_s``."""
    try:
        process.wait_until(ready, what, timeout_s=timeout_s)
    except BaseException:
        process.kill()
        raise
    return process


def _harness(*args: str, timeout_s: float = 600.0, jvm: tuple = ()) -> dict:
    out = run_java(harness_classpath(), "peers.Harness", list(args), timeout_s=timeout_s,
                   jvm=["-Xmx512m", f"-Duser.home={tempfile.gettempdir()}", *jvm])
    return json.loads(out.strip().splitlines()[-1])


def java_produce(namesrv: str, topic: str, messages: int, threads: int = 4, body_bytes: int = 1024,
                 tag: str = "", jvm: tuple = (), batch_delay_ms: int = 10) -> dict:
    """RocketMQ's Java producer (remoting) with autoBatch on, async sends from ``threads``
    threads: {"sent", "failed", "seconds", "msgs_per_s", ...}. ``jvm``: more JVM options, as
    ``remoting_tls``'s; ``batch_delay_ms``: how long a batch waits for more (batchMaxDelayMs)."""
    args = ["produce", "--namesrv", namesrv, "--topic", topic, "--messages", str(messages), "--threads",
            str(threads), "--body-bytes", str(body_bytes), "--batch-delay-ms", str(batch_delay_ms)]
    return _harness(*args, *(["--tag", tag] if tag else []), jvm=jvm)


def java_pull(namesrv: str, topic: str, expect: int, timeout_s: float = 120, jvm: tuple = (),
              digest: bool = True) -> dict:
    """RocketMQ's lite pull consumer over every queue from its start: {"received", "digest",
    "seconds"} (from the assignment to the last message: the JVM's start left out).
    ``digest`` False: the bodies are counted, not kept (a read larger than the JVM's heap)."""
    return _harness("pull", "--namesrv", namesrv, "--topic", topic, "--expect", str(expect), "--timeout-s",
                    str(timeout_s), "--digest", str(digest).lower(), timeout_s=timeout_s + 60, jvm=jvm)


def remoting_tls(ca: str | None = None, cert: str | None = None, key: str | None = None) -> tuple:
    """JVM options that turn TLS on in RocketMQ's remoting clients (TlsSystemConfig). Without
    ``ca`` the client trusts any server certificate (RocketMQ's test mode, its default); with
    it the server's certificate must be signed by ``ca``; ``cert`` and ``key`` (PEM, the key
    PKCS#8 unencrypted): the client's certificate, for mutual TLS."""
    options = ["-Dtls.enable=true", "-Dtls.config.file=/nonexistent"]  # no /etc/rocketmq/tls.properties
    if ca is not None:
        options += ["-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true", f"-Dtls.client.trustCertPath={ca}"]
    if cert is not None:
        options += [f"-Dtls.client.certPath={cert}", f"-Dtls.client.keyPath={key}"]
    return tuple(options)


# A push consumer subscribes to its group's retry topic too, and finds the route the broker made
# for it at its next rebalance: every 20 s unless told otherwise (RebalanceService).
_REBALANCE_EVERY_SECOND = ("-Drocketmq.client.rebalance.waitInterval=1000",)


def java_push(namesrv: str, topic: str, group: str, messages: int, orderly: bool = False,
              timeout_s: float = 90, serialize_type: str = "JSON") -> dict:
    """RocketMQ's push consumer (clustering) after N sends; message 3 fails once when not
    orderly: {"received", "distinct", "retried", "in_order", "digest"}. ``serialize_type``
    JSON or ROCKETMQ: how the clients encode their headers (rocketmq.serialize.type)."""
    return _harness("push", "--namesrv", namesrv, "--topic", topic, "--group", group, "--messages", str(messages),
                    "--orderly", str(orderly).lower(), "--timeout-s", str(timeout_s), timeout_s=timeout_s + 60,
                    jvm=(f"-Drocketmq.serialize.type={serialize_type}", *_REBALANCE_EVERY_SECOND))


def java_transaction(namesrv: str, topic: str, timeout_s: float = 90) -> dict:
    """TransactionMQProducer: commit, rollback, and an UNKNOW the check commits:
    {"states", "visible", "checked"}."""
    return _harness("transaction", "--namesrv", namesrv, "--topic", topic, "--timeout-s", str(timeout_s),
                    timeout_s=timeout_s + 60)


def java_sends(namesrv: str, topic: str) -> dict:
    """Sends of several kinds, then what a lite pull, the admin's offsets and a view by id see."""
    return _harness("sends", "--namesrv", namesrv, "--topic", topic, timeout_s=120)


def grpc_produce(endpoint: str, topic: str, messages: int, body_bytes: int = 1024, tls: bool = False) -> dict:
    """rocketmq-client-java's producer through the proxy (one send at a time); ``tls``: over TLS
    (the client trusts any server certificate)."""
    return _harness("grpc-produce", "--endpoint", endpoint, "--topic", topic, "--messages", str(messages),
                    "--body-bytes", str(body_bytes), "--tls", str(tls).lower())


def grpc_consume(endpoint: str, topic: str, group: str, expect: int, timeout_s: float = 120,
                 tls: bool = False) -> dict:
    """rocketmq-client-java's SimpleConsumer through the proxy, acking each message."""
    return _harness("grpc-consume", "--endpoint", endpoint, "--topic", topic, "--group", group, "--expect",
                    str(expect), "--timeout-s", str(timeout_s), "--tls", str(tls).lower(), timeout_s=timeout_s + 60)


def mqadmin(namesrv: str, *commands: tuple) -> list[str]:
    """RocketMQ's mqadmin, each of ``commands`` (("topicList",), ("topicStatus", "-t", "T"), ...)
    against the name server ``namesrv``, in one JVM; their outputs, in order (errors included:
    mqadmin prints a failed command's stack trace)."""
    args = []
    for command in commands:
        args += [*(["---"] if args else []), *command, "-n", namesrv]
    out = run_java(harness_classpath(), "peers.Harness", ["mqadmin", *args], timeout_s=60 + 15 * len(commands),
                   jvm=["-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Duser.home={tempfile.gettempdir()}"],
                   stderr_too=True)
    return out.split("=== mqadmin ")[1:]


def body(index: int, size: int = 1024) -> bytes:
    """The harness's body of message ``index``: "m-<index>" padded with "x"."""
    head = f"m-{index}".encode()
    return head + b"x" * max(0, size - len(head))


def digest(bodies) -> str:
    """The harness's digest: SHA-256 of the sorted bodies, each followed by a newline."""
    sha = hashlib.sha256()
    for one in sorted(bodies):
        sha.update(one + b"\n")
    return sha.hexdigest()
