"""Recovery from a torn or corrupted last record of the CommitLog, and from a segment that ends in a
short BLANK (rocketmq-model.md, "CommitLog", crash recovery). Stops and helpers: recovery_helpers.py."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_sim.store import (
    GetStatus,
    decode_record,
    mapped_file,
)
from broker_sim.store.paths import StorePaths
from recovery_helpers import (
    BATCH_UNITS,
    CRC_PREFIX_BYTES,
    CRC_PROPERTY_BYTES,
    QUEUES,
    SEGMENT,
    SIMPLE_UNITS,
    TOPICS,
    UNIT_BYTES,
    WAIT_S,
    Model,
    assert_end_at,
    assert_log_ends_at,
    body_of,
    check_model,
    closing_quietly_on_failure,
    copy_dir,
    create_topics,
    fill,
    fill_past,
    load_files,
    log_end,
    messages_of,
    open_at,
    put_inner,
    put_single,
    restore,
    served,
    single_args,
)
from rmq_wire import record as fmt
from support.budget import EXHAUSTIVE

# --- 1 and 2: a torn or corrupted last record ---------------------------------------------------

@dataclass
class TailImage:
    """A data directory stopped unclean whose last record is the one to damage."""

    files: dict  # the directory's files
    expected: dict  # (topic, queue) -> served records before the last record
    model: Model  # the bodies before the last record
    kind: str  # "single" (SimpleCQ topic S) or "inner" (BatchCQ topic B)
    stop: str
    topic: str
    queue_id: int
    base: int  # the last record's first queue offset
    count: int
    physical: int
    record: bytes

    @property
    def size(self) -> int:
        return len(self.record)

    def segment_in(self, data_dir: Path) -> Path:
        """The last record's segment file in a copy of the image."""
        return StorePaths(data_dir).commitlog / mapped_file.file_name(self.physical - self.physical % SEGMENT)

    @property
    def in_segment(self) -> int:
        return self.physical % SEGMENT


def put_last(store, model, kind):
    """The record to damage: ~256 bytes, a single message on S/1 or an inner batch of 3 on B/1."""
    if kind == "single":
        return put_single(store, model, "S", 1, size=100)
    return put_inner(store, model, "B", 1, 3, size=4)


def fill_to_segment_end(store, model):
    """Write fillers until a 256-byte record no longer fits the current segment."""
    while True:
        left = SEGMENT - log_end(store) % SEGMENT
        if left < 256 + fmt.END_FILE_MIN_BLANK_BYTES:
            return
        total = min(left - 128, 4096)
        _body, props = single_args("S", 0, model.next("S", 0), size=0)
        result = put_single(store, model, "S", 0, size=total - fmt.record_size(0, 1, len(fmt.encode_properties(props))))
        assert log_end(store) - result.physical_offsets[0] == total


_TAIL_IMAGES: dict = {}


def tail_image(tmp_path_factory, kind, stop, layout="mid_segment") -> TailImage:
    key = (kind, stop, layout)
    if key not in _TAIL_IMAGES:
        _TAIL_IMAGES[key] = _build_tail_image(tmp_path_factory.mktemp(f"tail-{kind}-{stop}-{layout}"),
                                              kind, stop, layout)
    return _TAIL_IMAGES[key]


