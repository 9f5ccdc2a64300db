"""Malformed requests, garbage bytes included, are refused with INVALID_ARGUMENT while a good
client keeps sending and reading; afterwards every stored record is intact, also after a
restart."""

import random
import threading

import grpc

from broker_sim.broker import Broker
from broker_sim.store.paths import StorePaths
from rmq_wire.contract import broker_pb2 as pb
from support.grpc_client import Client, refusal, stream_refusal
from test_read import READ_REFUSALS, read_request
from test_send import MALFORMED_SENDS

INVALID = grpc.StatusCode.INVALID_ARGUMENT
METHODS = ["/rmq_spark.protocol.v1.Messaging/Send", "/rmq_spark.protocol.v1.Admin/CreateTopic",
           "/rmq_spark.protocol.v1.Admin/CommitOffsets", "/rmq_spark.protocol.v1.Admin/OffsetForTimestamp"]
GOOD_MESSAGES_AT_LEAST = 30


class GoodClient(threading.Thread):
    """Sends numbered messages to "good" and reads each one back, until stopped."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        self.client = Client(endpoint)
        self.stop = threading.Event()
        self.sent = 0
        self.failures = []

    def run(self):
        try:
            while not self.stop.is_set() or self.sent < GOOD_MESSAGES_AT_LEAST:
                body = b"good-%d" % self.sent
                answer = self.client.send_single("good", 0, body, tags="G")
                assert answer.base_offset == self.sent
                self.client.wait_readable("good", 0, self.sent + 1)
                [read] = self.client.read([("good", 0, self.sent, 0)])
                assert [bytes(r.body) for r in read.records] == [body]
                self.sent += 1
        except Exception as err:
            self.failures.append(err)
        finally:
            self.client.close()


def hammer(endpoint: str, seed: int, results: list) -> None:
    """Every malformed request of the send and read tests, bad admin calls and garbage bytes."""
    client = Client(endpoint)
    rng = random.Random(seed)
    try:
        for _ in range(3):
            for _name, fields, expected_reason, _text in MALFORMED_SENDS:
                code, reason, _ = refusal(client.messaging.Send, pb.SendRequest(**fields))
                results.append((code, reason) == (INVALID, expected_reason))
            for _name, ranges, max_bytes, code_wanted, reason_wanted, _text in READ_REFUSALS:
                code, reason, _, received = stream_refusal(client, read_request(ranges, max_bytes))
                results.append((code, reason, received) == (code_wanted, reason_wanted, 0))
            code, reason, _ = refusal(client.admin.CreateTopic, pb.CreateTopicRequest(
                topic=pb.Topic(name="good", queue_count=7, queue_type=pb.BATCH_CQ)))
            results.append((code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "TOPIC_CONFLICT"))
            for method in METHODS:
                garbage = client.channel.unary_unary(method)
                code, reason, _ = refusal(garbage, rng.randbytes(rng.randrange(1, 200)), timeout=10)
                results.append((code, reason) == (INVALID, "INVALID_ARGUMENT"))
            stream = client.channel.unary_stream("/rmq_spark.protocol.v1.Messaging/ReadRanges")
            code, reason, _ = refusal(stream, b"\x0a\x05\x0a\x03\xff\xfe\xfd", timeout=10)  # a topic not UTF-8
            results.append((code, reason) == (INVALID, "INVALID_ARGUMENT"))
    finally:
        client.close()


def test_malformed_requests_are_refused_while_a_good_client_works(tmp_path):
    data = tmp_path / "data"
    broker = Broker(data, "127.0.0.1", 0)
    broker.start()
    try:
        setup = Client(broker.endpoint)
        setup.create("good", 1)
        setup.create("s", 2)  # the topics the malformed requests name
        setup.create("b", 1, pb.BATCH_CQ)
        setup.send_single("s", 0, b"x")
        good = GoodClient(broker.endpoint)
        good.start()
        results = []
        hammers = [threading.Thread(target=hammer, args=(broker.endpoint, seed, results)) for seed in range(4)]
        for thread in hammers:
            thread.start()
        for thread in hammers:
            thread.join(60)
        good.stop.set()
        good.join(30)
        assert not good.failures, good.failures
        assert len(results) > 300 and all(results), f"{results.count(False)} of {len(results)} answered wrongly"
        assert good.sent >= GOOD_MESSAGES_AT_LEAST
        stats = setup.stats()
        assert stats.messages_put == good.sent + 1
        stored = setup.read([("good", 0, 0, 0), ("s", 0, 0, 0), ("s", 1, 0, 0), ("b", 0, 0, 0)])
        assert [bytes(r.body) for r in stored[0].records] == [b"good-%d" % i for i in range(good.sent)]
        assert [len(r.records) for r in stored[1:]] == [1, 0, 0]
        setup.close()
    finally:
        broker.stop(grace=1.0)
    assert not StorePaths(data).abort.exists()
    # After a restart: recovery finds the log whole, and the same records are served.
    again = Broker(data, "127.0.0.1", 0)
    again.start()
    try:
        assert again.core.store.recovery.clean and again.core.store.recovery.dropped_units == 0
        client = Client(again.endpoint)
        [read] = client.read([("good", 0, 0, 0)])
        assert [bytes(r.body) for r in read.records] == [b"good-%d" % i for i in range(good.sent)]
        client.close()
    finally:
        again.stop(grace=1.0)
