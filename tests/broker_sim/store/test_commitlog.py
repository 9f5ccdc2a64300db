"""Segments, roll-over with a BLANK marker, queue offsets and flushing."""

import os
import struct
import time

import pytest

from broker_sim.store import BatchPut, FlushMode, MessageStore, PutStatus, StoreConfig, decode_record
from rmq_wire import record as fmt


def test_segments_roll_over_with_a_blank_marker(store):
    store.create_topic("t", 2)
    bodies = [bytes([i % 251]) * (1000 + i) for i in range(200)]  # ~ 220 KiB: four segments
    results = [store.put_message("t", i % 2, body) for i, body in enumerate(bodies)]
    assert all(r.ok for r in results)
    names = sorted(os.listdir(store.paths.commitlog))
    assert names == [f"{i * 65536:020d}" for i in range(len(names))] and len(names) >= 4

    for segment in store.commitlog.segments.files[:-1]:
        # Walk each full segment: records, then one BLANK marker covering the rest exactly.
        pos = 0
        while True:
            total, magic = struct.unpack_from(">iI", segment.map, pos)
            if magic == fmt.BLANK_MAGIC:
                assert pos + total == segment.size
                assert total >= fmt.END_FILE_MIN_BLANK_BYTES
                break
            assert magic == fmt.MAGIC_V1
            pos += total

    store.wait_dispatched(5)
    for queue_id in (0, 1):
        read = store.get_messages("t", queue_id, 0, max_bytes=1 << 30)
        assert [bytes(decode_record(b.data).body) for b in read.batches] == bodies[queue_id::2]
        assert [b.base_offset for b in read.batches] == list(range(100))


def test_physical_offsets_are_positions_in_the_whole_log(store):
    store.create_topic("t", 1)
    for i in range(100):
        result = store.put_message("t", 0, b"x" * 3000)
        record = decode_record(store.commitlog.view(result.physical_offsets[0], 91 + 3000 + 200))
        assert record.physical_offset == result.physical_offsets[0]
        assert record.queue_offset == i


def test_queue_offsets_are_per_queue_and_count_messages(store):
    store.create_topic("s", 2)
    store.create_topic("b", 2, "BatchCQ")
    assert store.put_message("s", 0, b"a").queue_offset == 0
    assert store.put_message("s", 1, b"a").queue_offset == 0
    batch = fmt.encode_message_batch([(b"m", {}, 0)] * 4)
    assert store.put_early_batch("s", 0, batch).queue_offset == 1
    assert store.put_message("s", 0, b"a").queue_offset == 5
    assert store.put_inner_batch("b", 0, BatchPut(b"p", 10)).queue_offset == 0
    assert store.put_message("b", 0, b"single").queue_offset == 10
    assert store.put_inner_batch("b", 0, BatchPut(b"p", 3)).queue_offset == 11
    store.wait_dispatched(5)
    assert store.max_offset("b", 0) == 14 and store.max_offset("s", 0) == 6


def test_a_message_larger_than_the_limit_is_refused_and_nothing_is_written(tmp_path):
    config = StoreConfig(segment_bytes=1 << 20, max_message_bytes=4096)
    with MessageStore(tmp_path, config) as store:
        store.create_topic("t", 1)
        store.create_topic("b", 1, "BatchCQ")
        before = store.commitlog.max_offset
        result = store.put_message("t", 0, b"x" * 4097)
        assert result.status is PutStatus.MESSAGE_TOO_LARGE
        assert "4097 bytes" in result.detail and "4096" in result.detail
        assert store.put_inner_batch("b", 0, BatchPut(b"x" * 4097, 2)).status is PutStatus.MESSAGE_TOO_LARGE
        assert store.put_message("t", 0, b"x" * 4096).ok
        assert store.commitlog.max_offset > before
        assert store.put_message("t", 0, b"x").queue_offset == 1


def test_default_limit_is_4_mib(tmp_path):
    with MessageStore(tmp_path, StoreConfig(segment_bytes=16 << 20)) as store:
        store.create_topic("t", 1)
        assert store.put_message("t", 0, b"x" * (4 << 20)).ok
        result = store.put_message("t", 0, b"x" * ((4 << 20) + 1))
        assert result.status is PutStatus.MESSAGE_TOO_LARGE and "4194304" in result.detail


def test_a_record_larger_than_a_segment_is_refused(store):
    store.create_topic("t", 1)
    result = store.put_message("t", 0, b"x" * 70000)
    assert result.status is PutStatus.MESSAGE_TOO_LARGE and "segment" in result.detail
    assert store.commitlog.max_offset == 0


