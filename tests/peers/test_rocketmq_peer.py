"""RocketMQ's own Java clients against the real RocketMQ: the producer with autoBatch into a
BatchCQ topic and the pull consumer reading every message back (remoting), and the same through
the proxy with the gRPC client. The peer the benchmarks and later doors are checked against."""

import pytest

from peers.rocketmq import body, digest, grpc_consume, grpc_produce, java_produce, java_pull

pytestmark = pytest.mark.peers


def test_java_autobatch_producer_into_batch_cq_and_pull_consumer_reads_every_message(rocketmq):
    rocketmq.create_topic("peer-batch", queues=4, batch_cq=True)
    sent = java_produce(rocketmq.namesrv_addr, "peer-batch", messages=5000, threads=4, body_bytes=256)
    assert (sent["sent"], sent["failed"], sent["complete"]) == (5000, 0, True), sent
    read = java_pull(rocketmq.namesrv_addr, "peer-batch", expect=5000, timeout_s=60)
    assert read["received"] == 5000 and read["queues"] == 4
    assert read["digest"] == digest(body(i, 256) for i in range(5000))


def test_java_grpc_client_through_the_proxy(rocketmq):
    rocketmq.create_topic("peer-grpc", queues=2, batch_cq=True)
    rocketmq.create_group("peer-grpc-group")
    sent = grpc_produce(rocketmq.proxy_endpoint, "peer-grpc", messages=200, body_bytes=100)
    assert sent["sent"] == 200
    read = grpc_consume(rocketmq.proxy_endpoint, "peer-grpc", "peer-grpc-group", expect=200, timeout_s=60)
    assert read["received"] == 200 and read["digest"] == digest(body(i, 100) for i in range(200))
