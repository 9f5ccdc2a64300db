"""Sizes and durations as people write them, for the broker's flags and the Spark options alike.

A size is a whole number of bytes, or with a binary unit: ``65536``, ``512k``, ``64KiB``,
``16m``, ``1g`` (any case; ``b``/``ib`` optional). A duration is a whole number of
milliseconds, or with a unit: ``500ms``, ``30s``, ``30sec``, ``15m``, ``15min``, ``1h``,
``1d``. Spaces around the number and the unit are allowed. The parsers return None for text
that is neither; each caller says what was wrong in its own words (a flag, an option).
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_BYTES = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"": 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_size_bytes(text: str) -> int | None:
    """The number of bytes ``text`` writes (``64k`` is 65536), or None when it is not a size."""
    match = _SIZE.match(text)
    if not match:
        return None
    return int(match.group(1)) * _SIZE_BYTES[(match.group(2) or "")[:1].lower()]


def parse_duration_ms(text: str) -> int | None:
    """The milliseconds ``text`` writes (``30s`` is 30000), or None when it is not a duration."""
    match = _DURATION.match(text)
    if not match:
        return None
    return int(match.group(1)) * _DURATION_MS[(match.group(2) or "").lower()]


def format_size(size_bytes: int) -> str:
    """A size as ``parse_size_bytes`` reads it, in its largest whole unit: ``64m`` for 67108864."""
    for suffix in ("g", "m", "k"):
        unit = _SIZE_BYTES[suffix]
        if size_bytes >= unit and size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)
