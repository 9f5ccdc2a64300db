"""broker_sim.core: the broker's one domain object (``BrokerCore``) behind every front door.

Doors translate their protocol into core calls and ``BrokerError``s (a ``Reason`` and a
sentence) into their protocol's statuses; RocketMQ's logic lives here and below."""

from .checks import OpenTransaction, TransactionChecks
from .core import BrokerCore, BrokerStats, CallGate, CoreOptions, Counters, QueueOffsets, parse_tag_filter
from .errors import BrokerError, Reason
from .reads import OffsetRange, RangeCursor, RangeStatus, ReadBudget
from .sends import EarlyBatchSend, InnerBatchSend, SendOutcome, SendRequest, SingleSend

__all__ = [
    "BrokerCore", "BrokerError", "BrokerStats", "CallGate", "CoreOptions", "Counters", "EarlyBatchSend",
    "InnerBatchSend", "OffsetRange", "OpenTransaction", "QueueOffsets", "RangeCursor", "RangeStatus", "ReadBudget",
    "Reason", "SendOutcome", "SendRequest", "SingleSend", "TransactionChecks", "parse_tag_filter",
]
