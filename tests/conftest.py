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


def _spark_kafka_jars() -> list:
    """Spark's Kafka connector, when the peers are fetched: the tests beside Kafka use it."""
    try:
        return peers.spark_kafka_jars()
    except peers.PeersMissing:
        return []
