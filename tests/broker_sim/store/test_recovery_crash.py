"""Recovery after a real SIGKILL of a writer process and after a simulated power loss: every
acknowledged put survives. Stops and helpers: recovery_helpers.py."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_sim.store import (
    DataDirInUseError,
    FlushMode,
    mapped_file,
)
from recovery_helpers import (
    BATCH_UNITS,
    CONFIG,
    QUEUES,
    SEGMENT,
    SIMPLE_UNITS,
    TOPICS,
    WAIT_S,
    Model,
    assert_end_at,
    assert_log_ends_at,
    body_of,
    check_model,
    closing_quietly_on_failure,
    copy_dir,
    create_topics,
    early_payload,
    fill,
    fill_past,
    inner_args,
    log_end,
    open_at,
    put_early,
    put_inner,
    put_single,
    read_queue,
    single_args,
)
from support.paths import REPO_ROOT

# --- 3: SIGKILL of a writer process -------------------------------------------------------------

WRITER_MAIN = '''
def main():
    data_dir, mode = sys.argv[1], sys.argv[2]
    config = StoreConfig(segment_bytes=SEGMENT, simple_cq_units_per_file=SIMPLE_UNITS,
                         batch_cq_units_per_file=BATCH_UNITS, flush_mode=mode, flush_interval_ms=5,
                         index_flush_interval_ms=20)
    store = MessageStore(data_dir, config)
    for name, (queues, queue_type) in TOPICS.items():
        store.create_topic(name, queues, queue_type)
    # After a crash the store recovered the queues' ends; offsets go on from there.
    next_offset = {key: store.max_offset(*key) for key in QUEUES}
    plan = [("S", "single"), ("B", "inner"), ("S", "early"), ("B", "single"), ("B", "inner"),
            ("S", "single"), ("B", "early")]
    out = sys.stdout
    i = 0
    while True:
        topic, kind = plan[i % len(plan)]
        queue_id = i % 2
        count = 1 if kind == "single" else 2 + i % 3
        offset = next_offset[(topic, queue_id)]
        if kind == "single":
            body, props = single_args(topic, queue_id, offset)
            result = store.put_message(topic, queue_id, body, properties=props)
        elif kind == "early":
            result = store.put_early_batch(topic, queue_id, early_payload(topic, queue_id, offset, count))
        else:
            payload, props = inner_args(topic, queue_id, offset, count)
            result = store.put_inner_batch(topic, queue_id, BatchPut(payload, count, properties=props))
        if not result.ok or (result.queue_offset, result.count) != (offset, count):
            sys.stderr.write(f"unexpected {result} for {topic}/{queue_id} at {offset}\\n")
            sys.exit(3)
        next_offset[(topic, queue_id)] = offset + count
        out.write(f"{topic} {queue_id} {offset} {count}\\n")
        out.flush()  # the line is the acknowledgement: the put has returned
        i += 1


main()
'''
MAX_WRITER_COUNT = 4  # the most messages one put of the writer stores


def writer_source() -> str:
    parts = [
        "import sys",
        "from broker_sim.store import BatchPut, MessageStore, QueueType, StoreConfig, encode_message_batch",
        "from rmq_wire import record as fmt",
        f"SEGMENT, SIMPLE_UNITS, BATCH_UNITS = {SEGMENT}, {SIMPLE_UNITS}, {BATCH_UNITS}",
        "TOPICS = {" + ", ".join(f"{n!r}: ({c}, QueueType({t.value!r}))" for n, (c, t) in TOPICS.items()) + "}",
        f"QUEUES = {QUEUES!r}",
    ]
    parts += [inspect.getsource(f) for f in (body_of, single_args, early_payload, inner_args)]
    return "\n".join(parts) + WRITER_MAIN


def run_writer_and_kill(script, data, mode, acks_wanted, stderr_path):
    """Start the writer, SIGKILL it once it has acknowledged ``acks_wanted`` puts (at most 20 s),
    and return every acknowledgement it printed: (topic, queue_id, offset, count)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script), str(data), mode.value], stdout=subprocess.PIPE,
                                stderr=err, env=env, cwd=REPO_ROOT)
    out = b""
    try:
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + 20
        lock_checked = False
        while out.count(b"\n") < acks_wanted:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            out += chunk
            if not lock_checked:
                # The writer holds the data directory: another store may not open it.
                with pytest.raises(DataDirInUseError, match=re.escape(str(data))):
                    open_at(data)
                lock_checked = True
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        while chunk := os.read(fd, 1 << 16):  # acknowledgements still in the pipe count too
            out += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    got = out.count(b"\n")
    assert got >= acks_wanted, f"the writer acknowledged {got} puts in 20 s: {stderr_path.read_text()[-3000:]}"
    assert proc.returncode == -signal.SIGKILL, stderr_path.read_text()[-3000:]
    acks = []
    for line in out[:out.rfind(b"\n")].split(b"\n"):  # a torn last line is not an acknowledgement
        topic, queue_id, offset, count = line.decode().split()
        acks.append((topic, int(queue_id), int(offset), int(count)))
    return acks


