"""broker_sim.core: the broker's one domain object (``BrokerCore``) behind every front door.

Doors translate their protocol into core calls and ``BrokerFault``s (a ``Reason`` and a
sentence) into their protocol's statuses; RocketMQ's logic lives here and below. This face is
all a door imports of the broker: never ``store``, ``pop``, ``txn`` or ``schedule`` (make lint)."""

from broker_sim.core.core import (
    AUTO_CREATE_TOPICS,
    AutoCreateTopics,
    BrokerCore,
    BrokerSnapshot,
    CallGate,
    CoreOptions,
    Counters,
    QueueOffsets,
    parse_tag_filter,
)
from broker_sim.core.errors import BrokerFault, Reason, refused
from broker_sim.core.reads import OffsetRange, RangeCursor, RangeStatus, ReadBudget
from broker_sim.core.sends import EarlyBatchSend, InnerBatchSend, SendOutcome, SendRequest, SingleSend
from broker_sim.pop import AckStatus, retry_topic
from broker_sim.store import PERM_READ, PERM_READ_WRITE, PERM_WRITE, ZERO_HOST, TopicConfig
from broker_sim.txn import TxnState

__all__ = [
    "AUTO_CREATE_TOPICS", "AutoCreateTopics", "BrokerCore", "BrokerFault", "BrokerSnapshot", "CallGate",
    "CoreOptions", "Counters", "EarlyBatchSend",
    "InnerBatchSend", "OffsetRange", "QueueOffsets", "RangeCursor", "RangeStatus", "ReadBudget",
    "Reason", "SendOutcome", "SendRequest", "SingleSend", "parse_tag_filter", "refused",
    # what the doors need of the parts below the core
    "ZERO_HOST", "AckStatus", "TopicConfig", "TxnState", "retry_topic",
    "PERM_READ", "PERM_WRITE", "PERM_READ_WRITE",  # a topic's permission, RocketMQ's PermName bits
]
