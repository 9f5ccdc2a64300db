"""The broker's metrics (``--metrics-port``), scraped from a broker process while a producer, a
range reader and a pop consumer use it, checked against what they did; the names are those
``broker_sim.core.metrics.METRICS`` lists (and docs/operations.md); made-up request codes and
deleted topics leave no series; the port is bounded (its TLS and credentials:
tests/broker_sim/doors/test_tls_metrics.py)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_sim.core.metrics import METRIC_NAMES
from broker_sim.testing import die_with_parent, stop_process, wait_listening
from rmq_spark import Admin, Message, OffsetRange, PopConsumer, Producer, RangeReader
from rmq_spark.errors import TopicNotFoundError
from rmq_wire.remoting import RemotingConnection, ResponseCode
from support.paths import REPO_ROOT

BODY = b"m" * 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker serving metrics on a free port, and RocketMQ's remoting protocol: (endpoint, name
    server, metrics url)."""
    command = [sys.executable, "-m", "broker_sim.cli", "--port", "0", "--remoting-port", "0", "--metrics-port", "0",
               "--data-dir", str(tmp_path_factory.mktemp("metrics") / "data")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=die_with_parent)
    try:
        endpoint, output = started(process)
        url = re.search(r"metrics on (http://\S+)", output).group(1)
        name_server = re.search(r"name server\) on (\S+)", output).group(1)
        yield endpoint, name_server, url
    finally:
        stop_process(process, 30)


def started(process: subprocess.Popen) -> tuple[str, str]:
    """(endpoint, what the CLI printed up to its own "listening" line: the log's comes first)."""
    endpoint, output = wait_listening(process, 60)
    for _ in range(20):
        if "rmq-broker-sim listening on" in output:
            return endpoint, output
        output += process.stdout.readline()
    raise AssertionError(f"the CLI did not say it listens:\n{output}")


