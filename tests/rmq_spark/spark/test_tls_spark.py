"""The Spark data source over TLS: a write and a batch read through a TLS broker's gRPC door,
a read through its remoting door, and the TLS options checked at load()."""

from __future__ import annotations

import pytest

from rmq_spark import ConfigError
from rmq_spark.spark.options import parse_options
from support.tls import send


def tls_options(certs) -> dict:
    return {"tls": "true", "tlsCaFile": str(certs.ca)}


def read(spark, where: dict, options: dict):
    reader = spark.read.format("rocketmq-batch")
    for name, value in {**where, **options}.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_spark_write_and_read_over_tls(spark, tls_broker, tls_config, certs):
    topic, _queue = send({"endpoint": tls_broker.endpoint}, tls_config, 3)
    rows = spark.createDataFrame([(f"row-{i}",) for i in range(5)], "body string")
    writer = rows.write.format("rocketmq-batch").mode("append").option("endpoint", tls_broker.endpoint)
    for name, value in {**tls_options(certs), "topic": topic}.items():
        writer = writer.option(name, value)
    writer.save()
    bodies = {bytes(r.body) for r in read(spark, {"endpoint": tls_broker.endpoint},
                                          {**tls_options(certs), "topic": topic}).collect()}
    assert bodies == {b"m-0", b"m-1", b"m-2"} | {f"row-{i}".encode() for i in range(5)}


def test_a_spark_read_through_the_tls_remoting_door(spark, tls_broker, tls_config, certs):
    topic, _queue = send({"name_server": tls_broker.remoting.address}, tls_config, 4)
    df = read(spark, {"nameServer": tls_broker.remoting.address}, {**tls_options(certs), "topic": topic})
    assert sorted(bytes(r.body) for r in df.collect()) == [b"m-0", b"m-1", b"m-2", b"m-3"]


def test_a_plain_read_of_a_tls_broker_fails_saying_so(spark, tls_broker):
    with pytest.raises(Exception, match="serves TLS only: connect with TLS .*the Spark option tls=true"):
        read(spark, {"endpoint": tls_broker.endpoint}, {"topic": "any"}).collect()


@pytest.mark.parametrize("options, expected", [
    ({"tlsCaFile": "ca.pem"}, "option tlsCaFile applies to TLS connections: set the option tls=true too"),
    ({"tls": "yes"}, "option tls='yes': expected true or false"),
    ({"tls": "true", "tlsCertFile": "c.pem"}, "options tlsCertFile and tlsKeyFile go together"),
    ({"tls": "true", "tlsCaFile": "/no/such/ca.pem"}, "option tlsCaFile='/no/such/ca.pem': cannot read it"),
])
def test_tls_options_are_checked_at_load(options, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_options({"endpoint": "127.0.0.1:1", "topic": "t", **options})


def test_tls_options_make_the_sdks_transport(certs):
    address = parse_options({"endpoint": "127.0.0.1:1", "topic": "t", **tls_options(certs)}).address
    transport = address.sdk(timeout_ms=5)["transport"]
    assert (transport.tls, transport.tls_ca_file, transport.timeout_ms) == (True, str(certs.ca), 5)
