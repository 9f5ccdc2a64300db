"""Idempotent sends: each producer's recent sequences and what storing them returned.

A producer stamps every send with its id and a sequence number. The store records the
stamp in the send's first commitlog record (the ``__PRODUCER#`` property, "id:sequence:records",
records being how many records the send wrote: more than one for an early batch) and
keeps the answer here; a send with a stamp already stored gets that answer back instead of
being stored again. The table is rebuilt at open from the stamps in the log that recovery
scans (at least a whole segment before the checkpoint), so a retry after a broker restart is
recognised too.

The window is bounded: ``sequences_per_producer`` recent sequences of each of the
``max_producers`` most recently seen producers. A send older than its producer's window (a
retry that waited for thousands of the producer's later sends) is stored again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker_sim.store.errors import echo
from broker_sim.store.status import PutResult, PutStatus
from rmq_wire import record as fmt

PRODUCER_KEY = fmt.PROPERTY_PRODUCER.encode() + fmt.NAME_VALUE_SEPARATOR
_IN_FLIGHT = object()  # the first send of a stamp is being stored


def stamp_property(producer_id: str, sequence: int, records: int) -> bytes:
    """The encoded property that carries a send's stamp in its first record."""
    return PRODUCER_KEY + f"{producer_id}:{sequence}:{records}".encode() + fmt.PROPERTY_SEPARATOR


def stamp_problem(producer_id: str, sequence: int) -> str | None:
    if not producer_id or len(producer_id) > 64 or not producer_id.isascii() or ":" in producer_id \
            or any(c in producer_id for c in "\x01\x02"):
        return (f"producer id {echo(producer_id)}: use 1 to 64 ASCII characters without ':' "
                "(the SDK uses a random hex id)")
    if sequence < 0:
        return f"sequence {sequence}: use a number >= 0, increasing per send of the producer"
    return None


class ProducerState:
    def __init__(self, sequences_per_producer: int = 4096, max_producers: int = 10_000):
        self.sequences_per_producer = sequences_per_producer
        self.max_producers = max_producers
        self._producers: OrderedDict[str, OrderedDict[int, object]] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, producer_id: str, sequence: int) -> PutResult | None:
        """Claim a stamp before storing its send. None: go on and store it, then call
        ``end``; otherwise the answer to give instead (the stored one, marked duplicate, or
        SEND_IN_PROGRESS while the first send of the stamp is still being stored)."""
        with self._lock:
            sequences = self._sequences(producer_id)
            known = sequences.get(sequence)
            if known is _IN_FLIGHT:
                return PutResult(PutStatus.SEND_IN_PROGRESS, f"the send {producer_id}:{sequence} is being "
                                 "stored by an earlier attempt; retry shortly to get its answer")
            if known is not None:
                return known
            sequences[sequence] = _IN_FLIGHT
            self._trim(sequences)
            return None

    def end(self, producer_id: str, sequence: int, result: PutResult) -> None:
        """Record the answer of a claimed stamp (or of one found in the log at open); a failed
        send releases the claim."""
        with self._lock:
            sequences = self._sequences(producer_id)
            if result.ok:
                sequences[sequence] = _as_duplicate(result)
            else:
                sequences.pop(sequence, None)

    def _sequences(self, producer_id: str) -> OrderedDict:
        sequences = self._producers.get(producer_id)
        if sequences is None:
            sequences = self._producers[producer_id] = OrderedDict()
            if len(self._producers) > self.max_producers:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer_id)
        return sequences

    def _trim(self, sequences: OrderedDict) -> None:
        while len(sequences) > self.sequences_per_producer:
            sequences.popitem(last=False)


def _as_duplicate(result: PutResult) -> PutResult:
    return PutResult(PutStatus.PUT_OK, "", result.queue_id, result.queue_offset, result.count,
                     result.physical_offsets, result.store_timestamp, duplicate=True)


class StampCollector:
    """Finds stamps in records scanned at open and rebuilds their answers. An early batch's
    stamp is in its first record; its other records follow it in the log. ``incomplete_at``:
    where a stamped send that the log's end cut short starts (recovery cuts it off whole)."""

    def __init__(self, state: ProducerState):
        self.state = state
        self._open = None  # [producer_id, sequence, first record fields, physical offsets, records left]
        self.found = 0

    def visit(self, buf, pos: int, physical_offset: int) -> None:
        if self._open is not None:
            self._continue(physical_offset)
            return
        total = fmt.HEADER.unpack_from(buf, pos)[0]
        at = buf.find(PRODUCER_KEY, pos + fmt.HEADER.size, pos + total)
        if at < 0:
            return
        record = fmt.decode_record(buf, pos)
        producer_id, sequence, records = (record.properties.get(fmt.PROPERTY_PRODUCER, "").split(":") + ["", ""])[:3]
        if not (producer_id and sequence.isdigit() and records.isdigit() and int(records) >= 1):
            return  # not a stamp of this store's making; nothing to rebuild
        self._open = [producer_id, int(sequence), record, [physical_offset], int(records) - 1]
        self._continue(None)

    def _continue(self, physical_offset: int | None) -> None:
        producer_id, sequence, first, offsets, left = self._open
        if physical_offset is not None:
            offsets.append(physical_offset)
            left -= 1
            self._open[4] = left
        if left > 0:
            return
        count = first.inner_count if len(offsets) == 1 else len(offsets)
        self.state.end(producer_id, sequence, PutResult(
            PutStatus.PUT_OK, "", first.queue_id, first.queue_offset, count, tuple(offsets), first.store_timestamp))
        self._open = None
        self.found += 1

    @property
    def incomplete_at(self) -> int | None:
        return None if self._open is None else self._open[3][0]
