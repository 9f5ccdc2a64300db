"""The real systems beside broker_sim, for tests and benchmarks: Apache RocketMQ 5 (name server,
broker, proxy) and 4 (name server, broker), RocketMQ's official Java clients, Apache Kafka and Spark's Kafka connector.

Their versions are pinned in ``versions.properties``; ``make peers`` (``python -m peers.fetch``)
fetches their jars from Maven Central into a cache outside git, one directory per set of
versions, so a second run fetches nothing. ``jars(group)`` finds them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
POMS = HERE / "poms"
HARNESS = HERE / "harness"
GROUPS = tuple(sorted(p.stem for p in POMS.glob("*.xml")))
AGENT_JAR = "loopback-agent.jar"


class PeersMissing(RuntimeError):
    """A peer's jars or tools are not here; the message says what to run or install."""


def versions() -> dict[str, str]:
    """The pinned versions, as ``versions.properties`` names them."""
    out = {}
    for line in (HERE / "versions.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            out[name.strip()] = value.strip()
    return out


def cache_root() -> Path:
    """Where fetched peers live: $RMQ_PEERS_CACHE, or ~/.cache/rocketmq-batch/peers."""
    return Path(os.environ.get("RMQ_PEERS_CACHE") or Path.home() / ".cache" / "rocketmq-batch" / "peers")


def fetched_dir() -> Path:
    """The cache directory of this set of versions and poms (a change of either fetches anew)."""
    digest = hashlib.sha256()
    sources = [HERE / "versions.properties", *sorted(POMS.glob("*.xml")), HARNESS / "pom.xml",
               *sorted(HARNESS.rglob("*.java"))]
    for path in sources:
        digest.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes())
    return cache_root() / digest.hexdigest()[:16]


def missing_tools() -> str | None:
    """What to install before peers can be fetched or run, or None."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found: install a JDK 17+ and Maven 3.8+ to run the real peers"
    return None


def jars(group: str) -> list[Path]:
    """The jars of ``group`` (one of GROUPS); PeersMissing when they are not fetched."""
    if group not in GROUPS:
        raise ValueError(f"no peer group {group!r}; the groups are {', '.join(GROUPS)}")
    problem = missing_tools()
    if problem:
        raise PeersMissing(problem)
    done = fetched_dir()
    if not (done / ".complete").exists():
        raise PeersMissing(f"the real peers are not fetched into {done}: run `make peers` (Maven Central)")
    return sorted((done / group).glob("*.jar"))


def classpath(*groups: str) -> str:
    return os.pathsep.join(str(jar) for group in groups for jar in jars(group))


def harness_classpath() -> str:
    """The Java harness's classes and RocketMQ's official clients."""
    return os.pathsep.join([str(fetched_dir() / "harness" / "classes"), classpath("clients")])


def loopback_agent() -> Path:
    """The Java agent that keeps RocketMQ 4's listeners on 127.0.0.1 (peers/harness/agent)."""
    jars("rocketmq4")  # PeersMissing, saying what to do, when the peers are not fetched
    return fetched_dir() / "agent" / AGENT_JAR


def spark_kafka_jars() -> list[Path]:
    """The jars Spark's Kafka connector needs on ``spark.jars``: its group's jars whose artifact
    PySpark does not ship already (a second scala-library or hadoop client would break Spark)."""
    import pyspark

    shipped = {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [jar for jar in jars("spark-kafka") if _artifact(jar.name) not in shipped]


def _artifact(jar_name: str) -> str:
    """"kafka-clients-3.9.2.jar" -> "kafka-clients"."""
    parts = jar_name[:-len(".jar")].split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)
