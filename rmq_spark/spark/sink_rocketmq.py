"""Exactly once into any RocketMQ through ``nameServer``, on RocketMQ's own transactional messages.

RocketMQ prepares a transactional message alone (a half message: never in a batch) and ends it
alone (END_TRANSACTION), and a commit sent twice stores the message twice. On that:

- **A write task attempt** prepares each of its rows as a half message, under the producer group
  of its sink (``producer_group``), and returns them to the driver in its commit message. An
  attempt that fails rolls back what it prepared.
- **The driver's commit of micro-batch N** first writes its decision beside the query's
  checkpoint (``<checkpoint>/rocketmq-batch/decisions/N.arrow``: the half messages it commits,
  written whole or not at all), then commits each of them, then marks the decision done
  (``N.done``).
- **A micro-batch replayed** (Spark runs N again when the driver died before its commit log
  recorded N) finds the decision: the replay's own half messages are rolled back, and of the
  decided ones, those that no commit reached are committed now. Which those are, the broker
  says: a committed message keeps its half message's UNIQ_KEY, which the broker's index finds
  (QUERY_MESSAGE, as ``mqadmin queryMsgByUniqueKey``).
- **The broker's checks** (CHECK_TRANSACTION_STATE, for a half message not ended within
  ``transactionTimeOut``) are answered from the decisions by whatever of the query is connected
  to the broker as the sink's producer group: its write tasks while they run and its commits
  (``CheckAnswers``; a Python data source has no process that lives as long as the query, so
  between micro-batches nobody answers and the broker asks again). RocketMQ checks a copy: its
  check service writes the half message again before asking, and takes the answer as the end of
  that copy alone. The driver ends every decided original itself, so a check is never answered
  with a commit (the message would be stored twice); it is answered with a rollback once the
  decision on its half message is final: decided and committed (the copy goes), or made without
  it (a dead attempt's, a replay's: it goes). Each half message names its micro-batch
  (``SPARK_MICRO_BATCH``; a writer driven outside Spark names none, and its half messages are
  answered only once a decision names them). Each also carries RocketMQ's
  ``CHECK_IMMUNITY_TIME_IN_SECONDS`` (``CHECK_IMMUNITY_S``), so that the broker checks none of a
  micro-batch's rows before then; past it RocketMQ 5 takes a producer's end only as a check's
  answer, which ``end_halves`` sends it as.
- **Half messages nobody answers for** (no task of the query runs while the broker checks) are
  dropped by the broker after ``transactionCheckMax`` checks (15, one each
  ``transactionCheckInterval``). A decision is finished by the next run of the query: RocketMQ's
  END_TRANSACTION still finds a half message the checks dropped, for as long as the broker keeps
  its commit log (72 hours).

What it costs: a request per row to prepare and one to commit (RocketMQ has no transactional
batch), against one request per batch of rows at least once.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark import BrokerUnavailableError, RequestTimeoutError
from rmq_spark.client.connect import connect
from rmq_spark.producer.columns import batch_columns, split_by_topic
from rmq_spark.producer.routing import Router
from rmq_spark.spark import kafka
from rmq_spark.structs import HalfMessage

log = logging.getLogger(__name__)

DECISIONS_DIR = ("rocketmq-batch", "decisions")
MICRO_BATCH_PROPERTY = "SPARK_MICRO_BATCH"  # a half message's micro-batch, for the answers to checks
# A half message is not checked for this long (RocketMQ's CHECK_IMMUNITY_TIME_IN_SECONDS; at least
# the broker's transactionTimeOut): a micro-batch shorter than it has no checks of its rows.
CHECK_IMMUNITY_S = 300
IN_FLIGHT = 1024  # half messages sent and not yet answered, per task
SLOW_COMMIT_ROWS, SLOW_COMMIT_ROWS_PER_S = 2_000, 500  # a commit this large this slow is warned of
RETAINED_DECISIONS = 100  # as Spark's spark.sql.streaming.minBatchesToRetain
_HALF_SCHEMA = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("unique_key", pa.string()),
                          ("commit_log_offset", pa.int64()), ("queue_offset", pa.int64())])


def producer_group(sink_id: str) -> str:
    """The producer group a sink's half messages name (RocketMQ's group names: letters, digits,
    ``_``, ``-``, ``%`` and ``|``, at most 255)."""
    return "rocketmq-batch-" + re.sub(r"[^A-Za-z0-9_%|-]", "_", sink_id)[:230]


def decisions_dir(location: Path, sink_id: str | None = None) -> Path:
    """Where decisions are kept: a query's beside its checkpoint; a df.write's under its
    checkpointLocation in a directory of its sink, so that the writes of several sinks (in one
    foreachBatch) may share a location."""
    directory = location.joinpath(*DECISIONS_DIR)
    return directory if sink_id is None else directory / f"sink-{sink_id}"


def _transport(options):
    return connect(name_server=options.address.name_server, config=options.address.transport)


def prepare(options, plan, batches: Iterator[pa.RecordBatch], sink_id: str, directory: Path,
            batch_id: int | None) -> tuple[list[HalfMessage], str]:
    """Prepare a task attempt's rows of micro-batch ``batch_id`` (None: outside Spark) as half
    messages; returns them and their producer group. A failure rolls back what was prepared
    (best effort: the broker drops the rest). The broker's checks are answered meanwhile."""
    group = producer_group(sink_id)
    transport = _transport(options)
    transport.answer_checks(group, CheckAnswers(directory))
    marked = {} if batch_id is None else {MICRO_BATCH_PROPERTY: str(batch_id)}
    router = Router(transport, plan.queue_selector, wait_ms=options.delivery_timeout_ms)
    prepared: list[HalfMessage] = []
    halves = _Halves(transport, group, options.delivery_timeout_ms, options.address.transport.timeout_ms)
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if plan.kafka:
                batch = kafka.to_rocketmq(batch)
            for topic, rows in split_by_topic(batch.select(plan.columns), options.topic):
                route = router.route(topic)
                columns = batch_columns(rows)
                lengths = np.asarray(pc.binary_length(columns.column("body")), dtype=np.int64)
                places = router.row_queues(route, rows, columns.column("keys"), lengths, options.batch_max_bytes)
                for place, body, properties in zip(places.tolist(), columns.column("body").to_pylist(),
                                                   _properties(columns, marked)):
                    halves.send(topic, route.queues[place], body, properties)
                    while len(halves.pending) >= IN_FLIGHT or (halves.pending and halves.pending[0][0].done()):
                        prepared.append(halves.answer())
        while halves.pending:
            prepared.append(halves.answer())
    except BaseException:  # what is still unanswered in ``pending`` is dropped by the broker's checks
        try:
            transport.end_halves(prepared, False, group)
        except Exception:  # noqa: BLE001 - the task's own error is the one to report
            pass
        transport.close()
        raise
    transport.close()
    return prepared, group


