"""A real Apache Kafka broker (KRaft: one process is broker and controller) on loopback ports,
in a temporary directory, for tests and benchmarks.

    with KafkaBroker() as kafka:
        kafka.create_topic("clicks", partitions=16)
        ... kafka.bootstrap ...            # "127.0.0.1:PORT"
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from . import classpath
from .process import JavaProcess, free_port, port_open, run_java

_LOG4J2 = """\
<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="%d %p %c{1} %m%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/></Loggers>
</Configuration>
"""


_PARTITIONS_PER_REQUEST = 5000


class KafkaBroker:
    """Start with ``with``; ``bootstrap`` is its "host:port" for clients."""

    def __init__(self, heap_mb: int = 512, partitions: int = 1):
        self.heap_mb = heap_mb
        self.partitions = partitions
        self.dir = Path(tempfile.mkdtemp(prefix="kafka-peer-"))
        self.port = free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.process: JavaProcess | None = None

    def __enter__(self) -> "KafkaBroker":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        config = self.dir / "server.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.dir / 'data'}", f"num.partitions={self.partitions}",
            "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=true",
            "num.network.threads=2", "num.io.threads=2", "log.flush.interval.messages=9223372036854775807",
        ]) + "\n")
        (self.dir / "log4j2.xml").write_text(_LOG4J2)
        cp = classpath("kafka")
        jvm = [f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC",
               f"-Dlog4j2.configurationFile={self.dir / 'log4j2.xml'}", f"-Djava.io.tmpdir={self.dir}"]
        cluster_id = uuid.uuid4().hex[:22]
        run_java(cp, "kafka.tools.StorageTool", ["format", "--standalone", "-t", cluster_id, "-c", str(config)],
                 jvm=jvm[2:])
        self.process = JavaProcess("kafka", cp, "kafka.Kafka", [str(config)], self.dir / "kafka.log", jvm=jvm)
        self.process.wait_until(lambda: port_open(self.port), "listening broker port", timeout_s=90)
        self.process.wait_until(self._answers, "metadata answer", timeout_s=60)

    def _answers(self) -> bool:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
        try:
            return admin.describe_cluster()["controller_id"] is not None
        finally:
            admin.close()

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic (replication 1). The KRaft controller takes at most 10,000 records per
        request (a partition is one), so a larger topic grows by further requests."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewPartitions, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=120_000)
        try:
            created = min(partitions, _PARTITIONS_PER_REQUEST)
            admin.create_topics([NewTopic(name, created, 1)], timeout_ms=120_000)
            while created < partitions:
                created = min(partitions, created + _PARTITIONS_PER_REQUEST)
                admin.create_partitions({name: NewPartitions(created)}, timeout_ms=120_000)
        finally:
            admin.close()

    def log_tail(self) -> str:
        return self.process.log_tail() if self.process else ""

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()  # its log is removed below
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)
