"""Damaged records (issue 15): recovery keeps them in place and reports them, reads refuse them.

Real files in tmp_path, a real MessageStore with 64 KiB segments, bytes flipped in real
segment and index files while the store is closed, and a real SIGKILL of a writer process.
Bodies are derived from (queue, offset), so every read is checked exactly.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker_sim.store import (
    BatchPut,
    GetStatus,
    MessageStore,
    QueueType,
    StoreConfig,
    decode_record,
    encode_message_batch,
)
from broker_sim.store.checkpoint import Checkpoint
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt
from support.paths import REPO_ROOT

SEGMENT = 64 * 1024
CONFIG = StoreConfig(segment_bytes=SEGMENT, batch_cq_units_per_file=64, flush_interval_ms=60_000,
                     index_flush_interval_ms=60_000)
BATCH = 50
WAIT_S = 10.0


def body(queue_id: int, offset: int) -> bytes:
    return b"q%d-o%d-" % (queue_id, offset) + bytes([offset % 251]) * 80


def put_batch(store: MessageStore, queue_id: int):
    base = store.commitlog.queue_offsets.get(("B", queue_id), 0)
    payload = encode_message_batch([(body(queue_id, base + i), {}, 0) for i in range(BATCH)])
    result = store.put_inner_batch("B", queue_id, BatchPut(payload, BATCH))
    assert result.ok and result.queue_offset == base, result
    return result


def fill(store: MessageStore, messages: int) -> None:
    """``messages`` in queue 0, half as many in queue 1, interleaved."""
    for i in range(messages // BATCH):
        put_batch(store, 0)
        if i % 2:
            put_batch(store, 1)
    assert store.wait_dispatched(WAIT_S)


def new_store(data_dir: Path, messages: int = 5000) -> MessageStore:
    store = MessageStore(data_dir, CONFIG)
    store.create_topic("B", 2, "BatchCQ")
    fill(store, messages)
    return store


def records_on_disk(data_dir: Path) -> list[tuple[int, int, int, int]]:
    """(commitlog offset, size, queue id, base offset) of every valid record, in log order."""
    out = []
    for path in sorted(StorePaths(data_dir).commitlog.iterdir()):
        data, start, pos = path.read_bytes(), int(path.name), 0
        while True:
            check, size, _reason = fmt.check_record(data, pos, len(data))
            if check is not fmt.Check.OK:
                break
            header = fmt.HEADER.unpack_from(data, pos)
            out.append((start + pos, size, header[3], header[5]))
            pos += size
    return out


def record_in_segment(data_dir: Path, segment_index: int, queue_id: int = 0) -> tuple[int, int, int, int]:
    """A record of ``queue_id`` in the middle of the segment at ``segment_index`` (-2: second to last)."""
    segments = sorted(int(p.name) for p in StorePaths(data_dir).commitlog.iterdir())
    start = segments[segment_index]
    inside = [r for r in records_on_disk(data_dir) if start <= r[0] < start + SEGMENT and r[2] == queue_id]
    return inside[len(inside) // 2]


def flip(data_dir: Path, position: int, offsets: list[int]) -> None:
    """Flip the bytes at ``offsets`` of the record at commitlog ``position``."""
    segment = StorePaths(data_dir).commitlog / f"{position - position % SEGMENT:020d}"
    with open(segment, "r+b") as f:
        for at in offsets:
            f.seek(position % SEGMENT + at)
            byte = f.read(1)
            f.seek(position % SEGMENT + at)
            f.write(bytes([byte[0] ^ 0x5A]))


def read_all(store: MessageStore, queue_id: int) -> tuple[list[bytes], list[tuple[int, int, str]]]:
    """Every body the queue serves, and the refused ranges (first, end, detail)."""
    bodies, refused, offset = [], [], store.min_offset("B", queue_id)
    end = store.max_offset("B", queue_id)
    for _ in range(end + 1):
        if offset >= end:
            break
        result = store.get_messages("B", queue_id, offset)
        if result.status is GetStatus.RECORD_CORRUPTED:
            refused.append((offset, result.next_begin_offset, result.detail))
        else:
            assert result.status is GetStatus.FOUND, result
            for batch in result.batches:
                record = decode_record(batch.data)
                bodies += [bytes(b) for _flag, b, _props in fmt.iter_message_batch(record.body, record.inner_count)]
        offset = result.next_begin_offset
    return bodies, refused


def expected_bodies(queue_id: int, end: int, skipped=()) -> list[bytes]:
    gone = {o for first, last in skipped for o in range(first, last)}
    return [body(queue_id, o) for o in range(end) if o not in gone]


# Where three bytes are flipped in a record: its body (the header stays trustworthy), its header
# (queue offset and store time), and its TOTALSIZE (the next record must be found by scanning).
FLIPS = {"body": [200, 400, 600], "header": [22, 27, 60], "length": [1, 2, 3]}


@pytest.mark.parametrize("where", FLIPS)
def test_three_flipped_bytes_after_a_clean_stop_cut_nothing(tmp_path, where):
    """The probe: 5,000 messages, three bytes flipped in a record of the second-to-last
    segment after a clean stop. Nothing is cut, the record is reported and refused with its
    offsets, every other message reads, and the next send continues at 5,000."""
    data = tmp_path / "data"
    store = new_store(data)
    log_end = store.commitlog.max_offset
    store.close()
    position, size, queue_id, base = record_in_segment(data, -2)
    flip(data, position, FLIPS[where])

    store = MessageStore(data, CONFIG)
    try:
        report = store.recovery
        assert report.clean and report.tail == log_end and report.dropped_units == 0, report
        [damaged] = report.damaged
        assert (damaged.position, damaged.size) == (position, size), report
        [reported] = store.corrupted_records()
        assert (reported.commitlog_offset, reported.found_by) == (position, "recovery")
        if where == "body":  # the header is intact: it tells what the record held
            assert (reported.topic, reported.queue_id, reported.first_offset, reported.end_offset) == (
                "B", queue_id, base, base + BATCH)
        assert store.max_offset("B", 0) == 5000
        bodies, refused = read_all(store, queue_id)
        assert [(first, end) for first, end, _ in refused] == [(base, base + BATCH)]
        assert f"topic 'B' queue {queue_id} offsets {base} to {base + BATCH - 1}" in refused[0][2]
        assert bodies == expected_bodies(queue_id, 5000, [(base, base + BATCH)])
        assert read_all(store, 1)[0] == expected_bodies(1, 2500)
        assert put_batch(store, 0).queue_offset == 5000
    finally:
        store.close()
    with MessageStore(data, CONFIG) as again:  # the report survives a restart
        assert [r.commitlog_offset for r in again.corrupted_records()] == [position]
        assert again.max_offset("B", 0) == 5000 + BATCH


WRITER = textwrap.dedent('''
    import sys, time
    sys.path[:0] = [{here!r}, {tests!r}]  # this module, and support (tests/)
    from test_damaged_records import CONFIG, fill
    from broker_sim.store import MessageStore
    store = MessageStore(sys.argv[1], CONFIG)
    store.create_topic("B", 2, "BatchCQ")
    fill(store, 3000)
    store.flush()  # the checkpoint: everything so far is on disk
    fill(store, 2000)
    print("ready", flush=True)
    time.sleep(60)
''')


def test_after_a_sigkill_only_the_torn_tail_is_cut(tmp_path):
    """A writer process is SIGKILLed after a checkpoint and more writes. A record before the
    flushed position and one after it (followed by valid records) are damaged, and the last
    record is torn: only the torn record is cut; the damaged ones are kept and refused."""
    data = tmp_path / "data"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(here=str(Path(__file__).parent), tests=str(REPO_ROOT / "tests")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                                      if p)}
    writer = subprocess.Popen([sys.executable, str(script), str(data)], stdout=subprocess.PIPE, env=env)
    try:
        assert writer.stdout.readline() == b"ready\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
        writer.stdout.close()
    flushed = Checkpoint.load(StorePaths(data).checkpoint).commitlog_flushed_offset
    records = records_on_disk(data)
    before = [r for r in records if r[0] + r[1] <= flushed and r[2] == 0][-5]
    after = [r for r in records if r[0] > flushed and r[2] == 0][3]
    torn = records[-1]
    assert torn[0] > after[0] > flushed > before[0]
    flip(data, before[0], FLIPS["body"])
    flip(data, after[0], FLIPS["header"])
    os.truncate(StorePaths(data).commitlog / f"{torn[0] - torn[0] % SEGMENT:020d}", torn[0] % SEGMENT + torn[1] // 2)

    with MessageStore(data, CONFIG) as store:
        report = store.recovery
        assert not report.clean and report.tail == torn[0], report
        assert [d.position for d in report.damaged] == [before[0], after[0]]
        assert sorted(r.commitlog_offset for r in store.corrupted_records()) == [before[0], after[0]]
        assert (torn[2], torn[3]) == (1, 2450)  # the last record: queue 1's last batch, never flushed
        assert store.max_offset("B", 1) == 2450
        assert read_all(store, 1) == (expected_bodies(1, 2450), [])
        assert store.max_offset("B", 0) == 5000
        gone = [(before[3], before[3] + BATCH), (after[3], after[3] + BATCH)]
        bodies, refused = read_all(store, 0)
        assert [(first, end) for first, end, _ in refused] == gone
        assert bodies == expected_bodies(0, 5000, gone)
        assert put_batch(store, 0).queue_offset == 5000


def test_body_byte_flipped_in_an_old_segment_fails_the_read(tmp_path):
    """A body byte flipped where recovery does not scan (the first segment): the read refuses
    the record with its offsets, reports it, and reads everything else."""
    data = tmp_path / "data"
    new_store(data).close()
    position, _size, queue_id, base = record_in_segment(data, 0)
    flip(data, position, [150])
    with MessageStore(data, CONFIG) as store:
        assert store.recovery.damaged == () and store.corrupted_records() == []
        for _ in range(2):  # refused every time, not only the first
            bodies, refused = read_all(store, queue_id)
            assert [(first, end) for first, end, _ in refused] == [(base, base + BATCH)]
            assert "body CRC mismatch" in refused[0][2]
        assert bodies == expected_bodies(queue_id, 5000, [(base, base + BATCH)])
        [reported] = store.corrupted_records()
        assert (reported.commitlog_offset, reported.found_by, reported.queue_id, reported.first_offset) == (
            position, "read", queue_id, base)


@pytest.mark.parametrize("field_at", [12, 20, 28, 36])  # QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG
def test_header_byte_flipped_in_an_old_segment_fails_the_read(tmp_path, field_at):
    """A header byte flipped in an old record never serves duplicate offsets or another queue's
    label: the record is refused."""
    data = tmp_path / "data"
    new_store(data).close()
    position, _size, queue_id, base = record_in_segment(data, 0)
    flip(data, position, [field_at + 3])
    with MessageStore(data, CONFIG) as store:
        bodies, refused = read_all(store, queue_id)
        assert [(first, end) for first, end, _ in refused] == [(base, base + BATCH)]
        assert bodies == expected_bodies(queue_id, 5000, [(base, base + BATCH)])


def test_index_unit_pointed_at_another_queues_record_is_refused(tmp_path):
    """A BatchCQ unit of queue 0 rewritten to point at a record of queue 1 (same size): the
    read refuses it, naming both, instead of serving queue 1's messages as queue 0's."""
    data = tmp_path / "data"
    store = new_store(data)
    victim = store.lookup("B", 0, 1000)
    other = store.lookup("B", 1, 1000)
    store.close()
    index = StorePaths(data).queue_index(QueueType.BATCH_CQ, "B", 0)
    unit_at = (victim.base_offset // BATCH) * 46
    path = index / f"{unit_at - unit_at % (64 * 46):020d}"
    with open(path, "r+b") as f:
        f.seek(unit_at % (64 * 46))
        f.write(other.physical_offset.to_bytes(8, "big"))
    with MessageStore(data, CONFIG) as store:
        bodies, refused = read_all(store, 0)
        assert [(first, end) for first, end, _ in refused] == [(1000, 1000 + BATCH)]
        assert "points at a record of topic 'B' queue 1" in refused[0][2]
        assert bodies == expected_bodies(0, 5000, [(1000, 1000 + BATCH)])


# The concurrent dispatcher, with small chunks: re-dispatch cuts them at the damaged records.
CONCURRENT = dataclasses.replace(CONFIG, dispatch_mode="concurrent", dispatch_pool="thread",
                                 dispatch_chunk_bytes=16 * 1024)


@pytest.mark.parametrize("config", [CONFIG, CONCURRENT], ids=["serial", "concurrent"])
@pytest.mark.parametrize("where", ["body", "header"])
def test_damaged_record_whose_unit_was_lost_keeps_its_offsets(tmp_path, where, config):
    """After a crash, the index units past the index checkpoint are lost and a record there is
    damaged (followed by valid records of its queue): re-dispatch, serial or concurrent,
    indexes its offsets to it (from its header when intact, else from the gap the queue's
    next record shows), so the queue's offsets stay dense and are never given again."""
    data = tmp_path / "data"
    store = new_store(data, 2000)
    store.flush()
    checkpoint = StorePaths(data).checkpoint.read_bytes()
    queue_table = StorePaths(data).queue_table.read_bytes()
    fill(store, 2000)
    store.close()
    StorePaths(data).checkpoint.write_bytes(checkpoint)  # as after a crash: the index checkpoint is older
    StorePaths(data).queue_table.write_bytes(queue_table)
    StorePaths(data).abort.touch()
    cut = 2000 // BATCH * 46  # queue 0's units past the checkpoint were never written back
    for path in StorePaths(data).queue_index(QueueType.BATCH_CQ, "B", 0).iterdir():
        if int(path.name) >= cut:
            path.unlink()
        else:
            os.truncate(path, cut - int(path.name))
    position, _size, _queue_id, base = [r for r in records_on_disk(data) if r[2] == 0 and r[3] == 3000][0]
    flip(data, position, FLIPS[where])
    with MessageStore(data, config) as store:
        assert [d.position for d in store.recovery.damaged] == [position]
        assert store.max_offset("B", 0) == 4000
        bodies, refused = read_all(store, 0)
        assert [(first, end) for first, end, _ in refused] == [(3000, 3000 + BATCH)]
        assert bodies == expected_bodies(0, 4000, [(3000, 3000 + BATCH)])
        assert put_batch(store, 0).queue_offset == 4000
