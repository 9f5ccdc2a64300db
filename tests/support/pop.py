"""Helpers of the pop tests (the pop service's, tests/broker_sim/pop/, and PopConsumer's,
tests/rmq_spark/consumer/)."""

from broker_sim.pop import PopConfig, PopService, ReceiptSigner
from broker_sim.store import ConsumerOffsetTable, MessageStore, StoreConfig
from broker_sim.store.paths import StorePaths
from rmq_wire import record as fmt
from support.clock import ERA_MS, Clock

# Revives run only when a test calls them (its clock is stepped, not waited on).
CONFIG = PopConfig(revive_interval_ms=3_600_000)
CLOCK_START_MS = ERA_MS  # where the tests' clock (support.clock) starts


class Node:
    """A real store, offset table and pop service (RocksDB) on one data directory, reopenable."""

    def __init__(self, data_dir, clock: Clock, config: PopConfig = CONFIG):
        self.data_dir = data_dir
        self.clock = clock
        self.config = config
        self.open()

    def open(self, state=None):
        self.store = MessageStore(self.data_dir, StoreConfig(segment_bytes=16 << 20))
        self.offsets = ConsumerOffsetTable(StorePaths(self.data_dir).consumer_offsets, None)
        if state is None:
            self.pop = PopService.open(self.data_dir, self.store, self.offsets, self.config, now_ms=self.clock)
        else:
            signer = ReceiptSigner.from_file(StorePaths(self.data_dir).receipt_secret)
            self.pop = PopService(self.store, self.offsets, state, signer, self.config, now_ms=self.clock)

    def close(self):
        self.pop.close()
        self.offsets.close()
        self.store.close()

    def reopen(self, state=None):
        self.close()
        self.open(state)

    def put(self, topic, queue_id, body, tags=None, **kwargs):
        result = self.store.put_message(topic, queue_id, body, properties={"TAGS": tags} if tags else None, **kwargs)
        assert result.ok, result
        return result

    def indexed(self):
        assert self.store.wait_dispatched(10.0)


class Tags:
    """A tag filter as the broker's servicer makes one ("A || B")."""

    def __init__(self, *tags):
        self.codes = {fmt.java_string_hash(t) for t in tags}

    def matches(self, batch):
        return batch.tags_code in self.codes


def bodies(node, result) -> list[bytes]:
    """The bodies of a pop's single-message deliveries, in order."""
    out, at = [], 0
    for delivery in result.deliveries:
        record = fmt.decode_record(result.records[at:at + delivery.record_size])
        out.append(bytes(record.body))
        at += delivery.record_size
    return out


def handles(result) -> list[str]:
    return [d.receipt_handle for d in result.deliveries]
