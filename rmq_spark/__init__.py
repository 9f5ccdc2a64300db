"""rmq_spark: the client SDK of broker_sim and the PySpark data source 'rocketmq-batch'.

    from rmq_spark import Admin, Producer, Message, RangeReader, OffsetRange, PopConsumer

The names are imported on first use, so that importing a part of the package does not load the whole
SDK.
"""

import importlib

import rmq_wire  # noqa: F401  (first: it sets how gRPC treats fork() before grpc loads)

_HOMES = {
    "Admin": "client.admin",
    "TransportConfig": "client.transport",
    "check_endpoint": "client.transport",
    "check_name_server": "client.transport",
    "transport_type": "client.connect",
    "Transactions": "client.transactions",
    "new_transaction_id": "client.transactions",
    "deterministic_keys": "client.message_ids",
    "UniqueKeys": "client.message_ids",
    "RangeReader": "consumer",
    "PopConsumer": "consumer",
    "Delivery": "consumer",
    "normalize_tag_filter": "consumer.tag_filter",
    "Producer": "producer",
    "ProducerConfig": "producer",
    **{name: "structs" for name in (
        "BrokerInfo", "BrokerQueues", "BrokerStats", "CommitResult", "ConsumerConnection", "CorruptedRecord",
        "Credentials", "GroupInfo", "GroupOffset", "Message", "StoredMessage",
        "OffsetRange", "PreparedTransaction", "QueueOffsets", "QueueType", "ReceivedMessage", "SendResult",
        "SinkBatchStatus", "SinkInfo", "TopicInfo", "TransactionInfo",
        "TransactionOutcome", "TransactionState", "is_system_topic")},
    **{name: "errors" for name in (
        "AuthenticationError", "BrokerError", "BrokerUnavailableError", "BufferFullError", "ClosedError",
        "CodecError", "ConfigError",
        "CorruptedRecordError", "DataLossError", "DiskFailedError", "DiskFullError", "GroupBusyError",
        "GroupNotFoundError",
        "InvalidReceiptHandleError", "InvalidRequestError", "LimitExceededError", "MessageNotFoundError",
        "MessageTooLargeError",
        "OffsetOutOfRangeError", "PermissionDeniedError", "PropertiesTooLargeError", "QueueNotFoundError",
        "ReceiptHandleError", "ReceiptHandleExpiredError", "RequestTimeoutError", "ResultTimeoutError", "RmqError",
        "SendInProgressError", "TopicConflictError", "TopicNotFoundError", "TransactionIncompleteError",
        "TransactionNotFoundError", "TransactionStateError", "UndecodableBatchError", "WrongQueueTypeError")},
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rmq_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
