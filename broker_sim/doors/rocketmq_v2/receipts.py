"""Receipt handles of inner batch messages: the core pops a BatchCQ topic's inner batch as one
unit with one handle, the v2 door hands its messages out one by one, each with the unit's handle,
its index and the unit's count ("handle#index:count"). The unit is acked in the core once all its messages are; a
change of one message's invisible time moves the whole unit (a new unit handle), and the
handles the other messages carry are followed to it."""

from __future__ import annotations

import re
import threading

SEPARATOR = "#"  # not in a core handle (base64)


def join(unit: str, index: int, count: int) -> str:
    return f"{unit}{SEPARATOR}{index}:{count}"


# index:count, ASCII digits of a size int() reads (str.isdigit also takes "\u00b2", which int() refuses)
_PLACE = re.compile(r"(\d{1,9}):(\d{1,9})", re.ASCII)


def split(handle: str) -> tuple[str, int, int]:
    """(the unit's handle, the message's index in it, the unit's count): (handle, 0, 1) for a
    unit of one message, or for a handle whose place is not two numbers (the core then refuses
    it as a handle it did not sign)."""
    unit, sep, place = handle.rpartition(SEPARATOR)
    found = _PLACE.fullmatch(place) if sep else None
    if found is None or int(found[2]) == 0:
        return handle, 0, 1
    return unit, int(found[1]), int(found[2])


class InnerReceipts:
    """Acks of inner batch messages, gathered until their unit is whole."""

    def __init__(self):
        self._lock = threading.Lock()
        self._acked: dict[str, set[int]] = {}
        self._moved: dict[str, str] = {}  # an old unit handle -> the unit's handle after a change

    def current(self, unit: str) -> str:
        with self._lock:
            while unit in self._moved:
                unit = self._moved[unit]
            return unit

    def ack(self, unit: str, index: int, count: int) -> bool:
        """Record message ``index`` of ``unit`` (of ``count``) as acked; whether all now are."""
        with self._lock:
            acked = self._acked.setdefault(unit, set())
            acked.add(index)
            return len(acked) >= count

    def settled(self, unit: str) -> None:
        """The unit was acked in the core (or failed to be): forget it and its old names."""
        with self._lock:
            self._acked.pop(unit, None)
            for old in [old for old, new in self._moved.items() if new == unit]:
                del self._moved[old]

    def moved(self, old: str, new: str) -> None:
        with self._lock:
            self._moved[old] = new
            for previous in [p for p, target in self._moved.items() if target == old]:
                self._moved[previous] = new
            if old in self._acked:
                self._acked[new] = self._acked.pop(old)
