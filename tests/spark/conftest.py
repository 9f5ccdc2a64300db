import itertools
import os
import sys

import pytest

import broker_sim


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the test run; Python workers run this interpreter. The format is
    not registered here: every test also checks that installing the package registered it."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("rmq-spark-tests")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """A real broker in this process on 127.0.0.1, one per test module."""
    with broker_sim.embedded(tmp_path_factory.mktemp("broker")) as endpoint:
        yield endpoint


_names = itertools.count()


@pytest.fixture
def topic_name():
    """A fresh topic name for each test."""
    return f"st{next(_names)}"