def test_properties_over_32767_bytes_are_refused(store):
    store.create_topic("t", 1)
    result = store.put_message("t", 0, b"x", properties={"big": "v" * 33000})
    assert result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and "32767" in result.detail


def test_a_single_message_may_use_every_property_byte_the_store_does_not(tmp_path):
    """Only the CRC property is the store's on a single message (INNER_BASE is an inner batch's)."""
    with MessageStore(tmp_path, StoreConfig(segment_bytes=1 << 20)) as store:
        store.create_topic("t", 1)
        room = fmt.MAX_PROPERTIES_BYTES - fmt.CRC_RESERVED_BYTES - len("big\x01\x02")
        assert store.put_message("t", 0, b"x", properties={"big": "v" * room}).ok
        too_big = store.put_message("t", 0, b"x", properties={"big": "v" * (room + 1)})
        assert too_big.status is PutStatus.PROPERTIES_SIZE_EXCEEDED


@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC])
def test_flush_modes(tmp_path, mode):
    config = StoreConfig(segment_bytes=64 * 1024, flush_mode=mode, flush_interval_ms=10)
    with MessageStore(tmp_path, config) as store:
        store.create_topic("t", 1)
        result = store.put_message("t", 0, b"x" * 100)
        end = result.physical_offsets[0] + 91 + 100
        if mode is FlushMode.SYNC:
            # Acknowledged only once on disk: the flushed position covers the record already.
            assert store.commitlog.flushed_offset >= end
        assert store.wait_for_messages("t", 0, 0, timeout_s=5)
        if mode is FlushMode.ASYNC:
            for _ in range(500):  # the flusher runs every 10 ms
                if store.commitlog.flushed_offset >= end:
                    break
                time.sleep(0.01)
            assert store.commitlog.flushed_offset >= end


def test_sync_flush_makes_only_flushed_records_visible(tmp_path):
    config = StoreConfig(segment_bytes=64 * 1024, flush_mode="sync")
    with MessageStore(tmp_path, config) as store:
        store.create_topic("t", 1)
        store.put_message("t", 0, b"x")
        assert store.dispatcher.limit() == store.commitlog.flushed_offset == store.commitlog.max_offset


def test_config_is_checked():
    with pytest.raises(ValueError, match="segment_bytes"):
        StoreConfig(segment_bytes=100)
    with pytest.raises(ValueError, match="'never'"):
        StoreConfig(flush_mode="never")
    with pytest.raises(ValueError, match="max_batch_messages"):
        StoreConfig(max_batch_messages=40000)



def _mapped_resident_bytes(directory) -> int:
    """The resident bytes of this process's mappings of files under ``directory`` (smaps): the
    store's pages alone. The whole process's resident size moved with what the other threads of
    a busy test process allocated and freed meanwhile (3 MiB less after a read of 48 MiB)."""
    total, mine = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0]:  # a mapping's header: range, perms, offset, dev, inode[, path]
                mine = len(fields) >= 6 and fields[5].startswith(str(directory))
            elif mine and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_read_pages_are_released_from_resident_memory(tmp_path):
    """Resident memory follows what is in use, not what was ever read: the log's pages that
    a read mapped are unmapped again (they stay in the page cache and the file)."""
    with MessageStore(tmp_path, StoreConfig(segment_bytes=16 << 20)) as store:
        store.create_topic("t", 1, "BatchCQ")
        payload = b"x" * (1 << 20)
        for _ in range(48):
            assert store.put_inner_batch("t", 0, BatchPut(payload, 1)).ok
        store.wait_dispatched(5)
        store.commitlog.release_mapped_pages()  # what the appends and the dispatcher left resident
        before = _mapped_resident_bytes(tmp_path)
        read = store.get_messages("t", 0, 0, max_bytes=1 << 30)
        assert sum(bytes(b.data).count(b"x") >= len(payload) for b in read.batches) == 48  # every page touched
        touched = _mapped_resident_bytes(tmp_path) - before
        # The kernel may take clean file pages back by itself under memory pressure (a CI host
        # kept 16 of the 48 MiB read): enough must stay for the release to be seen.
        assert touched > 4 << 20, f"the read left {touched} bytes of the log resident"
        store.commitlog.release_mapped_pages()
        assert _mapped_resident_bytes(tmp_path) - before < min(touched / 4, 2 << 20)
        assert bytes(read.batches[0].data[-200:]).count(b"x") < 200  # views still read (the CRC tail)
        assert decode_record(read.batches[5].data).body.tobytes() == payload
