"""A real broker under hostile input, and what must still hold after each batch of it: the
broker answers a normal request in time, a known set of messages reads back byte-identical,
its memory stayed bounded, no thread died and nothing was logged as an error (an internal
error is how a door reports an exception its decoders let escape)."""

from __future__ import annotations

import logging
import threading
import time

import grpc

from broker_sim.broker import Broker
from broker_sim.doors.remoting import RemotingOptions
from broker_sim.store import StoreConfig
from rmq_wire import record as fmt
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import broker_pb2_grpc as pb_grpc
from watch import rss_mib

KNOWN_TOPIC = "Known-Data-Z9"  # a name the generated requests do not make
SENDS_TOPIC = "Mutated-Sends-Q7"  # a BatchCQ topic for mutated valid sends (a name the generated deletes do not make)
KNOWN_BODIES = [b"known-%03d-" % i + bytes(range(i % 256)) for i in range(40)]
CALL_SECONDS = 10.0
# The broker's (and this test process's) memory may grow this much while under fire: caches
# and pools warming up, never per hostile input.
RSS_GROWTH_MIB = 200


class ErrorLog(logging.Handler):
    """Every ERROR logged anywhere, and every exception that ended a thread."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()[:500]}"
                            + (f" ({record.exc_info[1]!r})" if record.exc_info else ""))

    def thread_died(self, args) -> None:
        self.records.append(f"thread {args.thread.name} died: {args.exc_value!r}")


class BrokerUnderFire:
    """A Broker with all its doors on 127.0.0.1 and a real data directory, holding KNOWN_BODIES."""

    def __init__(self, data_dir):
        self.broker = Broker(data_dir, "127.0.0.1", 0, StoreConfig(segment_bytes=16 << 20),
                             remoting=RemotingOptions(port=0))
        self.errors = ErrorLog()
        self._excepthook = threading.excepthook

    def start(self) -> "BrokerUnderFire":
        logging.getLogger().addHandler(self.errors)
        threading.excepthook = self.errors.thread_died
        self.broker.start()
        self.channel = grpc.insecure_channel(self.broker.endpoint)
        self.admin = pb_grpc.AdminStub(self.channel)
        self.messaging = pb_grpc.MessagingStub(self.channel)
        self._store_known_data()
        self.threads = [t for t in threading.enumerate() if t is not threading.main_thread()]
        self.baseline_rss = rss_mib()
        return self

    def stop(self) -> None:
        self.channel.close()
        self.broker.stop(grace=1.0)
        threading.excepthook = self._excepthook
        logging.getLogger().removeHandler(self.errors)

    @property
    def remoting_address(self) -> tuple[str, int]:
        return "127.0.0.1", self.broker.remoting.server.port

    @property
    def remoting_codes(self) -> list[int]:
        return sorted(self.broker.remoting.server.handlers)

    def _store_known_data(self) -> None:
        topic = pb.Topic(name=KNOWN_TOPIC, queue_count=1, queue_type=pb.SIMPLE_CQ)
        self.admin.CreateTopic(pb.CreateTopicRequest(topic=topic), timeout=CALL_SECONDS)
        self.admin.CreateTopic(pb.CreateTopicRequest(topic=pb.Topic(name=SENDS_TOPIC, queue_count=2,
                                                                    queue_type=pb.BATCH_CQ)), timeout=CALL_SECONDS)
        for body in KNOWN_BODIES:
            self.messaging.Send(pb.SendRequest(topic=KNOWN_TOPIC, queue_id=0, single=pb.SingleMessage(body=body)),
                                timeout=CALL_SECONDS)
        deadline = time.monotonic() + CALL_SECONDS
        while self.read_known() != KNOWN_BODIES:
            assert time.monotonic() < deadline, "the known messages never became readable"
            time.sleep(0.01)

    def read(self, topic: str, queue_id: int, start: int = 0, end: int = 0) -> bytes:
        """The stored records of offsets ``start`` .. ``end - 1`` (end 0: all), concatenated."""
        request = pb.ReadRangesRequest(ranges=[pb.ReadRange(topic=topic, queue_id=queue_id, start_offset=start,
                                                            end_offset=end)])
        return b"".join(bytes(response.records) for response in self.messaging.ReadRanges(request,
                                                                                             timeout=CALL_SECONDS))

    def read_known(self) -> list[bytes]:
        data, pos, bodies = self.read(KNOWN_TOPIC, 0, 0, len(KNOWN_BODIES)), 0, []
        while pos < len(data):
            check, size, reason = fmt.check_record(data, pos, len(data))
            assert check is fmt.Check.OK, f"a known record at {pos} reads back damaged: {reason}"
            bodies.append(bytes(fmt.decode_record(data, pos).body))
            pos += size
        return bodies

    def assert_answers(self) -> None:
        """A normal request is answered in time."""
        self.admin.DescribeTopic(pb.DescribeTopicRequest(name=KNOWN_TOPIC), timeout=CALL_SECONDS)

    def assert_intact(self) -> None:
        """Everything the broker promises under hostile input."""
        self.assert_answers()
        assert self.read_known() == KNOWN_BODIES, "the known messages changed"
        assert not self.errors.records, "errors were logged:\n" + "\n".join(self.errors.records[:10])
        dead = [t.name for t in self.threads if not t.is_alive()]
        assert not dead, f"threads died: {dead}"
        rss = rss_mib()
        if rss is not None and self.baseline_rss is not None:
            assert rss - self.baseline_rss <= RSS_GROWTH_MIB, \
                f"memory grew from {self.baseline_rss} to {rss} MiB under hostile input"
