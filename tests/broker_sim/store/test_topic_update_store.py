"""The store under a topic whose queue count went down (MessageStore.update_topic): the queues past
the count are kept, indexed whatever the dispatcher (serial or concurrent) and through recovery's
re-dispatch of the whole log, so that their offsets go on where they stopped when the count grows
back; and a put that checked a queue an update hid is refused, not stored out of sight."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from broker_sim.store import DEFAULT_PUT, GetStatus, MessageStore, PutStatus, QueueType, StoreConfig, decode_record
from broker_sim.store.paths import StorePaths

SERIAL = StoreConfig(segment_bytes=64 * 1024, simple_cq_units_per_file=16, batch_cq_units_per_file=8,
                     flush_interval_ms=60_000, index_flush_interval_ms=60_000)
CONFIGS = {"serial": SERIAL,
           "concurrent": dataclasses.replace(SERIAL, dispatch_mode="concurrent", dispatch_pool="thread",
                                             dispatch_chunk_bytes=6000, dispatch_ring_slots=3)}


def bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    result = store.get_messages(topic, queue_id, 0, max_bytes=1 << 20)
    assert result.status is GetStatus.FOUND, result
    return [bytes(decode_record(batch.data).body) for batch in result.batches]


@pytest.mark.parametrize("mode", list(CONFIGS))
@pytest.mark.parametrize("queue_type", [QueueType.SIMPLE_CQ, QueueType.BATCH_CQ])
def test_hidden_queues_are_indexed_again_by_a_recovery_from_the_start_of_the_log(tmp_path, mode, queue_type):
    data = tmp_path / "data"
    with MessageStore(data, CONFIGS[mode]) as store:
        store.create_topic("t", 4, queue_type)
        for n in range(40):  # several index files of each queue
            assert store.put_message("t", n % 4, f"m{n}".encode()).ok
        config, detail = store.update_topic("t", queue_count=2, perm=4)
        assert (config.queue_count, config.queues_kept, config.perm, detail) == (2, 4, 4, "")
        assert store.put_message("t", 0, b"after").ok
        assert store.wait_dispatched(10)
        copy = tmp_path / "copy"
        shutil.copytree(data, copy, ignore=shutil.ignore_patterns("lock"))
    paths = StorePaths(copy)
    for queue_type_dir in QueueType:
        shutil.rmtree(paths.index_root(queue_type_dir), ignore_errors=True)
    paths.checkpoint.unlink()
    paths.queue_table.unlink(missing_ok=True)

    with MessageStore(copy, CONFIGS[mode]) as store:  # every index rebuilt from the log
        config = store.find_topic("t")
        assert (config.queue_count, config.stored_queues, config.perm) == (2, 4, 4)
        assert store.get_messages("t", 3, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        config, _ = store.update_topic("t", queue_count=4)
        assert config.queues_kept == 0 and config.stored_queues == 4
        assert bodies(store, "t", 3) == [f"m{n}".encode() for n in range(3, 40, 4)]
        assert store.put_message("t", 3, b"back").queue_offset == 10
        assert store.wait_dispatched(10)
        assert bodies(store, "t", 3)[-1] == b"back"


def test_a_put_to_a_queue_hidden_meanwhile_is_refused_and_one_of_a_served_queue_stored(tmp_path):
    with MessageStore(tmp_path / "data", SERIAL) as store:
        store.create_topic("t", 4, QueueType.SIMPLE_CQ)
        hidden = store.build_message("t", 3, b"late")  # checked against the topic as it was
        served = store.build_message("t", 1, b"served")
        store.update_topic("t", queue_count=2)
        refused = store._put(hidden, DEFAULT_PUT)
        assert refused.status is PutStatus.QUEUE_NOT_FOUND and "taken out of service" in refused.detail
        assert store._put(served, DEFAULT_PUT).ok  # an update is no deletion: the put goes on
        assert store.put_message("t", 3, b"now").status is PutStatus.QUEUE_NOT_FOUND
        store.update_topic("t", queue_count=4)
        assert store.put_message("t", 3, b"back").queue_offset == 0  # nothing went into it meanwhile

