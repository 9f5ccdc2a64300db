from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_ACTION_UNSPECIFIED: _ClassVar[TransactionAction]
    TXN_COMMIT: _ClassVar[TransactionAction]
    TXN_ROLLBACK: _ClassVar[TransactionAction]

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_STATE_UNSPECIFIED: _ClassVar[TransactionState]
    TXN_OPEN: _ClassVar[TransactionState]
    TXN_COMMITTING: _ClassVar[TransactionState]
    TXN_COMMITTED: _ClassVar[TransactionState]
    TXN_ROLLED_BACK: _ClassVar[TransactionState]
TRANSACTION_ACTION_UNSPECIFIED: TransactionAction
TXN_COMMIT: TransactionAction
TXN_ROLLBACK: TransactionAction
TRANSACTION_STATE_UNSPECIFIED: TransactionState
TXN_OPEN: TransactionState
TXN_COMMITTING: TransactionState
TXN_COMMITTED: TransactionState
TXN_ROLLED_BACK: TransactionState

class TransactionRef(_message.Message):
    __slots__ = ("id", "message_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    message_count: int
    def __init__(self, id: _Optional[str] = ..., message_count: _Optional[int] = ...) -> None: ...

class SinkBatch(_message.Message):
    __slots__ = ("sink_id", "batch_id")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    batch_id: int
    def __init__(self, sink_id: _Optional[str] = ..., batch_id: _Optional[int] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("action", "transactions", "sink_batch")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    SINK_BATCH_FIELD_NUMBER: _ClassVar[int]
    action: TransactionAction
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionRef]
    sink_batch: SinkBatch
    def __init__(self, action: _Optional[_Union[TransactionAction, str]] = ..., transactions: _Optional[_Iterable[_Union[TransactionRef, _Mapping]]] = ..., sink_batch: _Optional[_Union[SinkBatch, _Mapping]] = ...) -> None: ...

class TransactionOutcome(_message.Message):
    __slots__ = ("id", "state", "changed", "batch_count", "message_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: TransactionState
    changed: bool
    batch_count: int
    message_count: int
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[TransactionState, str]] = ..., changed: bool = ..., batch_count: _Optional[int] = ..., message_count: _Optional[int] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("transactions", "sink_batch_replayed", "sink_batch_transaction_ids")
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    SINK_BATCH_REPLAYED_FIELD_NUMBER: _ClassVar[int]
    SINK_BATCH_TRANSACTION_IDS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionOutcome]
    sink_batch_replayed: bool
    sink_batch_transaction_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, transactions: _Optional[_Iterable[_Union[TransactionOutcome, _Mapping]]] = ..., sink_batch_replayed: bool = ..., sink_batch_transaction_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSinkBatchRequest(_message.Message):
    __slots__ = ("sink_id", "batch_id")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    batch_id: int
    def __init__(self, sink_id: _Optional[str] = ..., batch_id: _Optional[int] = ...) -> None: ...

class GetSinkBatchResponse(_message.Message):
    __slots__ = ("committed", "transaction_ids", "committed_ms", "latest_batch_id")
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    LATEST_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    committed: bool
    transaction_ids: _containers.RepeatedScalarFieldContainer[str]
    committed_ms: int
    latest_batch_id: int
    def __init__(self, committed: bool = ..., transaction_ids: _Optional[_Iterable[str]] = ..., committed_ms: _Optional[int] = ..., latest_batch_id: _Optional[int] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TransactionInfo(_message.Message):
    __slots__ = ("id", "state", "batch_count", "message_count", "created_ms", "last_prepared_ms", "expires_ms", "ended_ms", "expired")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_PREPARED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: TransactionState
    batch_count: int
    message_count: int
    created_ms: int
    last_prepared_ms: int
    expires_ms: int
    ended_ms: int
    expired: bool
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[TransactionState, str]] = ..., batch_count: _Optional[int] = ..., message_count: _Optional[int] = ..., created_ms: _Optional[int] = ..., last_prepared_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., expired: bool = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[TransactionInfo]
    def __init__(self, transactions: _Optional[_Iterable[_Union[TransactionInfo, _Mapping]]] = ...) -> None: ...

class SinkInfo(_message.Message):
    __slots__ = ("sink_id", "owner", "latest_batch_id", "batches_kept", "committed_ms")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LATEST_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_KEPT_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    owner: str
    latest_batch_id: int
    batches_kept: int
    committed_ms: int
    def __init__(self, sink_id: _Optional[str] = ..., owner: _Optional[str] = ..., latest_batch_id: _Optional[int] = ..., batches_kept: _Optional[int] = ..., committed_ms: _Optional[int] = ...) -> None: ...

class ListSinksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSinksResponse(_message.Message):
    __slots__ = ("sinks",)
    SINKS_FIELD_NUMBER: _ClassVar[int]
    sinks: _containers.RepeatedCompositeFieldContainer[SinkInfo]
    def __init__(self, sinks: _Optional[_Iterable[_Union[SinkInfo, _Mapping]]] = ...) -> None: ...

class ReleaseSinkRequest(_message.Message):
    __slots__ = ("sink_id",)
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    def __init__(self, sink_id: _Optional[str] = ...) -> None: ...

class ReleaseSinkResponse(_message.Message):
    __slots__ = ("released", "owner")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    released: bool
    owner: str
    def __init__(self, released: bool = ..., owner: _Optional[str] = ...) -> None: ...