class _Halves:
    """A task's half messages in flight, in order. One whose broker cannot be reached (it
    restarts) is sent again, with backoff, for ``delivery_timeout_ms`` from its first send: safe,
    as a half message stored without its answer is in no decision, and the broker's checks roll
    it back."""

    def __init__(self, transport, group: str, delivery_timeout_ms: int, answer_timeout_ms: int):
        self.transport, self.group = transport, group
        self.delivery_s, self.answer_s = delivery_timeout_ms / 1000, answer_timeout_ms / 1000
        self.pending: deque = deque()  # (future, the send's arguments, its deadline)
        self.warned = False

    def send(self, topic: str, queue: tuple, body: bytes, properties: dict, deadline: float | None = None) -> None:
        arguments = (topic, queue, body, properties)
        deadline = deadline or time.monotonic() + self.delivery_s
        try:
            future = self.transport.send_half(*arguments, self.group, CHECK_IMMUNITY_S)
        except (BrokerUnavailableError, RequestTimeoutError) as error:
            future = Future()
            future.set_exception(error)
        self.pending.append((future, arguments, deadline))

    def answer(self) -> HalfMessage:
        """The first pending half message's, sent again while its broker cannot be reached."""
        future, arguments, deadline = self.pending.popleft()
        attempt = 0
        while True:
            try:
                return future.result(self.answer_s)
            except (BrokerUnavailableError, RequestTimeoutError, TimeoutError) as error:
                backoff_s = self.transport.backoff_s(min(attempt, 5))
                if time.monotonic() + backoff_s > deadline:
                    raise
                if not self.warned:
                    log.warning("rocketmq-batch: a transactional message to %s could not be prepared (%s); sent again "
                                "until the write's deliveryTimeout", arguments[0], error)
                    self.warned = True
                time.sleep(backoff_s)
                attempt += 1
                try:
                    future = self.transport.send_half(*arguments, self.group, CHECK_IMMUNITY_S)
                except (BrokerUnavailableError, RequestTimeoutError) as failed:
                    future = Future()
                    future.set_exception(failed)


