"""Session-wide fixtures: one local Spark; broker_sim's remoting door as one broker and as a
two-broker cluster (processes of their own); and the real peers (one of each per session,
skipped with one line when Java or Maven is missing or `make peers` has not fetched them).

The tiers are marked here and nowhere else: ``spark`` (a Spark session, or a Spark job in a
process of its own) and ``jvm`` (the real RocketMQ or Kafka, or RocketMQ's Java clients), by the
fixtures a test uses; ``processes`` (brokers, clients or interpreters started, crashed and
restarted as processes of their own), by the files below. `make test-quick` runs the rest, two at
a time (pytest-xdist); `make test` runs everything, three at a time: the tests that share the
session's Spark run on one worker (xdist group ``spark``), those that share the real RocketMQ or
Kafka on one worker (group ``jvm``), so that none is started twice, and the rest fill the workers.
"""

import os
import sys
import warnings

import pytest

import peers
from peers.process import JVM_OPTIONS_VARIABLE
from support.exclusive import at_most
from support.remoting_targets import REAL_ROCKETMQ_TARGETS, TARGETS

# What tests share (tests/support/): the fixtures of these modules reach every test.
pytest_plugins = [
    "support.acl", "support.brokers", "support.clock", "support.stores", "support.tls", "support.v2_target",
]

# The suite's JVMs (Spark's drivers, the peers, RocketMQ's Java clients) live seconds to minutes
# on two cores, and spend much of their CPU in C2's compiler: a short Spark job's driver took 26
# to 29 s of CPU, 14 to 18 s with C1 alone. Set before any is started, so that the Sparks of
# fresh processes have it too; benchmarks leave it unset.
QUICK_JVM = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)
os.environ.setdefault(JVM_OPTIONS_VARIABLE, QUICK_JVM)

# The fixtures that make a test need Spark or a JVM peer (`make test-quick` leaves it out); a
# test marked ``peers`` (tests/peers/) runs a real peer too.
SPARK_FIXTURES = {"spark", "spark_in_a_process"}
JVM_FIXTURES = {"rocketmq", "rocketmq4", "rocketmq_acl", "rocketmq4_acl", "rocketmq_auto_create", "kafka",
                "require_java_peers"}
