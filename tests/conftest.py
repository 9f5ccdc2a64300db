"""Session-wide fixtures: one local Spark, and the real peers (one of each per session, skipped
with one line when Java or Maven is missing or `make peers` has not fetched them)."""

import os
import sys

import pytest

import peers


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the test run; Python workers run this interpreter. The format is
    not registered here: every test also checks that installing the package registered it."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    # local[2, 2]: two threads, and a failed task is tried twice (the sink's retry tests).
    session = (SparkSession.builder.master("local[2, 2]").appName("rmq-spark-tests")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.jars", ",".join(str(jar) for jar in _spark_kafka_jars()))
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def require_peers(*groups: str) -> None:
    try:
        for group in groups:
            peers.jars(group)
    except peers.PeersMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture
def require_java_peers():
    """RocketMQ's Java clients and the harness that drives them (`make peers`)."""
    require_peers("clients")


@pytest.fixture(scope="session")
def kafka():
    require_peers("kafka")
    from peers.kafka import KafkaBroker

    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def rocketmq():
    require_peers("rocketmq", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster() as cluster:
        yield cluster


def _spark_kafka_jars() -> list:
    """Spark's Kafka connector, when the peers are fetched: the tests beside Kafka use it."""
    try:
        return peers.spark_kafka_jars()
    except peers.PeersMissing:
        return []