def _build_tail_image(root, kind, stop, layout) -> TailImage:
    live = root / "live"
    store = open_at(live)
    model = Model()
    create_topics(store)
    fill(store, model, 0, 70)
    if stop == "open_copy":
        assert store.wait_dispatched(WAIT_S)
        store.flush()  # the checkpoint is here: recovery re-dispatches what follows
    fill_past(store, model, 70, SEGMENT + 8192)
    topic, queue_id = ("S", 1) if kind == "single" else ("B", 1)
    per_file = SIMPLE_UNITS if kind == "single" else BATCH_UNITS
    while model.units[(topic, queue_id)] % per_file:  # the last record's unit starts an index file
        put_single(store, model, topic, queue_id)
    if layout == "segment_start":
        fill_to_segment_end(store, model)
    before = model.copy()
    result = put_last(store, model, kind)
    assert store.wait_dispatched(WAIT_S)
    check_model(store, model)  # everything decodes as written, once; the sweeps compare bytes
    expected = {key: served(store, *key) for key in QUEUES}
    last = expected[(topic, queue_id)].pop()
    base, count, physical, record = last
    assert (base, physical) == (result.queue_offset, result.physical_offsets[0])
    assert physical >= SEGMENT, "the image must cross a segment"
    assert 200 <= len(record) <= 300
    assert (physical % SEGMENT == 0) == (layout == "segment_start")
    unit_file = StorePaths(live).queue_index(TOPICS[topic][1], topic, queue_id) / mapped_file.file_name(
        before.units[(topic, queue_id)] * UNIT_BYTES[TOPICS[topic][1]])
    assert max(unit_file.parent.iterdir()) == unit_file
    image_dir = root / "image"
    if stop == "open_copy":
        copy_dir(live, image_dir)
        store.close()
    else:
        store.close()
        StorePaths(live).abort.touch()
        image_dir = live
    return TailImage(load_files(image_dir), expected, before, kind, stop, topic, queue_id, base, count, physical,
                     record)


def check_tail_dropped(image: TailImage, work: Path, expect_reason=None):
    """Reopen ``work`` (a damaged copy of the image): the last record is gone, everything
    before it is served unchanged, and a new append takes its offsets and its place."""
    store = open_at(work)
    with closing_quietly_on_failure(store):
        report = store.recovery
        assert report.clean is False
        assert report.tail == image.physical, report
        if expect_reason is not None:
            assert report.stop_reason.startswith(expect_reason), report
        assert report.dropped_units == 1, report  # the damaged record's index unit
        if image.stop == "open_copy":
            assert report.redispatched_records > 0, report  # from the mid-way checkpoint
        for key, records in image.expected.items():
            assert served(store, *key) == records, key
            assert_end_at(store, *key, image.base if key == (image.topic, image.queue_id) else
                          sum(r[1] for r in records))
        assert_log_ends_at(work, image.physical)
        model = image.model.copy()
        result = put_last(store, model, image.kind)
        assert (result.queue_offset, result.physical_offsets) == (image.base, (image.physical,))
        assert store.wait_dispatched(WAIT_S)
        new = served(store, image.topic, image.queue_id)[-1]
        assert new[:3] == (image.base, image.count, image.physical)
        assert messages_of(decode_record(new[3])) == model.bodies[(image.topic, image.queue_id)][image.base:]
        assert_end_at(store, image.topic, image.queue_id, image.base + image.count)


def check_damaged_kept(image: TailImage, work: Path, expect_reason=None):
    """Reopen ``work`` (a damaged copy of an image whose checkpoint says the last record was
    flushed): nothing is cut, the damaged record is kept and reported, its offsets are
    refused with a sentence naming them, the records before it are served unchanged, and a
    new append continues after it (its offsets are never given again)."""
    store = open_at(work)
    with closing_quietly_on_failure(store):
        report = store.recovery
        end = image.physical + image.size
        assert report.clean is False
        assert (report.tail, report.dropped_units) == (end, 0), report
        [damaged] = report.damaged
        assert (damaged.position, damaged.end) == (image.physical, end), report
        if expect_reason is not None:
            assert damaged.reason.startswith(expect_reason), report
        [reported] = store.corrupted_records()
        assert (reported.commitlog_offset, reported.found_by) == (image.physical, "recovery")
        key = (image.topic, image.queue_id)
        for queue, records in image.expected.items():
            assert served(store, *queue, image.base if queue == key else None) == records, queue
        result = store.get_messages(image.topic, image.queue_id, image.base)
        assert result.status is GetStatus.RECORD_CORRUPTED, result
        assert result.next_begin_offset == image.base + image.count
        last = image.base + image.count - 1
        assert f"topic {image.topic!r} queue {image.queue_id} offsets {image.base} to {last}" in result.detail
        assert store.max_offset(*key) == image.base + image.count
        model = image.model.copy()
        model.bodies[key] += [b"?"] * image.count  # the damaged record's offsets stay taken
        result = put_last(store, model, image.kind)
        assert (result.queue_offset, result.physical_offsets) == (image.base + image.count, (end,))
        assert store.wait_dispatched(WAIT_S)
        got = store.get_messages(image.topic, image.queue_id, image.base + image.count)
        assert got.status is GetStatus.FOUND
        assert messages_of(decode_record(got.batches[0].data)) == model.bodies[key][image.base + image.count:]