@pytest.mark.parametrize("mode", [FlushMode.ASYNC, FlushMode.SYNC])
def test_sigkill_of_writer_process(tmp_path, mode):
    """A process appends singles, early batches and inner batches to both queue types and is
    killed with SIGKILL, twice (the second run recovers the first crash itself). Every
    acknowledged put is served with its body; at most the one put in flight is served beyond;
    nothing past the recovered tail is; appends go on at the right offsets."""
    script = tmp_path / "writer.py"
    script.write_text(writer_source())
    data = tmp_path / "data"
    config = dataclasses.replace(CONFIG, flush_mode=mode)
    floor = {key: 0 for key in QUEUES}  # each queue's end as recovered after the last crash
    for round_no, acks_wanted in enumerate((300, 450)):
        acks = run_writer_and_kill(script, data, mode, acks_wanted, tmp_path / f"writer{round_no}.err")
        acked_end = dict(floor)
        for topic, queue_id, offset, count in acks:
            assert offset == acked_end[(topic, queue_id)], f"acknowledged offsets of {topic}/{queue_id} not contiguous"
            acked_end[(topic, queue_id)] = offset + count
        check = tmp_path / f"check{round_no}"
        copy_dir(data, check)  # the writer's next run recovers the original
        store = open_at(check, config)
        with closing_quietly_on_failure(store):
            report = store.recovery
            assert report.clean is False
            beyond = {}
            model = Model()
            for key in QUEUES:
                high = store.max_offset(*key)
                assert high >= acked_end[key], f"{key}: acknowledged up to {acked_end[key]}, recovered {high}"
                if high > acked_end[key]:
                    beyond[key] = high - acked_end[key]
                model.bodies[key] = [body_of(*key, o) for o in range(high)]
                assert read_queue(store, *key, tail=report.tail) == model.bodies[key], key
                assert_end_at(store, *key, high)
                floor[key] = high
            assert len(beyond) <= 1 and all(n <= MAX_WRITER_COUNT for n in beyond.values()), (
                f"more than the put in flight is served beyond the acknowledgements: {beyond}")
            assert_log_ends_at(check, report.tail)
            # New appends take the next offsets and are served.
            put_single(store, model, "S", 0)
            put_early(store, model, "S", 1, 2)
            put_inner(store, model, "B", 0, 3)
            put_single(store, model, "B", 1)
            assert store.wait_dispatched(WAIT_S)
            check_model(store, model)




# --- power loss: only what was synced survives ---------------------------------------------------

class PowerLoss:
    """Records each mapped file's bytes at every fdatasync: what a power loss leaves of it (at
    worst). Files never synced come back as zeros. Other files (checkpoint, topics.json) are
    written synchronously and are taken as they are."""

    def __init__(self, monkeypatch):
        self.synced: dict = {}
        flush = mapped_file.MappedFile.flush

        def recording_flush(mapped):
            flush(mapped)
            self.synced[str(mapped.path)] = bytes(mapped.map)

        monkeypatch.setattr(mapped_file.MappedFile, "flush", recording_flush)

    def image(self, data: Path, dst: Path) -> None:
        copy_dir(data, dst)
        for path in dst.rglob("*"):
            if path.is_file() and path.name.isdigit():
                original = str(data / path.relative_to(dst))
                path.write_bytes(self.synced.get(original, bytes(path.stat().st_size)))


@pytest.mark.parametrize("checkpoints", ["every_8_puts", "once"])
def test_power_loss_keeps_acknowledged_sync_puts(tmp_path, monkeypatch, checkpoints):
    """Sync flush mode: every acknowledged put survives a power loss after a checkpoint,
    however many index files the checkpoint's flush has to cover ("once": 6 files a queue;
    ConsumeQueue.flush() used to sync only the last two, and offsets in the others came back
    as empty records)."""
    power = PowerLoss(monkeypatch)
    config = dataclasses.replace(CONFIG, flush_mode=FlushMode.SYNC)
    data = tmp_path / "data"
    store = open_at(data, config)
    with closing_quietly_on_failure(store):
        create_topics(store)
        model = Model()
        for i in range(48):
            put_single(store, model, "S", 0)
            put_inner(store, model, "B", 0, 2)
            if checkpoints == "every_8_puts" and i % 8 == 7:
                store.flush()
        assert store.wait_dispatched(WAIT_S)
        store.flush()
        power.image(data, tmp_path / "after")
    with open_at(tmp_path / "after", config) as store:
        assert store.recovery.clean is False
        check_model(store, model, tail=store.recovery.tail)


def test_power_loss_in_async_mode_keeps_the_flushed_prefix(tmp_path, monkeypatch):
    """Async flush mode: what was appended after the last flush is lost by a power loss (at
    worst all of it, new segments and index files included); recovery serves exactly what was
    flushed, and appends go on from there."""
    power = PowerLoss(monkeypatch)
    data = tmp_path / "data"
    store = open_at(data)
    with closing_quietly_on_failure(store):
        create_topics(store)
        model = Model()
        fill(store, model, 0, 70)
        assert store.wait_dispatched(WAIT_S)
        store.flush()
        flushed_end = log_end(store)
        flushed = model.copy()
        fill_past(store, model, 70, flushed_end + SEGMENT)  # new segments and index files, never synced
        assert store.wait_dispatched(WAIT_S)
        power.image(data, tmp_path / "after")
    with open_at(tmp_path / "after") as store:
        report = store.recovery
        assert (report.clean, report.tail) == (False, flushed_end), report
        check_model(store, flushed, tail=flushed_end)
        assert_log_ends_at(tmp_path / "after", flushed_end)
        fill(store, flushed, 70, 30)
        assert store.wait_dispatched(WAIT_S)
        check_model(store, flushed)
