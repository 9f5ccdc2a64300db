"""RocketMQ's official Java gRPC client (rocketmq-client-java, through the peers' harness):
Producer and SimpleConsumer against broker_sim's v2 door and the real RocketMQ proxy."""

from __future__ import annotations

import uuid

from peers import rocketmq as peer


def test_java_producer_and_simple_consumer(v2_target, require_java_peers):
    topic, group = f"v2-java-{uuid.uuid4().hex[:8]}", v2_target.group()
    v2_target.create_topic(topic, queues=2)
    sent = peer.grpc_produce(v2_target.endpoint, topic, 50, body_bytes=256)
    assert sent["sent"] == 50
    got = peer.grpc_consume(v2_target.endpoint, topic, group, expect=50, timeout_s=60)
    assert got["received"] == 50
