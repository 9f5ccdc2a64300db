"""Damaged records: refusing to serve them, and remembering them.

Every record the store hands out is checked against the index unit that pointed to it
(length, position, topic, queue, offsets, message count) and, once per record since the
store opened, against its CRCs (``VerifiedRecords``). A damaged record is never served: the
read names its topic, queue and offsets instead, and the record is added to the
``CorruptionReport``, a small file that keeps what recovery and reads found until the data
is gone.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from broker_sim.common.files import write_atomically
from rmq_wire import record as fmt

log = logging.getLogger(__name__)

_INNER_NUM_KEY = fmt.PROPERTY_INNER_NUM.encode()
# TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG: what tells a record apart.
_IDENTITY = struct.Struct(">iI4xi4xqqi")
_BODY_LEN = struct.Struct(">i")
_REPORT_LIMIT = 1000  # records kept in the report; the oldest go first


@dataclass(frozen=True)
class CorruptedRecord:
    """A damaged record of the commitlog: ``size`` bytes from ``commitlog_offset``. The topic,
    queue and offsets (``first_offset`` .. ``end_offset - 1``) are those of its index unit or
    of its header where that is intact, "" / -1 where neither can tell."""

    commitlog_offset: int
    size: int
    reason: str
    found_by: str  # "recovery" or "read"
    topic: str = ""
    queue_id: int = -1
    first_offset: int = -1
    end_offset: int = -1

    def where(self) -> str:
        at = f"commitlog offset {self.commitlog_offset} ({self.size} bytes)"
        if not self.topic:
            return f"the record at {at}, whose topic and queue its damaged header does not tell"
        return f"topic {self.topic!r} queue {self.queue_id} offsets {self.first_offset} to {self.end_offset - 1}, {at}"


class CorruptionReport:
    """The damaged records found so far, saved in ``path`` (JSON) as they are found."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._records: dict[int, CorruptedRecord] = {}
        try:
            for entry in json.loads(path.read_text())["records"]:
                record = CorruptedRecord(**entry)
                self._records[record.commitlog_offset] = record
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError):
            log.error("corruption report %s is damaged; damaged records found before are no longer listed", path)

    def all(self) -> list[CorruptedRecord]:
        with self._lock:
            return sorted(self._records.values(), key=lambda r: r.commitlog_offset)

    def add(self, record: CorruptedRecord) -> bool:
        """Remember ``record`` (logged at ERROR); False when it was known already."""
        with self._lock:
            known = self._records.get(record.commitlog_offset)
            if known is not None and (known.topic or not record.topic):
                return False
            self._records[record.commitlog_offset] = record
            while len(self._records) > _REPORT_LIMIT:
                del self._records[min(self._records)]
            self._save()
        log.error("damaged record kept, never served: %s: %s (found by %s)", record.where(), record.reason,
                  record.found_by, extra={"topic": record.topic or None, "queue": record.queue_id if record.topic
                                          else None, "commitlog_offset": record.commitlog_offset})
        return True

    def forget_below(self, offset: int) -> None:
        """Forget the records before commitlog ``offset``: their data is gone."""
        with self._lock:
            gone = [key for key in self._records if key < offset]
            for key in gone:
                del self._records[key]
            if gone:
                self._save()

    def _save(self) -> None:
        records = [dataclasses.asdict(r) for r in self._records.values()]
        write_atomically(self.path, json.dumps({"records": records}).encode())


class VerifiedRecords:
    """Which records' CRCs need no check on read: those recovery scanned or that were
    appended since the store opened (from ``trusted_from`` on; the store made their CRCs),
    and older ones once a read checked them (a bit per 64 bytes of log: no two records start
    in one slot, every record being longer). ``damaged`` positions are always checked."""

    _SLOT_SHIFT = 6
    _CHUNK_SHIFT = 30  # a bitmap of 2 MiB per GiB of log read

    def __init__(self, trusted_from: int, damaged: dict[int, int]):
        self.trusted_from = trusted_from
        self.damaged = damaged
        self._bits: dict[int, bytearray] = {}

    def needs_check(self, position: int) -> bool:
        if position >= self.trusted_from:
            return position in self.damaged
        bits = self._bits.get(position >> self._CHUNK_SHIFT)
        slot = (position & ((1 << self._CHUNK_SHIFT) - 1)) >> self._SLOT_SHIFT
        return bits is None or not bits[slot >> 3] & (1 << (slot & 7))

    def checked(self, position: int) -> None:
        bits = self._bits.get(position >> self._CHUNK_SHIFT)
        if bits is None:
            bits = self._bits.setdefault(position >> self._CHUNK_SHIFT,
                                         bytearray(1 << (self._CHUNK_SHIFT - self._SLOT_SHIFT - 3)))
        slot = (position & ((1 << self._CHUNK_SHIFT) - 1)) >> self._SLOT_SHIFT
        bits[slot >> 3] |= 1 << (slot & 7)


def record_problem(view, unit, topic: bytes, queue_id: int, check_crc: bool) -> str | None:
    """Why the stored record ``view`` (``unit.size`` bytes at ``unit.physical_offset``) may not
    be served as ``unit`` of ``topic`` (UTF-8) queue ``queue_id``, or None when it may. Runs
    for every record read: only the fields that tell a record apart are decoded."""
    size = unit.size
    if len(view) < size or size < fmt.FIXED_BYTES + fmt.CRC_RESERVED_BYTES:
        return f"the index unit gives a size of {size} bytes, which holds no record"
    total, magic, record_queue, record_offset, physical, sys_flag = _IDENTITY.unpack_from(view)
    if magic != fmt.MAGIC_V1 or total != size or physical != unit.physical_offset:
        return "the index unit points at no record of that size (the record's header or the unit is damaged)"
    if check_crc:
        check, _size, reason = fmt.check_record(view, 0, size)
        if check is not fmt.Check.OK:
            return reason
    topic_at = fmt.HEADER.size + _BODY_LEN.unpack_from(view, fmt.BODYLEN_AT)[0]
    if not fmt.HEADER.size <= topic_at <= size - 3:
        return "its body length does not fit the record"
    topic_len = view[topic_at]
    count = 1
    if sys_flag & fmt.SysFlag.INNER_BATCH:
        found = fmt.find_property(bytes(view[topic_at + 3 + topic_len : size]), _INNER_NUM_KEY)
        count = int(found) if found and found.isdigit() else -1
    if (topic_len != len(topic) or view[topic_at + 1 : topic_at + 1 + topic_len] != topic or record_queue != queue_id
            or record_offset != unit.base_offset or count != unit.count):
        record_topic = bytes(view[topic_at + 1 : topic_at + 1 + topic_len]).decode(errors="replace")
        return (f"the index unit points at a record of topic {record_topic!r} queue {record_queue} offsets "
                f"{record_offset} to {record_offset + count - 1}")
    return None
