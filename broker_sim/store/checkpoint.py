"""The checkpoint: how far the commitlog and the indexes are known to be on disk."""

from __future__ import annotations

import json
import logging
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_sim.common.files import write_atomically

log = logging.getLogger(__name__)

_LAYOUT = struct.Struct(">IIqqq")  # magic, version, commitlog flushed, index flushed, time ms
_MAGIC = 0x524D5143  # "RMQC"
_VERSION = 1


@dataclass
class Checkpoint:
    commitlog_flushed_offset: int = 0  # every commitlog byte before this is on disk
    index_flushed_offset: int = 0  # every index unit of records before this is on disk
    updated_ms: int = 0

    @classmethod
    def load(cls, path: Path) -> "Checkpoint":
        """The saved checkpoint, or zeros (recover from the start) when missing or damaged."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls()
        if len(raw) != _LAYOUT.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack(">I", raw[-4:])[0]:
            log.warning("checkpoint %s is damaged; recovering from the start of the commitlog", path)
            return cls()
        magic, version, commitlog, index, updated = _LAYOUT.unpack(raw[:-4])
        if magic != _MAGIC or version != _VERSION:
            log.warning("checkpoint %s has an unknown format; recovering from the start", path)
            return cls()
        return cls(commitlog, index, updated)

    def save(self, path: Path) -> None:
        raw = _LAYOUT.pack(_MAGIC, _VERSION, self.commitlog_flushed_offset, self.index_flushed_offset, self.updated_ms)
        raw += struct.pack(">I", zlib.crc32(raw))
        write_atomically(path, raw)


def save_queue_table(path: Path, entries: list[tuple[str, int, int, int]]) -> None:
    """Save (topic, queue id, max offset, end of the last indexed record) per queue, as of a
    full index flush: recovery compares the indexes with it to find ones that lost units."""
    write_atomically(path, json.dumps({"queues": entries}, separators=(",", ":")).encode())


def load_queue_table(path: Path) -> list[tuple[str, int, int, int]]:
    try:
        return [tuple(entry) for entry in json.loads(path.read_text())["queues"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError):
        log.warning("queue table %s is damaged; index damage before the checkpoint goes undetected", path)
        return []