def _properties(columns: pa.RecordBatch, marked: dict) -> Iterator[dict]:
    """Each row's message properties: its own (the ``properties`` map), TAGS, KEYS and the
    ``marked`` ones."""
    tags, keys = columns.column("tags").to_pylist(), columns.column("keys").to_pylist()
    maps = columns.column("properties").to_pylist()  # a map's rows are lists of (key, value)
    for tag, key, own in zip(tags, keys, maps):
        properties = {**dict(own), **marked} if own else dict(marked)
        if tag:
            properties["TAGS"] = tag
        if key:
            properties["KEYS"] = key
        yield properties


def commit(options, directory: Path, messages, batch_id: int, log) -> None:
    """Micro-batch ``batch_id``: decide (the returned attempts' half messages, kept in
    ``directory``), then commit them; a replay finishes the decision made before and rolls back
    its own."""
    returned = [m for m in messages if m is not None and m.halves]
    decided = directory / f"{batch_id}.arrow"
    done = directory / f"{batch_id}.done"
    transport = _transport(options)
    for group in {message.group for message in returned}:
        transport.answer_checks(group, CheckAnswers(directory))
    try:
        if decided.exists():
            log.warning("rocketmq-batch: micro-batch %d was decided by an earlier run of this query (a replay after "
                        "a restart): its rows are not written again", batch_id)
            for message in returned:
                transport.end_halves(message.halves, False, message.group)
            if not done.exists():
                _finish(transport, decided, done)
            return
        halves = [half for message in returned for half in message.halves]
        groups = {message.group for message in returned}
        if not halves:
            return
        _write_decision(directory, batch_id, halves, groups.pop())
        try:
            started = time.monotonic()
            for message in returned:
                transport.end_halves(message.halves, True, message.group)
            done.touch()
            _say_if_slow(log, len(halves), time.monotonic() - started)
        except (BrokerUnavailableError, RequestTimeoutError) as away:  # decided: finished once the broker is back
            log.warning("rocketmq-batch: micro-batch %d is decided but its commit was cut (%s): it is finished "
                        "when the broker answers again, within the write's deliveryTimeout", batch_id, away)
            _finish_when_back(transport, decided, done, options.delivery_timeout_ms)
    finally:
        transport.close()
    _forget_old(directory, batch_id)


def _say_if_slow(log, rows: int, seconds: float) -> None:
    """A commit of many rows at RocketMQ 5's op queue's pace (a full queue: 100 ms an end, some 120
    rows/s a broker) says which broker setting is why."""
    if rows >= SLOW_COMMIT_ROWS and rows / seconds < SLOW_COMMIT_ROWS_PER_S:
        log.warning("rocketmq-batch: %d rows were committed at %.0f rows/s: the RocketMQ broker ends transactional "
                    "messages 100 ms apart once its op queue is full; set its transactionOpMsgMaxSize to 262144 "
                    "(mqadmin updateBrokerConfig -k transactionOpMsgMaxSize -v 262144; docs/rocketmq-clusters.md)",
                    rows, rows / seconds)


def abort(options, directory: Path, messages, batch_id: int) -> None:
    """Roll back what the returned attempts prepared, unless a decision names it (Spark aborts
    a micro-batch whose commit failed: the decision stands, and the next run finishes it)."""
    if (directory / f"{batch_id}.arrow").exists():
        return
    returned = [m for m in messages if m is not None and m.halves]
    if not returned:
        return
    transport = _transport(options)
    try:
        for message in returned:
            transport.end_halves(message.halves, False, message.group)
    finally:
        transport.close()