def scrape(url: str) -> dict:
    """{(name, labels as a sorted tuple): value} of every sample, and the families' names."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_scrape_counts_what_a_producer_a_reader_and_a_pop_consumer_did(broker):
    endpoint, _name_server, url = broker
    with Admin(endpoint) as admin:
        admin.create_topic("metered", 4, "BatchCQ")
        admin.create_topic("metered-pop", 1, "SimpleCQ")
    with Producer(endpoint) as producer:
        for i in range(1000):
            producer.send_async(Message("metered", BODY, queue_id=i % 4))
        for _ in range(50):
            producer.send_async(Message("metered-pop", BODY))
        producer.flush()
    with Admin(endpoint) as admin:
        queues = admin.offsets(["metered"])["metered"]
        admin.commit_group_offsets("halfway", {("metered", q.queue_id): q.max_offset // 2 for q in queues})
    with RangeReader(endpoint) as reader:
        read = reader.read_table([OffsetRange("metered", q.queue_id, q.min_offset, q.max_offset) for q in queues])
    assert read.num_rows == 1000
    with PopConsumer(endpoint, "popping", "metered-pop", max_messages=32, poll_ms=1000) as consumer:
        popped, deadline = [], time.monotonic() + 60
        while len(popped) < 50 and time.monotonic() < deadline:  # a pop waits for what is not indexed yet
            popped += consumer.receive()
        assert len(popped) == 50
        consumer.ack(popped[:30])

    samples = scrape(url)
    assert value(samples, "rocketmq_messages_in_total", topic="metered") == 1000
    assert value(samples, "rocketmq_messages_in_total", topic="metered-pop") == 50
    # A batch's payload as sent: the bodies and each message's encoding around them.
    assert 50 * len(BODY) < value(samples, "rocketmq_throughput_in_total", topic="metered-pop") < 50 * 2 * len(BODY)
    assert 1000 * len(BODY) < value(samples, "rocketmq_throughput_in_total", topic="metered") < 2000 * len(BODY)
    assert value(samples, "rocketmq_messages_out_total", topic="metered", consumer_group="") == 1000
    assert value(samples, "rocketmq_throughput_out_total", topic="metered", consumer_group="") > 1000 * len(BODY)
    assert value(samples, "rocketmq_messages_out_total", topic="metered-pop", consumer_group="popping") == 50
    assert value(samples, "rocketmq_consumer_inflight_messages", topic="metered-pop", consumer_group="popping") == 20
    behind = sum(q.max_offset - q.max_offset // 2 for q in queues)
    assert value(samples, "rocketmq_consumer_lag_messages", topic="metered", consumer_group="halfway") == behind
    assert value(samples, "rocketmq_topic_number") >= 2
    assert value(samples, "rocketmq_consumer_group_number") >= 2
    assert value(samples, "rocketmq_storage_size") > 1050 * len(BODY)
    assert value(samples, "broker_sim_resident_memory_bytes") > 0
    assert ("rocketmq_storage_dispatch_behind_bytes", ()) in samples
    assert value(samples, "broker_sim_pop_revive_backlog_messages") == 0  # 30 s invisible: none due yet
    assert value(samples, "broker_sim_transactions_open") == 0
    assert value(samples, "broker_sim_memory_budget_bytes") > value(samples, "broker_sim_memory_budget_held_bytes")
    assert value(samples, "rocketmq_rpc_latency_count", protocol_type="contract", request_code="read_ranges",
                 response_code="ok") >= 1
    assert value(samples, "rocketmq_rpc_latency_count", protocol_type="contract", request_code="pop",
                 response_code="ok") >= 2


def test_refusals_and_each_door_are_counted_by_request_and_response_code(broker):
    endpoint, name_server, url = broker
    before = scrape(url)
    with Admin(endpoint) as admin, pytest.raises(TopicNotFoundError):
        admin.offsets(["no-such-topic"])
    with Admin(name_server=name_server) as admin:
        admin.create_topic("metered-remoting", 1, "SimpleCQ")
        assert admin.offsets(["metered-remoting"])
    after = scrape(url)

    def grew(**labels) -> float:
        return value(after, "rocketmq_rpc_latency_count", **labels) - value(before, "rocketmq_rpc_latency_count",
                                                                           **labels)

    refused = [labels for (name, labels), count in after.items()
               if name == "rocketmq_rpc_latency_count" and dict(labels)["response_code"] == "topic_not_found"
               and dict(labels)["protocol_type"] == "contract"]
    assert refused, "the refused request is not counted with its code"
    remoting = {dict(labels)["request_code"] for (name, labels) in after
                if name == "rocketmq_rpc_latency_count" and dict(labels)["protocol_type"] == "remoting"}
    assert "get_routeinfo_by_topic" in remoting, remoting  # the name server's, as RocketMQ names the code
    assert grew(protocol_type="remoting", request_code="get_routeinfo_by_topic", response_code="success") >= 1
    assert value(after, "rocketmq_rpc_latency_bucket", protocol_type="remoting",
                 request_code="get_routeinfo_by_topic", response_code="success", le="+Inf") >= 1


def test_every_family_served_is_listed_and_no_series_is_per_queue(broker):
    endpoint, _name_server, url = broker
    with Admin(endpoint) as admin:  # its own traffic: the tests of this module may run in other processes
        admin.create_topic("listed", 64, "BatchCQ")
        admin.commit_group_offsets("listing", {("listed", 0): 0})
    with Producer(endpoint) as producer:
        producer.send(Message("listed", BODY))
    samples = scrape(url)
    families = {re.sub(r"_(bucket|count|sum)$", "", name) for name, _ in samples}
    families = {f for f in families if f.startswith(("rocketmq_", "broker_sim_"))}
    assert families <= METRIC_NAMES | {"rocketmq_rpc_latency"}, families - METRIC_NAMES
    assert {"rocketmq_messages_in_total", "rocketmq_consumer_lag_messages", "rocketmq_rpc_latency"} <= families
    labels = {key for _, pairs in samples for key, _ in pairs}
    assert not labels & {"queue_id", "queue", "client", "address"}, labels


def test_rocketmq_s_broker_conf_key_serves_them_and_without_it_nothing_is_served(tmp_path):
    """metricsPromExporterPort (RocketMQ 5's broker.conf key) is --metrics-port; a broker given
    neither serves no metrics."""
    conf = tmp_path / "broker.conf"
    conf.write_text("metricsExporterType=PROM\nmetricsPromExporterPort=0\n")
    for args, serves in ((["--config", str(conf)], True), ([], False)):
        command = [sys.executable, "-m", "broker_sim.cli", "--port", "0", "--data-dir", str(tmp_path / f"d{serves}"),
                   *args]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   preexec_fn=die_with_parent)
        try:
            _endpoint, output = started(process)
            found = re.search(r"metrics on (http://\S+)", output)
            assert bool(found) is serves, output
            if found:
                assert value(scrape(found.group(1)), "rocketmq_topic_number") >= 0
                assert ("rocketmq_topic_number", ()) in scrape(found.group(1))
        finally:
            stop_process(process, 30)


def test_the_docs_list_every_family():
    listed = (REPO_ROOT / "docs" / "operations.md").read_text()
    assert {name for name in METRIC_NAMES if f"`{name}`" not in listed} == set()


def test_a_metrics_port_in_use_stops_the_start_with_a_sentence(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "broker_sim.cli", "--port", "0", "--metrics-port", str(port),
                               "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=120,
                              preexec_fn=die_with_parent)
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr and "choose another --metrics-port" in done.stderr


def test_made_up_request_codes_are_one_series_and_a_deleted_topics_series_go_with_it(broker):
    """Issue 44: 2,000 requests with made-up codes made 24,060 series (a code past 32 bits a label
    of its own); a deleted topic's series stayed for good."""
    endpoint, name_server, url = broker
    with RemotingConnection(name_server) as connection:
        for code in (77_777, 88_888, 2**40, 5):
            assert connection.invoke(code, {}).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    samples = scrape(url)
    codes = {dict(labels).get("request_code") for (name, labels) in samples if name.startswith("rocketmq_rpc_latency")}
    assert "unknown" in codes and not {"77777", "88888", str(2**40)} & codes
    with Admin(endpoint) as admin, Producer(endpoint) as producer:
        admin.create_topic("going", 1, "BatchCQ")
        producer.send(Message("going", BODY, queue_id=0))
        assert value(scrape(url), "rocketmq_messages_in_total", topic="going") == 1
        admin.delete_topic("going")
    assert not [key for key in scrape(url) if ("topic", "going") in key[1]]


def test_the_metrics_port_serves_a_few_at_once_each_for_a_while(tmp_path):
    """Issue 44: 2,000 half-sent requests held 2,023 threads; four scrapers in a loop slowed
    every client. Now: a few connections served at once (the rest closed at once), a request
    finished within the timeout or dropped."""
    from prometheus_client import CollectorRegistry, Counter

    from broker_sim.doors.metrics_http import MetricsServer

    registry = CollectorRegistry()
    Counter("made", "pages made", registry=registry).inc()
    server = MetricsServer(("127.0.0.1", 0), registry, max_connections=4, timeout_s=1.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def serving() -> int:  # the server's threads (a count of all would see other tests' come and go)
        return sum("process_request_thread" in thread.name for thread in threading.enumerate())
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        stalled = []
        for _ in range(50):  # each sends half a request and waits
            connection = socket.create_connection(("127.0.0.1", server.server_port))
            connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            stalled.append(connection)
        assert serving() <= 4  # no thread for those past the limit
        deadline = time.monotonic() + 10
        while True:  # the four served are dropped after the timeout; then a scrape is served
            try:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    assert b"made_total 1.0" in answer.read()
                break
            except OSError:
                assert time.monotonic() < deadline, "no scrape was served after the stalled requests' timeout"
                time.sleep(0.2)
        for connection in stalled:
            connection.settimeout(5)
            assert connection.recv(1) == b"", "a stalled request was kept open"
            connection.close()
    finally:
        server.shutdown()
        server.server_close()
