"""One parser of sizes and durations: the broker's flags and the Spark options read every
spelling alike (rmq_wire.units)."""

import pytest

from broker_sim.cli import byte_size
from rmq_spark.spark.options import parse_options
from rmq_wire.units import format_size, parse_duration_ms, parse_size_bytes

SIZES = [("65536", 65536), ("1b", 1), ("64k", 64 << 10), ("64KiB", 64 << 10), ("64 kb", 64 << 10), ("16M", 16 << 20),
         ("1g", 1 << 30), (" 2gib ", 2 << 30)]
DURATIONS = [("500", 500), ("500ms", 500), ("30s", 30_000), ("30 sec", 30_000), ("15m", 900_000),
             ("15MIN", 900_000), ("1h", 3_600_000), (" 1d ", 86_400_000)]
BASE = {"endpoint": "127.0.0.1:1", "topic": "t"}


@pytest.mark.parametrize("text, size", SIZES)
def test_a_size_reads_alike_for_the_broker_and_spark(text, size):
    assert parse_size_bytes(text) == byte_size(text) == size
    assert parse_options({**BASE, "maxBytesPerFetch": text}).max_bytes_per_fetch == size


@pytest.mark.parametrize("text, duration_ms", DURATIONS)
def test_a_duration_reads_alike(text, duration_ms):
    assert parse_duration_ms(text) == duration_ms
    assert parse_options({**BASE, "fetchTimeout": text}).fetch_timeout_ms == duration_ms


@pytest.mark.parametrize("text", ["", "lots", "1.5m", "-1", "64t", "1 h m"])
def test_what_is_neither_is_none(text):
    assert parse_size_bytes(text) is None and parse_duration_ms(text) is None


def test_a_size_is_shown_as_it_is_written():
    assert [format_size(n) for n in (64 << 20, 1 << 30, 3 << 10, 1000)] == ["64m", "1g", "3k", "1000"]
    assert all(parse_size_bytes(format_size(n)) == n for n in (64 << 20, 1 << 30, 3 << 10, 1000))
