"""broker_sim.txn: transactions for exactly-once writers.

Batches sent under a transaction id are stored prepared, in a half log of their own
(half_log.py), invisible to every reader; a commit appends them to their queues as ordinary
records, a rollback or the timeout discards them; state and sink batches live in RocksDB
(state.py). The protocol and its crash safety are described in service.py. Imported by the core
(doors reach it through the core's face); imports the store, ``common`` and ``rmq_wire``.
"""

from broker_sim.txn.service import (
                      EndResult,
                      Outcome,
                      PreparedPuts,
                      TransactionConfig,
                      TransactionService,
)
from broker_sim.txn.state import SinkRecord, Transaction, TxnState

__all__ = ["EndResult", "Outcome", "PreparedPuts", "SinkRecord", "Transaction", "TransactionConfig",
           "TransactionService", "TxnState"]
