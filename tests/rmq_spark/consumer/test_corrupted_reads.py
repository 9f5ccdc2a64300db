"""The issue 15 probe through a real broker: three bytes flipped in a stored batch of the
second-to-last commitlog segment while the broker is stopped. After the restart nothing is
lost but that batch: the SDK's reads fail naming its offsets or skip exactly them, the Spark
source does the same under failOnDataLoss, BrokerStats and rmq-admin report it, and sends go
on at offset 5,000."""

import json
import logging

import pytest

import broker_sim
from broker_sim.store.paths import StorePaths
from rmq_spark import Admin, CorruptedRecordError, Message, OffsetRange, Producer, RangeReader
from rmq_spark.cli import main
from rmq_spark.spark.options import parse_options
from rmq_spark.spark.source import QueueRangesPartition, read_partition
from rmq_wire import record as fmt
from support.sdk import wait_indexed

SEGMENT = 64 * 1024
BATCH = 50
TOPIC = "probe"


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A data directory holding 5,000 messages in queue 0, one batch of them damaged; yields
    (endpoint of the restarted broker, first offset of the damaged batch)."""
    data = tmp_path_factory.mktemp("damaged")
    with broker_sim.embedded(data, segment_bytes=SEGMENT) as endpoint:
        with Admin(endpoint) as admin:
            admin.create_topic(TOPIC, 1, "BatchCQ")
        with Producer(endpoint, codec="rmq") as producer:
            for base in range(0, 5000, BATCH):
                producer.send_batch([Message(TOPIC, b"m%d" % (base + i) + b"." * 60, queue_id=0)
                                     for i in range(BATCH)])
        wait_indexed(endpoint, TOPIC, 5000)
    segment = sorted(StorePaths(data).commitlog.iterdir())[-2]
    raw = bytearray(segment.read_bytes())
    positions = []
    pos = 0
    while fmt.check_record(raw, pos, len(raw))[0] is fmt.Check.OK:
        positions.append(pos)
        pos += fmt.HEADER.unpack_from(raw, pos)[0]
    victim = positions[len(positions) // 2]
    base = fmt.HEADER.unpack_from(raw, victim)[5]
    for at in (300, 301, 900):  # three bytes of its body
        raw[victim + at] ^= 0xFF
    segment.write_bytes(raw)
    with broker_sim.embedded(data, segment_bytes=SEGMENT) as endpoint:
        yield endpoint, base


def read(endpoint, on_data_loss):
    with RangeReader(endpoint, on_data_loss=on_data_loss) as reader:
        return reader.read_table([OffsetRange(TOPIC, 0, 0, 5000)])


def test_reads_fail_naming_the_damaged_offsets(damaged):
    endpoint, base = damaged
    with pytest.raises(CorruptedRecordError, match=f"'{TOPIC}' queue 0 offsets {base} to {base + BATCH - 1}") as err:
        read(endpoint, "fail")
    assert (err.value.topic, err.value.queue_id, err.value.first_offset, err.value.end_offset) == (
        TOPIC, 0, base, base + BATCH)


def test_reads_skip_exactly_the_damaged_offsets(damaged, caplog):
    endpoint, base = damaged
    with caplog.at_level(logging.WARNING, logger="rmq_spark.consumer.range_reader"):
        table = read(endpoint, "skip")
    offsets = table.column("queue_offset").to_pylist()
    assert offsets == [o for o in range(5000) if not base <= o < base + BATCH]
    assert table.column("body").to_pylist()[0] == b"m0" + b"." * 60
    assert f"offsets {base} to {base + BATCH - 1} skipped" in caplog.text


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_spark_source_honours_fail_on_data_loss(damaged, fail_on_data_loss):
    endpoint, base = damaged
    options = parse_options({"endpoint": endpoint, "topics": TOPIC, "failOnDataLoss": fail_on_data_loss})
    partition = QueueRangesPartition([OffsetRange(TOPIC, 0, base - 10, base + BATCH + 10)])
    if fail_on_data_loss == "true":
        with pytest.raises(CorruptedRecordError, match="failOnDataLoss to false"):
            list(read_partition(options, partition))
    else:
        rows = sum(batch.num_rows for batch in read_partition(options, partition))
        assert rows == 20


def test_broker_stats_and_rmq_admin_report_it(damaged, capsys):
    endpoint, base = damaged
    with Admin(endpoint) as admin:
        stats = admin.broker_stats()
        assert admin.offsets([TOPIC])[TOPIC][0].max_offset == 5000  # nothing was cut
    assert stats.corrupted_records == 1
    [record] = stats.corrupted
    assert (record.topic, record.queue_id, record.first_offset, record.end_offset, record.reason) == (
        TOPIC, 0, base, base + BATCH, "body CRC mismatch")
    assert main(["--endpoint", endpoint, "--json", "broker", "corrupted"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["topic"], row["first_offset"], row["found_by"]) == (TOPIC, base, "recovery")
    assert main(["--endpoint", endpoint, "broker", "stats"]) == 0
    assert any(line.split() == ["corrupted_records", "1"] for line in capsys.readouterr().out.splitlines())


def test_sends_continue_after_the_last_offset(damaged):
    endpoint, _base = damaged
    with Producer(endpoint, codec="rmq") as producer:
        [result] = producer.send_batch([Message(TOPIC, b"after", queue_id=0)])
    assert result.queue_offset == 5000
