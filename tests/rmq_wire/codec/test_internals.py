"""The building blocks: size-chain walking, reads at many positions, columns gathered from ranges."""

import os
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from rmq_wire.codec._bytes import ChainError, entry_starts, matches, read_at
from rmq_wire.codec._gather import MapColumn, RangeColumn, Sources, gather_ranges


def chain(sizes) -> bytes:
    return b"".join(struct.pack(">i", n) + os.urandom(n - 4) for n in sizes)


@pytest.mark.parametrize("sizes", [
    [8], [8] * 1000, [9, 8], list(range(8, 300)), [8] * 7 + [9] * 7 + [10] * 7,
    [8] * 3 + random.Random(1).choices(range(8, 40), k=2000) + [12] * 500 + [13],
])
def test_entry_starts(sizes):
    expected = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    assert entry_starts(chain(sizes), 8, "entry").tolist() == expected.tolist()


def test_entry_starts_errors_name_the_entry():
    with pytest.raises(ChainError, match="entry 2 at byte 16: TOTALSIZE 9 with 8 bytes left") as info:
        entry_starts(chain([8, 8, 8])[:-8] + struct.pack(">i", 9) + b"xxxx", 8, "entry")
    assert (info.value.index, info.value.position) == (2, 16)
    with pytest.raises(ChainError, match="entry 40 at byte 320: TOTALSIZE 2"):
        entry_starts(chain([8] * 40) + struct.pack(">i", 2) + b"xxxx", 8, "entry")
    with pytest.raises(ChainError, match="entry 1 at byte 8: 3 bytes left"):
        entry_starts(chain([8]) + b"abc", 8, "entry")


def test_read_at_every_position_and_past_the_end():
    raw = bytes(range(1, 21))
    positions = np.arange(21)
    assert read_at(raw, positions[:17], ">i4").tolist() == [struct.unpack_from(">i", raw, p)[0] for p in range(17)]
    padded = read_at(raw, positions, "<u8", padded=True)
    assert padded.tolist() == [int.from_bytes(raw[p:p + 8].ljust(8, b"\0"), "little") for p in range(21)]
    assert read_at(b"ab", np.array([0, 1, 5]), "<u4", padded=True).tolist() == [0x6261, 0x62, 0]


def test_matches():
    raw = b"xxTAGS\x01yTAGS\x02TAG"
    assert matches(raw, np.array([2, 8, 0]), b"TAGS\x01").tolist() == [True, False, False]
    assert matches(raw * 3, np.array([2, len(raw)]), raw[:13]).tolist() == [False, True]


def test_range_column_gathers_from_many_sources_in_any_order():
    one, two = b"0123456789abcdefghijklmnopqrstuvwxyz", bytearray(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    column = RangeColumn()
    column.put(np.array([4, 0]), one, np.array([0, 10]), np.array([13, 2]))  # long, inline
    column.put(slice(1, 3), two, np.array([20, 0]), np.array([6, 26]))  # one ending at the source's end
    column.put_constant(slice(5, 7), b"constant value")
    column.put_constant(slice(7, 8), b"short")
    column.put_array(np.array([8, 10]), pa.array(["x", None]))
    result = column.finish(11, pa.binary())
    assert result.to_pylist() == [b"ab", b"UVWXYZ", bytes(two), None, b"0123456789abc", b"constant value",
                                  b"constant value", b"short", b"x", None, None]


def test_range_column_of_whole_arrays_in_order_is_a_concatenation():
    column = RangeColumn()
    column.put_array(slice(0, 2), pa.array([b"a", None]))
    column.put_array(slice(2, 3), pa.array(["c"]))
    assert column.finish(3, pa.string()).to_pylist() == ["a", None, "c"]


def test_range_column_checks_utf8():
    column = RangeColumn()
    column.put(slice(0, 1), b"\xff\xfe", np.array([0]), np.array([2]))
    with pytest.raises(pa.ArrowInvalid, match="UTF8"):
        column.finish(1, pa.string())


def test_views_of_shared_sources_serve_two_columns():
    sources = Sources()
    bodies, props = RangeColumn(sources), RangeColumn(sources)
    raw = b"the body of the first message|props-1|b2|p2"
    views = sources.views(raw, np.array([0, 38, 30, 41]), np.array([29, 2, 7, 2]))
    bodies.put_views(slice(0, 2), views[:2])
    props.put_views(slice(0, 2), views[2:])
    assert bodies.finish(2, pa.binary()).to_pylist() == [b"the body of the first message", b"b2"]
    assert props.finish(2, pa.binary()).to_pylist() == [b"props-1", b"p2"]


def test_map_column_mixes_ranges_and_arrays():
    column = MapColumn()
    column.put(np.array([0, 2]), np.array([2, 0]), pa.array(["k1", "k2"]), pa.array(["v1", "v2"]))
    column.put_array(slice(3, 5), pa.array([[("a", None)], None], pa.map_(pa.string(), pa.string())))
    assert column.finish(5).to_pylist() == [[("k1", "v1"), ("k2", "v2")], [], [], [("a", None)], []]


def test_gather_ranges():
    source = np.frombuffer(b"hello world", dtype=np.uint8)
    out = gather_ranges(source, np.array([0, 2, 3]), np.array([0, 6, 5]), np.array([5, 5, 0]), 4, pa.string())
    assert out.to_pylist() == ["hello", None, "world", ""]
    with pytest.raises(ValueError, match="not UTF-8"):
        gather_ranges(np.frombuffer(b"\xff", np.uint8), np.array([0]), np.array([0]), np.array([1]), 1, pa.string())


def test_views_follow_the_binary_view_layout():
    raw = b"abcdefghijklmnopqrstuvwxyz"
    views = Sources().views(raw, np.array([0, 3, 20, 25]), np.array([13, 5, 6, 1]))
    rows = views.view(np.uint8).reshape(-1, 16)
    assert views[:, 0].tolist() == [13, 5, 6, 1]
    assert bytes(rows[0, 4:8]) == b"abcd" and views[0, 2] == 0 and views[0, 3] == 0  # prefix, buffer, offset
    assert bytes(rows[1, 4:]) == b"defgh" + bytes(7)  # inline, zero padded
    assert bytes(rows[2, 4:]) == b"uvwxyz" + bytes(6)
    assert bytes(rows[3, 4:]) == b"z" + bytes(11)  # at the buffer's end
    array = pa.Array.from_buffers(pa.binary_view(), 4, [None, pa.py_buffer(views), pa.py_buffer(raw)])
    array.validate(full=True)
    assert array.to_pylist() == [raw[:13], b"defgh", b"uvwxyz", b"z"]
