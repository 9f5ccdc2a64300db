"""Queue offsets: each readable queue's min / max (GET_TOPIC_STATS_INFO, all in flight), a wait
for queues to move past offsets known (RocketMQ's long polling: suspended PULL_MESSAGEs), and the
first offsets stored at or after a time (SEARCH_OFFSET_BY_TIMESTAMP, checked by a pull each)."""

from __future__ import annotations

import concurrent.futures
import time
from concurrent.futures import Future

from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.pulls import PULL_SUBSCRIPTION, PULL_SUSPEND
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NameServers
from rmq_spark.errors import RmqError, TopicNotFoundError
from rmq_spark.structs import QueueOffsets
from rmq_wire.codec.records import read_headers
from rmq_wire.remoting import RequestCode, ResponseCode, fastjson

MAX_SUSPENDED_PULLS = 256  # the queues a long poll of offsets waits on at most, a suspended pull each


class Offsets:
    """``pull_group``: the consumer group the pulls name (settable: the transport's)."""

    def __init__(self, calls: Calls, names: NameServers, pull_group: str):
        self.calls = calls
        self.names = names
        self.pull_group = pull_group

    def of(self, topics: list[str], unreachable: set | None = None) -> dict[str, list[QueueOffsets]]:
        """Every readable queue's min / max offsets of ``topics``: a topic stats request per
        (topic, broker), all in flight at once. A topic's last known route while the name
        servers have none: its brokers away are reported unreachable (in ``unreachable``, when
        given), not the topic missing."""
        routes = {topic: self.names.route(topic) for topic in topics}
        calls = [(topic, entry) for topic, route in routes.items() for entry in route.brokers]
        answers = self.calls.invoke_all([(entry.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
                                         for topic, entry in calls], failures=unreachable is not None)
        out: dict[str, list[QueueOffsets]] = {topic: [] for topic in topics}
        for (topic, entry), answer in zip(calls, answers):
            if isinstance(answer, RmqError):  # the broker cannot be reached now
                unreachable.add(entry.broker)
                continue
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                self.names.forget(topic)
                raise TopicNotFoundError(f"topic {topic!r} is gone from broker {entry.broker}: {answer.remark}")
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {entry.broker} refused the offsets of topic {topic!r}")
            table = fastjson.loads(answer.body).get("offsetTable") or {}
            for queue, offsets in table.items():
                queue = dict(queue)
                if queue.get("brokerName", entry.broker) == entry.broker and queue["queueId"] < entry.read_queues:
                    out[topic].append(QueueOffsets(topic, int(queue["queueId"]), int(offsets["minOffset"]),
                                                   int(offsets["maxOffset"]), entry.broker))
        for queues in out.values():
            queues.sort(key=lambda q: (q.broker, q.queue_id))
        return out

    def wait_past(self, past: dict, wait_ms: int) -> None:
        """RocketMQ's long polling: a suspended PULL_MESSAGE of one message for each queue of
        ``past`` ({(topic, broker, queue id): offset}) at its offset, all in flight; returns once
        one is answered with messages (or anything but "none yet": a queue gone, a broker away),
        or after ``wait_ms``. The rest are forgotten (the brokers answer them into the void when
        their wait ends). More queues than ``MAX_SUSPENDED_PULLS`` are not waited for (a pull
        held for each would load the brokers more than polling): the answer comes at once."""
        if len(past) > MAX_SUSPENDED_PULLS:
            return
        futures: dict[Future, str] = {}
        try:
            for (topic, broker, queue_id), offset in past.items():
                address = self.names.route(topic).address(broker)
                futures[self.calls.request(address, RequestCode.PULL_MESSAGE, {
                    "consumerGroup": self.pull_group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                    "maxMsgNums": 1, "sysFlag": PULL_SUSPEND | PULL_SUBSCRIPTION, "commitOffset": 0,
                    "suspendTimeoutMillis": wait_ms, "subscription": "*", "subVersion": 0,
                    "expressionType": "TAG"})] = address
            deadline = time.monotonic() + wait_ms / 1000 + 1  # a second for the answers to travel
            pending = set(futures)
            while pending and (left := deadline - time.monotonic()) > 0:
                done, pending = concurrent.futures.wait(pending, left, concurrent.futures.FIRST_COMPLETED)
                if any(f.exception() is not None or f.result().code != ResponseCode.PULL_NOT_FOUND for f in done):
                    return
        except RmqError:  # a route or a broker cannot be had now: the offsets say what is there
            return
        finally:
            for future, address in futures.items():
                self.calls.forget(future, address)

    def for_timestamp(self, topic: str, timestamp_ms: int, queue_ids: list[int], broker: str = "") -> dict[int, int]:
        route = self.names.route(topic)
        broker = route.named(broker)
        address = route.address(broker)
        if not queue_ids:
            queue_ids = [q for b, q in route.readable() if b == broker]
        answers = self.calls.invoke_all([(address, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                          {"topic": topic, "queueId": q, "timestamp": timestamp_ms})
                                         for q in queue_ids])
        out = {}
        for queue_id, answer in zip(queue_ids, answers):
            if answer.code != ResponseCode.SUCCESS:
                raise refused(answer, f"broker {broker} refused the offset by time of {topic!r} queue {queue_id}")
            out[queue_id] = int(answer.ext_fields["offset"])
        return self._stored_from(address, topic, out, timestamp_ms)

    def _stored_from(self, address: str, topic: str, offsets: dict[int, int], timestamp_ms: int) -> dict[int, int]:
        """The first offsets stored at or after ``timestamp_ms``, from a broker's answers
        ({queue id: offset}): the message at each is looked at (one pull each, all in flight),
        and a unit stored before the time is stepped over (RocketMQ 5's BatchCQ answers a time
        after its last message with its last batch's offset)."""
        offsets, check = dict(offsets), dict(offsets)
        for _ in range(8):
            if not check:
                break
            calls = [(address, RequestCode.PULL_MESSAGE, {
                "consumerGroup": self.pull_group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                "maxMsgNums": 1, "sysFlag": PULL_SUBSCRIPTION, "commitOffset": 0, "suspendTimeoutMillis": 0,
                "subscription": "*", "subVersion": 0, "expressionType": "TAG"}) for queue_id, offset in check.items()]
            answers, check = self.calls.invoke_all(calls), {}
            for (_address, _code, fields), answer in zip(calls, answers):
                if (answer.code == ResponseCode.SUCCESS and answer.body
                        and int(read_headers(answer.body).store_ms[0]) < timestamp_ms):
                    queue_id = fields["queueId"]
                    offsets[queue_id] = check[queue_id] = int(answer.ext_fields["nextBeginOffset"])
        return offsets
