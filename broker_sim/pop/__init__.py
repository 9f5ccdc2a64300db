"""broker_sim.pop: RocketMQ's pop consumption (RIP-73) with its state in RocksDB.

``PopService`` pops, acks, changes invisible times and revives, over the message store and a
``PopStateStore`` (``RocksDBState``); ``ReviveService`` runs the revives on an interval.
Knows nothing of gRPC.
"""

from .config import PopConfig
from .errors import GroupNotFound, InvalidPopRequest, InvalidReceiptHandle, PopError, ReceiptHandleExpired
from .receipt import ReceiptSigner
from .revive import ReviveService
from .service import AckFailure, AckStatus, PoppedUnit, PopResult, PopService, dlq_topic, retry_topic
from .state import PopCheckpoint, PopStateStore, RocksDBState

__all__ = [
    "AckFailure", "AckStatus", "GroupNotFound", "InvalidPopRequest", "InvalidReceiptHandle", "PopCheckpoint",
    "PoppedUnit", "PopConfig", "PopError", "PopResult", "PopService", "PopStateStore", "ReceiptHandleExpired",
    "ReceiptSigner", "ReviveService", "RocksDBState", "dlq_topic", "retry_topic",
]
