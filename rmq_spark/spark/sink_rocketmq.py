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
- **Half messages no decision names** (an attempt that died with its task, a micro-batch that was
  not decided before the driver died) are never ended: the broker checks on them with their
  producer group, nobody answers, and after ``transactionCheckMax`` checks (15, one each
  ``transactionCheckInterval``) it drops them. Nobody answers the checks on purpose: a Python
  data source has no driver process that lives as long as the query (each commit runs in a fresh
  Python worker), and an answer racing a replay's commit of the same message would store it twice.
  A decision is finished by the next run of the query: RocketMQ's END_TRANSACTION still finds a
  half message the checks dropped, for as long as the broker keeps its commit log (72 hours).

What it costs: a request per row to prepare and one to commit (RocketMQ has no transactional
batch), against one request per batch of rows at least once.
"""

from __future__ import annotations

import os
import re
from collections import deque
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.client.connect import connect
from rmq_spark.producer.columns import batch_columns, split_by_topic
from rmq_spark.producer.routing import Router
from rmq_spark.spark import kafka
from rmq_spark.structs import HalfMessage

DECISIONS_DIR = ("rocketmq-batch", "decisions")
IN_FLIGHT = 1024  # half messages sent and not yet answered, per task
RETAINED_DECISIONS = 100  # as Spark's spark.sql.streaming.minBatchesToRetain
_HALF_SCHEMA = pa.schema([("broker", pa.string()), ("topic", pa.string()), ("unique_key", pa.string()),
                          ("commit_log_offset", pa.int64()), ("queue_offset", pa.int64())])


def producer_group(sink_id: str) -> str:
    """The producer group a sink's half messages name (RocketMQ's group names: letters, digits,
    ``_``, ``-``, ``%`` and ``|``, at most 255)."""
    return "rocketmq-batch-" + re.sub(r"[^A-Za-z0-9_%|-]", "_", sink_id)[:230]


def decisions_dir(checkpoint: Path) -> Path:
    """Where the decisions of a query's micro-batches are kept: beside its checkpoint."""
    return checkpoint.joinpath(*DECISIONS_DIR)


def _transport(options):
    return connect(name_server=options.address.name_server, config=options.address.transport)


def prepare(options, plan, batches: Iterator[pa.RecordBatch], sink_id: str) -> tuple[list[HalfMessage], str]:
    """Prepare a task attempt's rows as half messages; returns them and their producer group.
    A failure rolls back what was prepared (best effort: the broker drops the rest)."""
    group = producer_group(sink_id)
    transport = _transport(options)
    router = Router(transport, plan.queue_selector)
    prepared: list[HalfMessage] = []
    pending: deque = deque()
    timeout_s = options.address.transport.timeout_ms / 1000
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
                                                   _properties(columns)):
                    pending.append(transport.send_half(topic, route.queues[place], body, properties, group))
                    while len(pending) >= IN_FLIGHT or (pending and pending[0].done()):
                        prepared.append(pending.popleft().result(timeout_s))
        while pending:
            prepared.append(pending.popleft().result(timeout_s))
    except BaseException:  # what is still unanswered in ``pending`` is dropped by the broker's checks
        try:
            transport.end_halves(prepared, False, group)
        except Exception:  # noqa: BLE001 - the task's own error is the one to report
            pass
        transport.close()
        raise
    transport.close()
    return prepared, group


def _properties(columns: pa.RecordBatch) -> Iterator[dict]:
    """Each row's message properties: its own (the ``properties`` map), TAGS and KEYS."""
    tags, keys = columns.column("tags").to_pylist(), columns.column("keys").to_pylist()
    maps = columns.column("properties").to_pylist()
    for tag, key, own in zip(tags, keys, maps):
        properties = dict(own) if own else {}
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
        for message in returned:
            transport.end_halves(message.halves, True, message.group)
        done.touch()
    finally:
        transport.close()
    _forget_old(directory, batch_id)


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


def _finish(transport, decided: Path, done: Path) -> None:
    """Commit the decided half messages that no commit reached (the broker finds a committed
    one by its UNIQ_KEY), then mark the decision done."""
    with pa.memory_map(str(decided)) as source:
        table = pa.ipc.open_file(source).read_all()
    group = table.schema.metadata[b"producer_group"].decode()
    halves = [HalfMessage(**row) for row in table.to_pylist()]
    missing = [h for h in halves if not transport.message_exists(h.topic, h.broker, h.unique_key)]
    transport.end_halves(missing, True, group)
    done.touch()


def _forget_old(directory: Path, batch_id: int) -> None:
    """Decisions of micro-batches Spark no longer replays (it keeps the last 100 by default)."""
    for path in directory.iterdir():
        stem = path.name.split(".")[0]
        if stem.isdigit() and int(stem) < batch_id - RETAINED_DECISIONS:
            path.unlink(missing_ok=True)
