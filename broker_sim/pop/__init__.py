"""broker_sim.pop: RocketMQ's pop consumption (RIP-73) with its state in RocksDB.

``PopService`` pops, acks, changes invisible times and revives, over the message store and a
``PopStateStore`` (``RocksDBState``); ``ReviveService`` runs the revives on an interval.
Knows nothing of gRPC. Imported by the core (doors reach it through the core's face); imports
the store, ``common`` and ``rmq_wire``.
"""

from broker_sim.pop.config import PopConfig
from broker_sim.pop.errors import GroupNotFound, InvalidPopRequest, InvalidReceiptHandle, ReceiptHandleExpired
from broker_sim.pop.receipt import ReceiptSigner
from broker_sim.pop.revive import ReviveService
from broker_sim.pop.service import AckFailure, AckStatus, PoppedUnit, PopResult, PopService, dlq_topic, retry_topic
from broker_sim.pop.state import PopCheckpoint, PopStateStore, RocksDBState

__all__ = [
    "AckFailure", "AckStatus", "GroupNotFound", "InvalidPopRequest", "InvalidReceiptHandle", "PopCheckpoint",
    "PoppedUnit", "PopConfig", "PopResult", "PopService", "PopStateStore", "ReceiptHandleExpired",
    "ReceiptSigner", "ReviveService", "RocksDBState", "dlq_topic", "retry_topic",
]
