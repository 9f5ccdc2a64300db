import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the test run; Python workers run this interpreter. The format is
    not registered here: every test also checks that installing the package registered it."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    # local[2, 2]: two threads, and a failed task is tried twice (the sink's retry tests).
    session = (SparkSession.builder.master("local[2, 2]").appName("rmq-spark-tests")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
