"""Reading big-endian fields at many positions of a buffer at once, and walking size chains.

Both stored records and RocketMQ's batch entries start with their own TOTALSIZE, so finding
where each one starts means following a chain. ``entry_starts`` follows it with numpy for runs
of equal sizes (the common case: a producer's batch of equal messages) and with a tight Python
loop where sizes vary; ``chains_entry_starts`` follows many chains side by side (the payloads
of a read), one numpy step per entry of the longest. Every other field is then read for all
entries at once by ``read_at``.
"""

from __future__ import annotations

import struct

import numpy as np

from rmq_wire.errors import CodecError

_SIZE = struct.Struct(">i")
# A run of equal sizes shorter than this is not worth numpy calls: walk on in Python a while.
_MIN_RUN = 8
_FIRST_PYTHON_STEPS = 32
_MAX_PYTHON_STEPS = 4096


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For each i, the ``lengths[i]`` numbers from ``starts[i]`` on; concatenated (the positions
    of many byte ranges, to gather them in one numpy take)."""
    before = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=before[1:])
    return np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def as_uint8(buf) -> np.ndarray:
    """A read-only uint8 numpy view of any bytes-like object (no copy)."""
    return np.frombuffer(buf, dtype=np.uint8)


def read_at(buf, positions: np.ndarray, dtype: str, padded: bool = False) -> np.ndarray:
    """The value of ``dtype`` (e.g. ``">i4"``, ``"<u8"``) at each byte position of ``buf``.

    A view of the buffer with a stride of one byte makes every position an element, so one
    numpy gather reads them all. Every field must lie in ``buf``, unless ``padded``: then the
    bytes past its end read as zeros.
    """
    itemsize = np.dtype(dtype).itemsize
    limit = len(buf) - itemsize  # the last position a whole field starts at
    if padded and len(positions) and int(positions.max()) > limit:
        return _read_padded(buf, positions, dtype, limit)
    if limit < 0:
        return np.zeros(len(positions), dtype=dtype)
    every = np.ndarray((limit + 1,), dtype=dtype, buffer=buf, offset=0, strides=(1,))
    return every[positions]


def _read_padded(buf, positions: np.ndarray, dtype: str, limit: int) -> np.ndarray:
    out = np.zeros(len(positions), dtype=dtype)
    inside = positions <= limit
    if limit >= 0:
        out[inside] = read_at(buf, positions[inside], dtype)
    # The last few positions read from a copy of the buffer's tail, followed by zeros (a
    # position at or past the end reads only zeros).
    tail_start = max(limit + 1, 0)
    tail = np.zeros(len(buf) - tail_start + np.dtype(dtype).itemsize, dtype=np.uint8)
    tail[: len(buf) - tail_start] = as_uint8(buf)[tail_start:]
    out[~inside] = read_at(tail, np.minimum(positions[~inside], len(buf)) - tail_start, dtype)
    return out


def matches(buf, positions: np.ndarray, expected: bytes) -> np.ndarray:
    """Whether ``buf`` holds ``expected`` at each position (each must fit in ``buf``).

    Compares 8, 4, 2 and 1-byte integers rather than rows of bytes: numpy is much faster on
    one long axis than on many short ones.
    """
    found = np.ones(len(positions), dtype=bool)
    at = 0
    for width, dtype in ((8, "<u8"), (4, "<u4"), (2, "<u2"), (1, "u1")):
        while len(expected) - at >= width:
            value = np.frombuffer(expected[at:at + width], dtype=dtype)[0]
            found &= read_at(buf, positions + at, dtype) == value
            at += width
    return found


class ChainError(CodecError):
    """A TOTALSIZE chain that does not parse: ``index`` and ``position`` say where."""

    def __init__(self, index: int, position: int, message: str):
        super().__init__(message)
        self.index = index
        self.position = position


def entry_starts(buf, min_size: int, what: str) -> np.ndarray:
    """Where each entry of a chain of ``[TOTALSIZE int32 big-endian][...]`` entries starts.

    The entries must fill ``buf`` exactly. Raises ChainError (a CodecError naming ``what``,
    the entry's index and byte position) on a size below ``min_size`` or past the end.
    """
    end = len(buf)
    parts: list[np.ndarray] = []
    pos = index = 0
    python_steps = _FIRST_PYTHON_STEPS
    while pos < end:
        size = _size_at(buf, pos, end, index, min_size, what)
        run = _equal_run(buf, pos, end, size)
        parts.append(pos + size * np.arange(run, dtype=np.int64))
        pos += run * size
        index += run
        if run < _MIN_RUN and pos < end:
            # Sizes vary here: a numpy attempt per entry would cost more than it saves.
            walked, pos = _walk(buf, pos, end, index, min_size, what, python_steps)
            parts.append(np.array(walked, dtype=np.int64))
            index += len(walked)
            python_steps = min(python_steps * 2, _MAX_PYTHON_STEPS)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _size_at(buf, pos: int, end: int, index: int, min_size: int, what: str) -> int:
    if end - pos < 4:
        raise ChainError(index, pos, f"{what} {index} at byte {pos}: {end - pos} bytes left, "
                                     f"fewer than the 4 of TOTALSIZE")
    (size,) = _SIZE.unpack_from(buf, pos)
    if size < min_size or size > end - pos:
        raise ChainError(index, pos, f"{what} {index} at byte {pos}: TOTALSIZE {size} with {end - pos} "
                                     f"bytes left (an entry takes at least {min_size} bytes, and no more than "
                                     "are left)")
    return size


def _equal_run(buf, pos: int, end: int, size: int) -> int:
    """How many entries from ``pos`` on are ``size`` bytes long (at least 1: the first is)."""
    most = (end - pos) // size
    if most < 2:
        return 1
    sizes = np.ndarray((most,), dtype=">i4", buffer=buf, offset=pos, strides=(size,))
    differ = np.flatnonzero(sizes != size)
    return int(differ[0]) if len(differ) else most


def _walk(buf, pos: int, end: int, index: int, min_size: int, what: str, steps: int) -> tuple[list[int], int]:
    """Up to ``steps`` entry starts from ``pos`` on, one entry at a time; and where it stopped."""
    starts = []
    append = starts.append
    unpack = _SIZE.unpack_from
    while pos < end and len(starts) < steps:
        if end - pos < 4:
            _size_at(buf, pos, end, index + len(starts), min_size, what)
        (size,) = unpack(buf, pos)
        if size < min_size or size > end - pos:
            _size_at(buf, pos, end, index + len(starts), min_size, what)
        append(pos)
        pos += size
    return starts, pos


# Chains walked together take a step of a few numpy calls (some 20 us) per entry of the longest:
# cheaper than walking each alone (a Python step, some 0.15 us, per entry of varied sizes) while
# many are unfinished; the last few go on alone.
_LOCKSTEP_MIN = 64


def chains_entry_starts(buf, begins: np.ndarray, ends: np.ndarray, min_size: int) -> np.ndarray:
    """Where each entry of several TOTALSIZE chains starts, in buffer order.

    Chain ``i`` fills ``buf[begins[i]:ends[i]]`` exactly; the chains lie in buffer order. They
    are walked in lockstep, one entry of every unfinished chain per numpy step, so a
    concatenation of many short chains (the payloads of a read) costs a few numpy calls per
    entry of the longest rather than per chain. Raises ChainError whose ``index`` is the first
    chain found not to parse (walk it alone with ``entry_starts`` to learn where and why).
    """
    found = []
    pos = np.array(begins, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    active = np.flatnonzero(pos < ends)
    while len(active) >= _LOCKSTEP_MIN:
        at = pos[active]
        left = ends[active] - at
        size = read_at(buf, at, ">i4", padded=True).astype(np.int64)
        bad = (left < 4) | (size < min_size) | (size > left)
        if bad.any():
            i = int(np.argmax(bad))
            raise ChainError(int(active[i]), int(at[i]), f"chain {active[i]}: bad TOTALSIZE at byte {at[i]}")
        found.append(at)
        at = at + size
        pos[active] = at
        active = active[at < ends[active]]
    view = memoryview(buf).cast("B") if len(active) else None
    for i in active.tolist():
        start, end = int(pos[i]), int(ends[i])
        try:
            found.append(start + entry_starts(view[start:end], min_size, "entry"))
        except ChainError as err:
            raise ChainError(i, start + err.position, str(err)) from None
    if not found:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate(found))
