"""Shared helpers of the store's crash-recovery tests (test_recovery_*.py; rocketmq-model.md,
"CommitLog", crash recovery).

Every test works on real files in pytest's tmp_path with a real MessageStore and small files
(64 KiB commitlog segments, 16 SimpleCQ / 8 BatchCQ units per index file), so the data crosses
segments and index files. An unclean stop is made in one of three ways:

* ``closed``: the store is closed, then the ``abort`` marker is created again (the checkpoint
  is then up to date: recovery relies on its scan and on dropping index units);
* ``open_copy``: the data directory is copied while the store is open and idle (the copy has
  the ``abort`` marker and an older checkpoint, so recovery also re-dispatches);
* a real ``SIGKILL`` of a writer process;
* a simulated power loss: each mapped file as it was at its last sync (``PowerLoss``).

Bodies are derived from (topic, queue id, queue offset) by ``body_of``, so every read is checked
exactly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from broker_sim.store import (
    BatchPut,
    GetStatus,
    MessageStore,
    QueueType,
    StoreConfig,
    SysFlag,
    decode_record,
    encode_message_batch,
)
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt

SEGMENT = 64 * 1024
SIMPLE_UNITS = 16
BATCH_UNITS = 8
UNIT_BYTES = {QueueType.SIMPLE_CQ: 20, QueueType.BATCH_CQ: 46}
UNITS_PER_FILE = {QueueType.SIMPLE_CQ: SIMPLE_UNITS, QueueType.BATCH_CQ: BATCH_UNITS}
# Flusher intervals of a minute: no checkpoint is taken behind a test's back.
CONFIG = StoreConfig(segment_bytes=SEGMENT, simple_cq_units_per_file=SIMPLE_UNITS,
                     batch_cq_units_per_file=BATCH_UNITS, flush_interval_ms=60_000,
                     index_flush_interval_ms=60_000)
WAIT_S = 10.0

TOPICS = {"S": (2, QueueType.SIMPLE_CQ), "B": (2, QueueType.BATCH_CQ)}
QUEUES = [(topic, q) for topic, (count, _type) in TOPICS.items() for q in range(count)]
CRC_PROPERTY_BYTES = fmt.CRC_RESERVED_BYTES  # "__HCRC32#" \x01 10 digits \x02
CRC_PREFIX_BYTES = len(fmt.CRC_PROPERTY_PREFIX)


# --- bodies and payloads (the SIGKILL writer runs these too: keep them self-contained) ---------

def body_of(topic, queue_id, offset, size=None):
    """The body of message ``offset`` of a queue: derived from where it is stored."""
    head = f"{topic}/{queue_id}/{offset};".encode()
    n = 24 + (offset * 37 + queue_id * 11) % 150 if size is None else size
    return (head * (n // len(head) + 1))[:n]


def single_args(topic, queue_id, offset, size=None):
    """(body, properties) of a single message at ``offset``."""
    body = body_of(topic, queue_id, offset, size)
    return body, {"KEYS": f"k{offset}", "TAGS": f"tag{offset % 3}"}


def early_payload(topic, queue_id, offset, count, size=None):
    """A MessageBatch payload of ``count`` messages from ``offset`` (stored one record each)."""
    messages = []
    for i in range(count):
        body = body_of(topic, queue_id, offset + i, size)
        messages.append((body, {"KEYS": f"k{offset + i}"}, i))
    return encode_message_batch(messages)


def inner_args(topic, queue_id, offset, count, size=None):
    """(payload, properties) of an inner batch of ``count`` messages from ``offset``."""
    payload = encode_message_batch([(body_of(topic, queue_id, offset + i, size), None, 0) for i in range(count)])
    return payload, {"TAGS": "inner"}


# --- writing with an expected model ----------------------------------------------------------

@dataclass
class Model:
    """The expected content of every queue: its bodies by offset."""

    bodies: dict = field(default_factory=lambda: defaultdict(list))
    units: dict = field(default_factory=lambda: defaultdict(int))  # index units of each queue
    records: int = 0  # commitlog records written

    def next(self, topic, queue_id):
        return len(self.bodies[(topic, queue_id)])

    def copy(self):
        out = Model(records=self.records)
        for key, bodies in self.bodies.items():
            out.bodies[key] = list(bodies)
        out.units.update(self.units)
        return out


def put_single(store, model, topic, queue_id, size=None):
    offset = model.next(topic, queue_id)
    body, props = single_args(topic, queue_id, offset, size)
    result = store.put_message(topic, queue_id, body, properties=props)
    assert result.ok and (result.queue_offset, result.count) == (offset, 1), result
    model.bodies[(topic, queue_id)].append(body)
    model.records += 1
    model.units[(topic, queue_id)] += 1
    return result


def put_early(store, model, topic, queue_id, count, size=None):
    offset = model.next(topic, queue_id)
    result = store.put_early_batch(topic, queue_id, early_payload(topic, queue_id, offset, count, size))
    assert result.ok and (result.queue_offset, result.count) == (offset, count), result
    assert len(result.physical_offsets) == count
    model.bodies[(topic, queue_id)].extend(body_of(topic, queue_id, offset + i, size) for i in range(count))
    model.records += count
    model.units[(topic, queue_id)] += count
    return result


def put_inner(store, model, topic, queue_id, count, size=None):
    offset = model.next(topic, queue_id)
    payload, props = inner_args(topic, queue_id, offset, count, size)
    result = store.put_inner_batch(topic, queue_id, BatchPut(payload, count, properties=props))
    assert result.ok and (result.queue_offset, result.count) == (offset, count), result
    assert len(result.physical_offsets) == 1
    model.bodies[(topic, queue_id)].extend(body_of(topic, queue_id, offset + i, size) for i in range(count))
    model.records += 1
    model.units[(topic, queue_id)] += 1
    return result


def create_topics(store, topics=TOPICS):
    for name, (queues, queue_type) in topics.items():
        status, detail = store.create_topic(name, queues, queue_type)
        assert status.value == "CREATED", detail


def fill(store, model, first_op, ops):
    """A fixed mix over S (SimpleCQ) and B (BatchCQ): singles, early batches and inner batches."""
    for i in range(first_op, first_op + ops):
        queue_id = i % 2
        step = i % 5
        if step == 0:
            put_single(store, model, "S", queue_id, size=200 + (i * 13) % 250)
        elif step == 1:
            put_inner(store, model, "B", queue_id, 2 + i % 3)
        elif step == 2:
            put_early(store, model, "S", queue_id, 2 + i % 2)
        elif step == 3:
            put_single(store, model, "B", queue_id)
        else:
            put_early(store, model, "B", queue_id, 2)


def fill_past(store, model, first_op, end):
    """fill() ten ops at a time until the log reaches ``end``; returns the next op."""
    while log_end(store) < end:
        fill(store, model, first_op, 10)
        first_op += 10
    return first_op


def open_at(path, config=CONFIG) -> MessageStore:
    return MessageStore(path, config)


def log_end(store) -> int:
    """Where the next record goes (setup only: tests assert through the public API)."""
    return store.commitlog.max_offset


# --- reading and checking ----------------------------------------------------------------------

def messages_of(record):
    if record.sys_flag & SysFlag.INNER_BATCH:
        return [bytes(body) for _flag, body, _props in fmt.iter_message_batch(record.body, record.inner_count)]
    return [bytes(record.body)]


def served(store, topic, queue_id, end=None):
    """Every record the queue serves, from offset 0 (to ``end``): (base, count, physical, bytes)."""
    out, offset, high = [], 0, store.max_offset(topic, queue_id) if end is None else end
    assert store.min_offset(topic, queue_id) == 0
    while offset < high:
        result = store.get_messages(topic, queue_id, offset, high)
        assert result.status is GetStatus.FOUND and result.batches, (topic, queue_id, offset, result.status)
        for batch in result.batches:
            assert batch.base_offset == offset, (topic, queue_id, offset, batch.base_offset)
            out.append((batch.base_offset, batch.count, batch.physical_offset, bytes(batch.data)))
            offset += batch.count
        assert result.next_begin_offset == offset
    return out


def read_queue(store, topic, queue_id, tail=None):
    """Every message body of a queue by offset, each record decoded and checked against its
    index unit (and, with ``tail``, to lie before the recovered tail)."""
    out = []
    for base, count, physical, data in served(store, topic, queue_id):
        where = f"{topic}/{queue_id} offset {base} at {physical}"
        assert len(data) >= fmt.FIXED_BYTES, f"{where}: the index unit points at {len(data)} bytes"
        record = decode_record(data)
        assert (record.topic, record.queue_id, record.queue_offset, record.physical_offset, record.inner_count,
                record.total_size) == (topic, queue_id, base, physical, count, len(data)), where
        if tail is not None:
            assert physical + len(data) <= tail, f"{where}: served past the tail {tail}"
        messages = messages_of(record)
        assert len(messages) == count, where
        out += messages
    return out


def assert_end_at(store, topic, queue_id, offset):
    """``offset`` is the queue's end: not indexed, not served."""
    assert store.max_offset(topic, queue_id) == offset, (topic, queue_id)
    assert store.lookup(topic, queue_id, offset) is None
    expected = GetStatus.OFFSET_OVERFLOW_ONE if offset else GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_messages(topic, queue_id, offset).status is expected
    assert store.get_messages(topic, queue_id, offset + 1).status in (GetStatus.OFFSET_OVERFLOW_BADLY, expected)