def sweep(positions, damage, check):
    """Damage and check at each position; report the positions that fail (the first five)."""
    failures = []
    for position in positions:
        try:
            damage(position)
            check(position)
        except Exception as err:  # noqa: BLE001 - every failing position is reported
            failures.append(f"at {position}: {type(err).__name__}: {err}")
            if len(failures) >= 5:
                break
    assert not failures, "failing positions:\n" + "\n".join(failures)


def spread(size):
    """Positions covering every field of a record of ``size`` bytes, and every 7th byte."""
    bounds = {0, 3, 4, 7, 8, 11, 12, 20, 28, 36, 40, 48, 56, 64, 72, 76, 84, 87, 88, 89,
              size - CRC_PROPERTY_BYTES, size - CRC_PROPERTY_BYTES + CRC_PREFIX_BYTES, size - 2, size - 1}
    return sorted(bounds | set(range(0, size, 7)))


# How each stop treats a damaged last record: "closed" images have a checkpoint saying the record
# was flushed, so it is kept (its offsets were acknowledged); in "open_copy" images it lies past
# the checkpoint's flushed position with nothing valid after it: a torn tail, cut.
CHECK_LAST_RECORD = {"closed": check_damaged_kept, "open_copy": check_tail_dropped}


@pytest.mark.parametrize("stop", ["closed", "open_copy"])
@pytest.mark.parametrize("kind", ["single", "inner"])
def test_torn_last_record(tmp_path_factory, tmp_path, kind, stop):
    """The last record (a single message on SimpleCQ, or an inner batch on BatchCQ) cut after
    k bytes: every k when the store was closed (a spread in the quick tier), a spread of k when the
    copy was taken open.
    Past the flushed position the record is not served, nothing of it is indexed, and the log
    continues from its start; before it, the record is kept as damaged and refused."""
    image = tail_image(tmp_path_factory, kind, stop)
    work = tmp_path / "work"

    def damage(k):
        restore(image.files, work)
        os.truncate(image.segment_in(work), image.in_segment + k)

    positions = range(image.size) if stop == "closed" and EXHAUSTIVE else spread(image.size)
    sweep(positions, damage, lambda k: CHECK_LAST_RECORD[stop](image, work))


@pytest.mark.parametrize("stop", ["closed", "open_copy"])
@pytest.mark.parametrize("kind", ["single", "inner"])
def test_torn_last_record_at_segment_start(tmp_path_factory, tmp_path, kind, stop):
    """The torn record is the first of a segment, after a BLANK: past the flushed position
    recovery deletes that segment and the next append creates it again; before it, the
    record is kept as damaged."""
    image = tail_image(tmp_path_factory, kind, stop, "segment_start")
    work = tmp_path / "work"

    def damage(k):
        restore(image.files, work)
        os.truncate(image.segment_in(work), k)

    sweep(spread(image.size)[::3] + [image.size - 1], damage, lambda k: CHECK_LAST_RECORD[stop](image, work))


