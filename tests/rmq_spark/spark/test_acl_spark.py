"""The data source against a broker with ACLs: accessKey and secretKey sign its reads and writes
(the secret redacted from plans, or kept out of the options through RMQ_SECRET_KEY); without
them, or beyond the account's permissions, the query fails saying so."""

from __future__ import annotations

import uuid

import pytest

from rmq_spark import Admin, Credentials, Message, Producer, TransportConfig
from rmq_spark.spark.options import parse_options
from support.acl import SECRETS, config


def read_orders(spark, access_key: str | None, secret_key: str | None = None, **more):
    reader = spark.read.format("rocketmq-batch").option("endpoint", more.pop("endpoint")).option("topic", "orders")
    if access_key:
        reader = reader.option("accessKey", access_key)
    if secret_key:
        reader = reader.option("secretKey", secret_key)
    return reader.load()


def test_reads_and_writes_are_signed_with_the_accounts_keys(spark, acl_broker):
    body = f"spark-{uuid.uuid4().hex[:6]}"
    (spark.createDataFrame([(body,)], "body string").write.format("rocketmq-batch")
     .option("endpoint", acl_broker.endpoint).option("topic", "orders")
     .option("accessKey", "writer").option("secretKey", SECRETS["writer"]).mode("append").save())

    frame = read_orders(spark, "reader", SECRETS["reader"], endpoint=acl_broker.endpoint)
    assert body.encode() in [bytes(r.body) for r in frame.select("body").collect()]
    plan = frame._jdf.queryExecution().toString()  # every form of the plan, as explain(extended) prints
    assert SECRETS["reader"] not in plan



def test_the_secret_may_come_from_the_drivers_environment(monkeypatch):
    """Spark's Python workers inherit the environment the application started with: there the
    data source finds RMQ_SECRET_KEY, and the secret is in no option at all."""
    monkeypatch.setenv("RMQ_SECRET_KEY", "from-the-environment")
    options = parse_options({"endpoint": "127.0.0.1:10911", "topic": "orders", "accessKey": "reader"})
    assert options.address.transport.credentials == Credentials("reader", "from-the-environment")
    assert "from-the-environment" not in repr(options)


def test_without_keys_or_beyond_permissions_the_query_fails_saying_so(spark, acl_broker):
    with pytest.raises(Exception, match="authorization header"):
        read_orders(spark, None, endpoint=acl_broker.endpoint).collect()
    with pytest.raises(Exception, match="may not (use|subscribe to) topic 'orders'"):
        read_orders(spark, "writer", SECRETS["writer"], endpoint=acl_broker.endpoint).collect()
    with pytest.raises(Exception, match="option secretKey needs accessKey"):
        read_orders(spark, None, "a-secret", endpoint=acl_broker.endpoint)

    with Admin(acl_broker.endpoint, TransportConfig(credentials=Credentials("ops", SECRETS["ops"]))) as admin:
        before = sum(q.max_offset for q in admin.describe_topic("orders")[1])
    with pytest.raises(Exception, match="may not (use|publish to) topic 'orders'"):
        (spark.createDataFrame([("refused",)], "body string").write.format("rocketmq-batch")
         .option("endpoint", acl_broker.endpoint).option("topic", "orders")
         .option("accessKey", "reader").option("secretKey", SECRETS["reader"]).mode("append").save())
    with Admin(acl_broker.endpoint, TransportConfig(credentials=Credentials("ops", SECRETS["ops"]))) as admin:
        assert sum(q.max_offset for q in admin.describe_topic("orders")[1]) == before


def test_a_topic_pattern_through_name_servers_reads_the_topics_the_account_may_use(spark, acl_broker):
    """Listing topics through name servers needs no admin account: a reader's pattern matches
    the topics it may use ('orders'), not those it may not ('audit', denied to it)."""
    body = f"pattern-{uuid.uuid4().hex[:6]}"
    with Producer(acl_broker.endpoint, transport=config("writer"), auto_batch=False) as producer:
        producer.send(Message("orders", body.encode()))
        producer.send(Message("audit", body.encode()))
    frame = (spark.read.format("rocketmq-batch").option("nameServer", acl_broker.name_server)
             .option("topicPattern", ".*").option("accessKey", "reader").option("secretKey", SECRETS["reader"]).load())
    rows = frame.where(frame.body == body.encode()).select("topic").collect()
    assert [r.topic for r in rows] == ["orders"]