def check_model(store, model, tail=None):
    for (topic, queue_id), bodies in sorted(model.bodies.items()):
        assert store.max_offset(topic, queue_id) == len(bodies), (topic, queue_id)
        assert read_queue(store, topic, queue_id, tail) == bodies, (topic, queue_id)
        assert_end_at(store, topic, queue_id, len(bodies))


def assert_log_ends_at(data_dir, tail):
    """On disk: no segment starts at or after ``tail``, and the bytes from it on are zero."""
    for path in sorted(StorePaths(data_dir).commitlog.iterdir()):
        start = int(path.name)
        assert start < tail, f"segment {path.name} is at or past the tail {tail}"
        if tail < start + SEGMENT:
            rest = path.read_bytes()[tail - start:]
            assert rest.count(0) == len(rest), f"bytes after the tail {tail} are not zero"


def snapshot(store, queues):
    """What the index serves: the unit of every offset and a one-offset read from each."""
    out = {}
    for topic, queue_id in queues:
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        units = [store.lookup(topic, queue_id, o) for o in range(low, high + 1)]
        reads = []
        for start in range(low, high):
            result = store.get_messages(topic, queue_id, start, start + 1)
            reads.append((result.status, result.next_begin_offset,
                          [(b.base_offset, b.count, b.physical_offset, b.tags_code, bytes(b.data))
                           for b in result.batches]))
        out[(topic, queue_id)] = (low, high, units, reads)
    return out


def copy_dir(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=shutil.copyfile)


def load_files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def restore(files: dict, work: Path) -> None:
    """Make ``work`` hold exactly ``files`` (relative path -> bytes), rewriting what differs."""
    seen = set()
    if work.is_dir():
        for dirpath, _dirs, names in os.walk(work):
            for name in names:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, work)
                want = files.get(rel)
                if want is None:
                    os.unlink(path)
                    continue
                seen.add(rel)
                with open(path, "rb") as f:
                    same = f.read() == want
                if not same:
                    with open(path, "wb") as f:
                        f.write(want)
    for rel, data in files.items():
        if rel not in seen:
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


@contextlib.contextmanager
def closing_quietly_on_failure(store):
    """Close ``store`` after the block; when the block failed, a failing close is ignored."""
    try:
        yield store
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    store.close()
