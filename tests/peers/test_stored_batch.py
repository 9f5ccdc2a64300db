"""What the real RocketMQ broker stores for an autoBatch batch in a BatchCQ topic (its commitlog
record and its BatchCQ unit, read from its data directory) beside what broker_sim stores for
the same batch, field by field. The fields that make the formats one are asserted; the ones
that differ by design are listed in ``EXPECTED_DIFFERENCES`` and checked to stay so."""

import glob
import time
from pathlib import Path

import pytest

from broker_sim.store import BatchPut, MessageStore, PutContext, QueueType, StoreConfig, StorePaths
from broker_sim.store.consume_queue import BatchConsumeQueue
from peers.rocketmq import body, java_produce
from rmq_wire import record as fmt
from rmq_wire.codec import check_batch
from rmq_wire.codec.records import decode_records

pytestmark = pytest.mark.peers

MESSAGES, BODY_BYTES, TAG = 64, 64, "TagA"

# Properties the real client or broker adds that broker_sim does not (and the reverse), and why.
EXPECTED_DIFFERENCES = {
    "UNIQ_KEY": "the Java client's message id of the batch; our producer sends none (the remoting door will keep one)",
    "WAIT": "the Java client's waitStoreMsgOK flag; our contract has no such flag",
    "CLUSTER": "the broker's cluster name, written by the Java client's send",
    "MSG_REGION": "the broker's region (DefaultRegion)",
    "TRACE_ON": "the broker's message-trace switch",
    "BATCH_CODEC": "broker_sim names the payload's codec (rmq or arrow); RocketMQ has one encoding",
}


def real_record_and_unit(rocketmq):
    rocketmq.create_topic("stored-batch", queues=1, batch_cq=True)
    # One batch: its 4 KiB are far below the 32 KiB that close one, and a second is time enough
    # to send them all on a busy machine (at 10 ms, the default here, a run split them 11 + 53).
    sent = java_produce(rocketmq.namesrv_addr, "stored-batch", messages=MESSAGES, threads=1, body_bytes=BODY_BYTES,
                        tag=TAG, batch_delay_ms=1000)
    assert sent["sent"] == MESSAGES, sent
    deadline = time.monotonic() + 30
    units = []
    while not units and time.monotonic() < deadline:  # the broker's dispatcher writes the unit shortly after
        units = read_units(glob.glob(f"{rocketmq.store_dir}/batchconsumequeue/stored-batch/0/*"))
        time.sleep(0.2)
    assert len(units) == 1, f"the autoBatch batch should be one BatchCQ unit, found {units}"
    unit = units[0]
    # Commitlog files are named by the position they start at; other tests may have written before.
    segments = sorted(Path(rocketmq.store_dir, "commitlog").iterdir(), key=lambda path: int(path.name))
    segment = [path for path in segments if int(path.name) <= unit["physical_offset"]][-1]
    at = unit["physical_offset"] - int(segment.name)
    with open(segment, "rb") as log:
        log.seek(at)
        record = log.read(unit["size"])
    return fmt.decode_record(record), unit, record


def read_units(files) -> list[dict]:
    units = []
    for path in sorted(files):
        data = Path(path).read_bytes()
        for at in range(0, len(data) - BatchConsumeQueue.UNIT.size + 1, BatchConsumeQueue.UNIT.size):
            fields = BatchConsumeQueue.UNIT.unpack_from(data, at)
            if fields[1] == 0:
                break
            units.append(dict(zip(BatchConsumeQueue.DTYPE.names, fields)))
    return units


def ours(tmp_path, real) -> tuple:
    """broker_sim's record and unit for the same batch: the real record's payload, count, tags,
    born time and host, as an inner batch of the rmq codec."""
    with MessageStore(tmp_path / "sim", StoreConfig(store_host="127.0.0.1", store_port=10911),
                      payload_check=check_batch) as store:
        store.create_topic("stored-batch", 1, QueueType.BATCH_CQ)
        batch = BatchPut(bytes(real.body), int(real.properties["INNER_NUM"]), "rmq", properties={"TAGS": TAG})
        result = store.put_inner_batch("stored-batch", 0, batch, context=PutContext(real.born_timestamp,
                                                                                       real.born_host))
        assert result.ok, result.detail
        assert store.wait_dispatched(10)
        [stored] = store.get_messages("stored-batch", 0, 0).batches
        record_bytes = bytes(stored.data)
    [unit] = read_units(StorePaths(tmp_path / "sim").queue_index(QueueType.BATCH_CQ, "stored-batch", 0).iterdir())
    return fmt.decode_record(record_bytes), unit, record_bytes


def test_broker_sim_stores_an_autobatch_batch_as_the_real_broker_does(rocketmq, tmp_path):
    real, real_unit, real_bytes = real_record_and_unit(rocketmq)
    sim, sim_unit, sim_bytes = ours(tmp_path, real)

    # The record: RocketMQ's V1 layout, the batch as ONE record with its flags and counts.
    assert real.sys_flag == sim.sys_flag == fmt.SysFlag.INNER_BATCH | fmt.SysFlag.NEED_UNWRAP
    assert bytes(real.body) == bytes(sim.body) and real.body_crc == sim.body_crc
    for name in ("queue_id", "flag", "queue_offset", "born_timestamp", "born_host", "reconsume_times",
                 "prepared_transaction_offset", "topic"):
        assert getattr(real, name) == getattr(sim, name), name
    # PHYSICALOFFSET is where each log put the record (the real one is shared with other tests).
    assert real.physical_offset == real_unit["physical_offset"] and sim.physical_offset == sim_unit["physical_offset"]
    for name in ("INNER_NUM", "INNER_BASE", "TAGS"):
        assert real.properties[name] == sim.properties[name], name
    differing = set(real.properties) ^ set(sim.properties)
    assert differing == set(EXPECTED_DIFFERENCES), differing
    assert real.total_size - len(real_bytes) == 0 and sim.total_size == len(sim_bytes)

    # The BatchCQ unit (46 bytes).
    for name in ("tags_code", "base_offset", "count", "compacted_offset", "reserved"):
        assert real_unit[name] == sim_unit[name], name
    assert real_unit["count"] == MESSAGES and real_unit["tags_code"] == fmt.java_string_hash(TAG)
    assert real_unit["size"] == real.total_size and sim_unit["size"] == sim.total_size

    # Our readers decode the real broker's record into its messages.
    rows = decode_records(real_bytes, 0).to_pydict()
    assert rows["body"] == [body(i, BODY_BYTES) for i in range(MESSAGES)]
    assert set(rows["tags"]) == {TAG}