# started once per session (per xdist worker); the three variants one module each uses, once per that module
SHARED_PEER_FIXTURES = {"rocketmq", "rocketmq4", "rocketmq_acl", "rocketmq4_acl", "rocketmq_auto_create", "kafka"}
# A parametrized target fixture whose parameter is "rocketmq" or "rocketmq4" asks for a real broker by name.
REAL_ROCKETMQ_PARAMS = REAL_ROCKETMQ_TARGETS  # a tuple: a parameter may be unhashable (a list)
# The tests that start brokers, clients or fresh interpreters as processes (to kill them, fill
# their disk, or run a client of another language): two thirds of the in-process tiers' time.
PROCESS_TESTS = (
    "broker_sim/pop/test_pop_crash.py", "broker_sim/store/test_recovery_crash.py", "broker_sim/test_delete_durable.py",
    "broker_sim/test_disk_full.py", "broker_sim/test_lifecycle.py", "broker_sim/test_tls_cli.py",
    "broker_sim/txn/test_txn_crash.py",
    "end_to_end/test_acl_cli.py", "end_to_end/test_acl_rocketmq_clients.py", "end_to_end/test_ali_ons.py",
    "end_to_end/test_cpp_client.py", "end_to_end/test_tls_official_clients.py", "end_to_end/test_v2_python_client.py",
    "rmq_spark/client/test_fork_safety.py", "rmq_spark/producer/test_producer_restart.py",
    "rmq_spark/producer/test_slow_link.py", "rmq_spark/test_layers.py::test_every_module_imports_alone",
    # builds the package and two venvs (34 s: a fifth of the quick tier) to run the broker's command in one
    "rmq_spark/spark/test_standalone_cluster.py::test_the_install_without_extras",
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        used = set(item.fixturenames)
        params = getattr(item, "callspec", None)
        real_rocketmq = params is not None and any(
            name in used and value in REAL_ROCKETMQ_PARAMS for name, value in params.params.items())
        shares_peers = bool(used & SHARED_PEER_FIXTURES) or real_rocketmq
        if used & SPARK_FIXTURES:
            item.add_marker(pytest.mark.spark)
        if used & JVM_FIXTURES or item.get_closest_marker("peers") or shares_peers:
            item.add_marker(pytest.mark.jvm)
        # One Spark session and one of each real peer per worker: the tests that share one run on
        # one worker (a test of both shares the Spark's), the rest wherever a worker is free.
        # A module that compares answers across its tests names its group itself.
        if item.get_closest_marker("xdist_group") is None:
            if "spark" in used:
                item.add_marker(pytest.mark.xdist_group("spark"))
            elif shares_peers:
                item.add_marker(pytest.mark.xdist_group("jvm"))
        if item.nodeid.removeprefix("tests/").startswith(PROCESS_TESTS):
            item.add_marker(pytest.mark.processes)


def pytest_collection_finish(session):
    """pytest-xdist groups tests by a suffix it adds to their ids; a pytest that drops it
    (9.2: pytest-xdist#1386) would quietly start Spark and the peers in every worker."""
    if getattr(session.config.option, "loadgroup", False):
        lost = [item.nodeid for item in session.items
                if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(f"pytest {pytest.__version__} dropped pytest-xdist's groups ({lost[0]} has "
                                    "none): install the test extra's pytest, pip install -e '.[test]'")


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


_spark_thread = {"test": "the session's start", "connection": None}  # as the last test using Spark left them


@pytest.fixture(autouse=True)
def _spark_is_this_threads(request):
    """PySpark finds a Python data source for ``df.write`` through the active session of the JVM
    thread that serves the calling Python thread (rmq_spark.spark.compat), set when the session was
    created. A run once lost it in mid-suite, and the writes of the tests that followed failed with
    DATA_SOURCE_NOT_FOUND. Before each test that uses the shared session it is made active again if
    it is not, with a warning that names the test before and whether the py4j connection (so the
    JVM thread) is new since, so that the cause can still be found."""
    if "spark" not in request.fixturenames:
        yield
        return
    spark = request.getfixturevalue("spark")
    client = spark.sparkContext._gateway._gateway_client
    if spark._jvm.org.apache.spark.sql.SparkSession.getActiveSession().isEmpty():
        connection = "a new" if id(client.get_thread_connection()) != _spark_thread["connection"] else "the same"
        warnings.warn(f"the Spark session was not active in this thread after {_spark_thread['test']}, on "
                      f"{connection} py4j connection: made active again", stacklevel=1)
        from rmq_spark.spark.compat import activate_in_this_thread

        activate_in_this_thread(spark)
    yield
    _spark_thread.update(test=request.node.nodeid, connection=id(client.get_thread_connection()))


def require_peers(*groups: str) -> None:
    try:
        for group in groups:
            peers.jars(group)
    except peers.PeersMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture
def spark_in_a_process(tmp_path_factory):
    """For a test that runs a Spark job in a process of its own (as users run one): it marks the
    test ``spark``, as the ``spark`` fixture does, and at most two such tests run at once across
    the workers. Three beside the session's Spark and the peers held two cores at a load of 15
    to 50, and Spark gives a Python worker it starts 10 s to connect back, a limit no setting
    changes (PythonWorkerFactory): a query then failed with "Python worker failed to connect back".
    One at a time would make them the run's longest chain (some 25 minutes)."""
    with at_most(2, "spark-in-a-process", tmp_path_factory):
        yield


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


@pytest.fixture(scope="module")  # one module uses it: stopped after it, not idle to the end
def rocketmq_auto_create():
    """The real RocketMQ 5 (5.5.0) with its own default autoCreateTopicEnable=true (the session's
    ``rocketmq`` runs with false, as production clusters often do): its brokers make a topic on a
    first send."""
    require_peers("rocketmq", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster(heap_mb=384, broker_settings={"autoCreateTopicEnable": "true"}) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def rocketmq4():
    """The real RocketMQ 4 (4.9.7): a name server and a broker, no proxy."""
    require_peers("rocketmq4", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster(heap_mb=384, major=4) as cluster:
        yield cluster


@pytest.fixture(scope="module")  # one module uses it: stopped after it, not idle to the end
def rocketmq_acl():
    """The real RocketMQ 5 (5.5.0) with ACL 2.0 on: every request signed and checked against the
    users and ACLs it keeps; the harness signs as its admin (``credentials``), ``add_account``
    makes more."""
    require_peers("rocketmq", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster(heap_mb=384, acl=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")  # one module uses it: stopped after it, not idle to the end
def rocketmq4_acl():
    """The real RocketMQ 4 (4.9.7) with ACL 1.0 on (aclEnable, plain_acl.yml): as ``rocketmq_acl``."""
    require_peers("rocketmq4", "clients")
    from peers.rocketmq import RocketMQCluster

    with RocketMQCluster(heap_mb=384, major=4, acl=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def broker_sim_remoting(tmp_path_factory):
    """broker_sim in a process of its own, its remoting door (name server + broker) on one port."""
    from support.remoting_targets import broker_sim_target

    with broker_sim_target(tmp_path_factory.mktemp("remoting-broker")) as target:
        yield target


@pytest.fixture(scope="session")
def broker_sim_cluster(tmp_path_factory):
    """Two broker_sim processes, one cluster: the second registers with the first's name server."""
    from support.remoting_targets import cluster_target

    with cluster_target(tmp_path_factory.mktemp("remoting-cluster")) as target:
        yield target


@pytest.fixture(params=TARGETS)
def target(request):
    """A scenario of RocketMQ's protocols runs against broker_sim's remoting door (one broker), a
    two-broker broker_sim cluster, and the real RocketMQ (`-k "broker_sim]"`, `-k
    broker_sim_cluster` or `-k "rocketmq]"` picks one); a scenario that RocketMQ 4 runs too
    says so (remoting_targets.with_rocketmq4: `-k rocketmq4`)."""
    if request.param in REAL_ROCKETMQ_TARGETS:
        from support.remoting_targets import RocketMQTarget

        return RocketMQTarget(request.getfixturevalue(request.param))
    return request.getfixturevalue("broker_sim_remoting" if request.param == "broker_sim" else request.param)


@pytest.fixture(scope="session")
def built_package(tmp_path_factory):
    """The package as a release makes it, `python -m build`: (the wheel, the sdist). Its tests
    share an xdist group (``package``), so that it is built once."""
    from support import installs

    return installs.build(tmp_path_factory.mktemp("dist"))


def _spark_kafka_jars() -> list:
    """Spark's Kafka connector, when the peers are fetched and built for this Spark or an older
    one (the tests beside Kafka use it; the older PySparks' runs, tests/rmq_spark/spark/test_pyspark_versions.py,
    go without)."""
    import pyspark

    def minor(version: str) -> tuple:
        return tuple(int(part) for part in version.split(".")[:2])

    if minor(pyspark.__version__) < minor(peers.versions()["spark.kafka.version"]):
        return []
    try:
        return peers.spark_kafka_jars()
    except peers.PeersMissing:
        return []


@pytest.fixture(scope="session")
def run_official():
    """Run a scenario of RocketMQ's official Python client (peers/python_client_scenarios.py)."""
    from peers import python_client

    try:
        python_client.interpreter()
    except RuntimeError as failed:
        pytest.fail(str(failed))
    return python_client.run