def _write_decision(directory: Path, batch_id: int, halves: list[HalfMessage], group: str) -> None:
    """``<batch_id>.arrow``, whole or not at all (written aside, synced, renamed)."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([h._asdict() for h in halves], schema=_HALF_SCHEMA)
    table = table.replace_schema_metadata({"producer_group": group})
    aside = directory / f".{batch_id}.arrow.{os.getpid()}"
    with pa.OSFile(str(aside), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with open(aside, "rb") as written:
        os.fsync(written.fileno())
    os.replace(aside, directory / f"{batch_id}.arrow")
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_decision(path: Path) -> pa.Table:
    """A decision ``_write_decision`` wrote: its half messages, the producer group in its metadata."""
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def _finish(transport, decided: Path, done: Path) -> None:
    """Commit the decided half messages that no commit reached (the broker finds a committed
    one by its UNIQ_KEY), then mark the decision done."""
    table = _read_decision(decided)
    group = table.schema.metadata[b"producer_group"].decode()
    halves = [HalfMessage(**row) for row in table.to_pylist()]
    missing = [h for h in halves if not transport.message_exists(h.topic, h.broker, h.unique_key)]
    transport.end_halves(missing, True, group)
    done.touch()


def _finish_when_back(transport, decided: Path, done: Path, timeout_ms: int) -> None:
    """``_finish`` once the broker can be reached, asked again with backoff for ``timeout_ms``
    (what each commit reached, the broker says: nothing is committed twice)."""
    deadline = time.monotonic() + timeout_ms / 1000
    attempt = 0
    while True:
        try:
            _finish(transport, decided, done)
            return
        except (BrokerUnavailableError, RequestTimeoutError):
            backoff_s = transport.backoff_s(min(attempt, 5))
            if time.monotonic() + backoff_s > deadline:
                raise
            time.sleep(backoff_s)
            attempt += 1


class CheckAnswers:
    """The answer to the broker's check of a half message, from the decisions in ``directory``:
    roll it back (False) once the decision on it is final, else not known yet (None). Never a
    commit: the driver ends each decided half message itself, and RocketMQ's check is of a
    copy, so committing it would store the message twice.

    Final when: a decision names it and is done (its commit reached the broker: the copy goes);
    its micro-batch's decision does not name it (a dead attempt's, a replay's); or a later
    micro-batch was decided, so its own ended without it (Spark decides micro-batches in order).
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._keys: dict[int, frozenset] = {}  # micro-batch -> the UNIQ_KEYs its decision names

    def __call__(self, properties: dict) -> bool | None:
        unique_key, batch = properties.get("UNIQ_KEY"), properties.get(MICRO_BATCH_PROPERTY, "")
        decided = self._decided()
        if batch.isdigit():
            batch_id = int(batch)
            if batch_id in decided:
                if unique_key not in self._named(batch_id):
                    return False
                return False if (self.directory / f"{batch_id}.done").exists() else None
            return False if any(later > batch_id for later in decided) else None
        for batch_id in sorted(decided, reverse=True):  # named by none: a writer outside Spark
            if unique_key in self._named(batch_id):
                return False if (self.directory / f"{batch_id}.done").exists() else None
        return None

    def _decided(self) -> set[int]:
        try:
            names = [path.name for path in self.directory.iterdir()]
        except OSError:  # no decision yet (or the checkpoint is not visible from here)
            return set()
        return {int(name[:-len(".arrow")]) for name in names if name.endswith(".arrow") and name[0].isdigit()}

    def _named(self, batch_id: int) -> frozenset:
        if batch_id not in self._keys:
            table = _read_decision(self.directory / f"{batch_id}.arrow")
            self._keys[batch_id] = frozenset(table.column("unique_key").to_pylist())
        return self._keys[batch_id]


def _forget_old(directory: Path, batch_id: int) -> None:
    """Decisions of micro-batches Spark no longer replays (it keeps the last 100 by default)."""
    for path in directory.iterdir():
        stem = path.name.split(".")[0]
        if stem.isdigit() and int(stem) < batch_id - RETAINED_DECISIONS:
            path.unlink(missing_ok=True)
