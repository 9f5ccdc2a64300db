"""RocketMQ's transactional messages, one message at a time: a half message prepared alone (a
SEND_MESSAGE_V2 flagged TRANSACTION_PREPARED, never in a batch), ended alone (END_TRANSACTION,
which is not idempotent: a commit sent twice stores the message twice), the broker's checks of
half messages answered (CHECK_TRANSACTION_STATE), and a committed message found by its UNIQ_KEY
(QUERY_MESSAGE). The Spark sink builds exactly once on these (rmq_spark/spark/sink_rocketmq.py)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Sequence

import orjson

from rmq_spark.client.message_ids import UniqueKeys
from rmq_spark.client.remoting.calls import Calls
from rmq_spark.client.remoting.messages import Messages
from rmq_spark.client.remoting.refusals import refused
from rmq_spark.client.remoting.routes import NEW_TOPIC_QUEUES, NameServers
from rmq_spark.client.remoting.sends import STORED, properties_text
from rmq_spark.errors import RmqError
from rmq_spark.structs import HalfMessage
from rmq_wire.record import (
    AUTO_CREATE_TOPIC,
    PROPERTY_CHECK_IMMUNITY_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    SysFlag,
    decode_record,
)
from rmq_wire.remoting import RemotingCommand, RemotingConnection, RequestCode, ResponseCode

HEARTBEAT_S = 60.0  # a producer group is announced to a broker again after this (the broker forgets at 120 s)
COMMIT, ROLLBACK = "8", "12"  # MessageSysFlag.TRANSACTION_COMMIT_TYPE / ROLLBACK_TYPE


class Halves:
    """``checks_answered``: UNIQ_KEY -> the answer sent to a broker's check (committed or not)."""

    def __init__(self, calls: Calls, names: NameServers, messages: Messages, unique_keys: UniqueKeys, client_id: str):
        self.calls = calls
        self.names = names
        self.messages = messages
        self.unique_keys = unique_keys
        self.client_id = client_id
        self.checks_answered: dict[str, bool] = {}
        self._answers: dict[str, Callable[[dict], bool | None]] = {}  # producer group -> its answers
        self._announced: dict[tuple[str, str], float] = {}  # (broker address, group) -> when
        self._answering: concurrent.futures.ThreadPoolExecutor | None = None  # started by the first check
        self._lock = threading.Lock()

    def send(self, topic: str, queue: tuple[str, int], body: bytes, properties: dict, group: str,
             check_immunity_s: int = 0) -> Future:
        """Prepare one message under RocketMQ's transactional messages, as producer ``group``
        (whose name END_TRANSACTION must repeat); a Future of its HalfMessage, or of the
        RmqError that refused it. ``properties`` are the message's own (TAGS, KEYS, ...);
        ``check_immunity_s``: the broker checks it no sooner (CHECK_IMMUNITY_TIME_IN_SECONDS; at
        least its transactionTimeOut; 0: the broker's own). A broker that sheds load
        (SYSTEM_BUSY: the request waited too long in its queue and was not run) is asked again,
        as RocketMQ's producers do."""
        broker, queue_id = queue
        route = self.names.send_route(topic)
        address = route.address(broker)
        broker = route.named(broker)
        self._as_producer(address, group)
        unique_key = self.unique_keys.next()
        own = {**properties, PROPERTY_CHECK_IMMUNITY_SECONDS: str(check_immunity_s)} if check_immunity_s else properties
        text = properties_text({**own, "UNIQ_KEY": unique_key, "WAIT": "true",
                                PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: group})
        fields = {"a": group, "b": topic, "c": AUTO_CREATE_TOPIC, "d": NEW_TOPIC_QUEUES, "e": queue_id,
                  "f": SysFlag.TRANSACTION_PREPARED,
                  "g": int(time.time() * 1000), "h": 0, "i": text, "j": 0, "k": "false", "m": "false", "n": broker}
        half: Future = Future()
        retries = self.calls.config.retries

        def send(attempt: int) -> None:
            try:
                self.calls.request(address, RequestCode.SEND_MESSAGE_V2, fields, body).add_done_callback(
                    lambda future: answered(future, attempt))
            except RmqError as error:
                half.set_exception(error)

        def answered(future: Future, attempt: int) -> None:
            try:
                answer = future.result()
            except (ConnectionError, OSError) as err:
                half.set_exception(self.calls.unavailable(address, f"{address}: {err}"))
                return
            if answer.code == ResponseCode.SYSTEM_BUSY and attempt < retries:
                threading.Timer(self.calls.backoff_s(attempt), send, (attempt + 1,)).start()
                return
            if answer.code not in STORED:
                half.set_exception(refused(answer, f"the broker at {address} refused a transactional message "
                                                   f"to {topic!r} queue {queue_id}"))
                return
            head = answer.ext_fields
            half.set_result(HalfMessage(broker, topic, head.get("transactionId") or unique_key,
                                        int(head["msgId"][-16:], 16), int(head.get("queueOffset", 0))))

        send(0)
        return half

    def end(self, halves: Sequence[HalfMessage], commit: bool, group: str, timeout_ms: int | None = None,
            in_flight: int = 128, ended: Callable[[int], None] | None = None) -> None:
        """END_TRANSACTION for each half message, committing or rolling it back, ``in_flight``
        at a time, each answered (RocketMQ's clients send them oneway); raises the first
        refusal or failure once those in flight are answered. ``ended(n)`` is told how many
        are answered so far. An end is sent again only when the broker shed it unrun
        (SYSTEM_BUSY, its flow control) or refused it before it ran (ILLEGAL_OPERATION: RocketMQ
        5 takes a producer's end of a half message older than its CHECK_IMMUNITY_TIME_IN_SECONDS
        only as the answer to a check, so it is sent again as one): a commit run twice stores the
        message twice."""
        decision = COMMIT if commit else ROLLBACK
        pending: deque = deque()
        done = 0

        def send(half: HalfMessage, attempt: int, as_answer: bool = False) -> None:
            address = self.names.route(half.topic).address(half.broker)
            self._as_producer(address, group)
            fields = {"producerGroup": group, "tranStateTableOffset": str(half.queue_offset),
                      "commitLogOffset": str(half.commit_log_offset), "commitOrRollback": decision,
                      "fromTransactionCheck": "true" if as_answer else "false", "msgId": half.unique_key,
                      "transactionId": half.unique_key, "topic": half.topic, "bname": half.broker}
            future = self.calls.request(address, RequestCode.END_TRANSACTION, fields)
            pending.append((address, half, attempt, as_answer, future))

        def settle(upto: int) -> None:
            nonlocal done
            while len(pending) > upto:
                address, half, attempt, as_answer, future = pending.popleft()
                answer = self.calls.wait(future, address, RequestCode.END_TRANSACTION, timeout_ms)
                if answer.code == ResponseCode.SYSTEM_BUSY and attempt < self.calls.config.retries:
                    self.calls.sleep(self.calls.backoff_s(attempt))
                    send(half, attempt + 1, as_answer)
                    continue
                if answer.code == ResponseCode.ILLEGAL_OPERATION and not as_answer:
                    send(half, attempt, True)
                    continue
                if answer.code != ResponseCode.SUCCESS:
                    raise refused(answer, f"the broker at {address} refused to {'commit' if commit else 'roll back'} "
                                          f"transactional message {half.unique_key} of {half.topic!r}")
                done += 1
                if ended is not None:
                    ended(done)

        for half in halves:
            send(half, 0)
            settle(in_flight)
        settle(0)

    def answer_checks(self, group: str, answer: Callable[[dict], bool | None]) -> None:
        """Answer the broker's checks of producer ``group``'s half messages (CHECK_TRANSACTION_STATE)
        while this transport lives: ``answer(properties)`` of the checked half message says commit
        (True), roll back (False) or not known yet (None: the broker asks again later). The
        transport says it is a producer of ``group`` (HEART_BEAT) to each broker it sends that
        group's half messages to or ends them on, so that the broker's checks come to it.

        RocketMQ checks a copy: before it asks, its check service writes the half message again
        (a new commit log offset) and takes the answer as the end of that copy alone."""
        self._answers[group] = answer

    def _as_producer(self, address: str, group: str) -> None:
        """Tell the broker at ``address`` that this client produces for ``group`` (and renew it
        before the broker forgets it, 120 s without one), when its checks are answered here."""
        if group not in self._answers:
            return
        key = (address, group)
        if time.monotonic() - self._announced.get(key, -HEARTBEAT_S) < HEARTBEAT_S:
            return
        self._announced[key] = time.monotonic()
        data = {"clientID": self.client_id, "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
        self.calls.request(address, RequestCode.HEART_BEAT, {}, orjson.dumps(data))  # its answer is not needed

    def asked(self, connection: RemotingConnection, command: RemotingCommand) -> None:
        """A request the broker sent on ``connection``: a check of a half message is answered
        on the transport's thread for answers (an answer may read files, and a broker may check
        thousands at once; the connection's reader must not wait)."""
        if command.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        with self._lock:
            if self._answering is None:
                self._answering = concurrent.futures.ThreadPoolExecutor(1, "rocketmq-batch-check")
            try:
                self._answering.submit(self.answer_check, connection, command)
            except RuntimeError:  # closed meanwhile: the broker asks again
                pass

    def answer_check(self, connection: RemotingConnection, command: RemotingCommand) -> None:
        """Answer one check, oneway, as RocketMQ's producers answer: commit, roll back, or
        nothing while the answer is not known (the broker asks again)."""
        head = command.ext_fields or {}
        try:
            record = decode_record(memoryview(command.body or b""), 0)
        except (ValueError, IndexError):
            return  # not a message: nothing to answer
        group = record.properties.get(PROPERTY_PRODUCER_GROUP)
        answer = self._answers.get(group)
        if answer is None:
            return
        try:
            commit = answer(record.properties)
        except Exception:  # noqa: BLE001 - an answer not known is asked again
            return
        if commit is None:
            return
        unique_key = record.properties.get("UNIQ_KEY") or head.get("transactionId", "")
        fields = {"producerGroup": group, "tranStateTableOffset": head.get("tranStateTableOffset", "0"),
                  "commitLogOffset": head.get("commitLogOffset", "0"),
                  "commitOrRollback": COMMIT if commit else ROLLBACK,
                  "fromTransactionCheck": "true", "msgId": head.get("msgId", unique_key),
                  "transactionId": head.get("transactionId", unique_key), "topic": record.topic,
                  "bname": head.get("brokerName", "")}
        try:
            connection.oneway(RequestCode.END_TRANSACTION, fields)
        except (ConnectionError, OSError):
            return
        self.checks_answered[unique_key] = commit

    def message_exists(self, topic: str, broker: str, unique_key: str) -> bool:
        """Whether ``broker`` stores a message of ``topic`` with this UNIQ_KEY: a committed half
        message (the broker's index of keys; RocketMQ's mqadmin queryMsgByUniqueKey)."""
        broker = self.names.route(topic).named(broker)
        return bool(self.messages.query(topic, unique_key, unique_key=True, begin_ms=0, end_ms=2**63 - 1,
                                        broker=broker))

    def close(self) -> None:
        with self._lock:
            if self._answering is not None:
                self._answering.shutdown(wait=False, cancel_futures=True)