def flip_reason(image: TailImage, i: int) -> str | None:
    """Why recovery must reject the record with byte ``i`` flipped, where that is determined."""
    body_len = int.from_bytes(image.record[fmt.BODYLEN_AT:fmt.BODYLEN_AT + 4], "big")
    topic_len_at = fmt.HEADER.size + body_len
    props_len_at = topic_len_at + 1 + image.record[topic_len_at]
    crc_at = image.size - CRC_PROPERTY_BYTES
    if 4 <= i < 8:
        return "unknown magic"
    if fmt.HEADER.size <= i < topic_len_at:
        return "body CRC mismatch"
    if 8 <= i < fmt.BODYLEN_AT or topic_len_at < i < props_len_at or props_len_at + 2 <= i < crc_at:
        return "record CRC mismatch"  # header fields (BODYCRC too), topic, properties: __HCRC32# covers them
    if props_len_at <= i < props_len_at + 2:
        return "recomputed length differs from TOTALSIZE"
    if crc_at <= i < crc_at + CRC_PREFIX_BYTES or i == image.size - 1:
        return "record CRC property missing"
    if crc_at + CRC_PREFIX_BYTES <= i < image.size - 1:
        return "record CRC mismatch"  # a digit of __HCRC32#
    return None  # TOTALSIZE, BODYLEN, TOPICLEN: which check fails depends on the value


@pytest.mark.parametrize("stop", ["closed", "open_copy"])
@pytest.mark.parametrize("mask", [0xFF, 0x01])
@pytest.mark.parametrize("kind", ["single", "inner"])
def test_flipped_byte_in_last_record(tmp_path_factory, tmp_path, kind, mask, stop):
    """A byte of the last record (header fields, body, topic, properties, __HCRC32#) flipped,
    at every position (mask 0xFF; a spread in the quick tier) or a spread over every field
    (mask 0x01): the check that must catch it does, and the ones before are served. Flushed
    ("closed"), the record is kept as damaged and refused; past the flushed position
    ("open_copy"), it is dropped."""
    image = tail_image(tmp_path_factory, kind, stop)
    work = tmp_path / "work"
    assert image.record[-CRC_PROPERTY_BYTES:].startswith(fmt.CRC_PROPERTY_PREFIX)

    def damage(i):
        restore(image.files, work)
        with open(image.segment_in(work), "r+b") as f:
            f.seek(image.in_segment + i)
            f.write(bytes([image.record[i] ^ mask]))

    positions = range(image.size) if mask == 0xFF and stop == "closed" and EXHAUSTIVE else spread(image.size)
    sweep(positions, damage, lambda i: CHECK_LAST_RECORD[stop](image, work, flip_reason(image, i)))




# --- the dispatcher on a segment that ends in a short BLANK -------------------------------------

def put_sized(store, model, topic, queue_id, total):
    """A single message whose record is exactly ``total`` bytes (no PAD)."""
    offset = model.next(topic, queue_id)
    body = body_of(topic, queue_id, offset, total - fmt.record_size(0, len(topic), 0))
    result = store.put_message(topic, queue_id, body)
    assert result.ok and result.queue_offset == offset, result
    model.bodies[(topic, queue_id)].append(body)
    model.records += 1
    return result


def write_short_blank(store, model, blank=40):
    """Records up to ``blank`` bytes before the end of segment 0, then one that goes to segment 1."""
    create_topics(store)
    while SEGMENT - log_end(store) > 4096 + 256:
        put_sized(store, model, "S", 0, 4096)
    put_sized(store, model, "S", 0, SEGMENT - log_end(store) - blank)
    assert SEGMENT - log_end(store) == blank
    put_sized(store, model, "S", 1, 300)
    assert log_end(store) == SEGMENT + 300


def test_segment_ending_in_short_blank_is_dispatched(tmp_path):
    store = open_at(tmp_path / "data")
    model = Model()
    with closing_quietly_on_failure(store):
        write_short_blank(store, model)
        assert store.wait_dispatched(1.0), "the dispatcher is stuck at the short BLANK"
        check_model(store, model)


def test_segment_ending_in_short_blank_survives_recovery(tmp_path):
    store = open_at(tmp_path / "data")
    model = Model()
    try:
        write_short_blank(store, model)
        copy_dir(tmp_path / "data", tmp_path / "copy")  # stopped unclean
    finally:
        with contextlib.suppress(Exception):  # close() fails on this bug too; recovery is tested here
            store.close()
    with open_at(tmp_path / "copy") as store:
        assert store.recovery.tail == SEGMENT + 300
        check_model(store, model)
