from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_STATUS_UNSPECIFIED: _ClassVar[AckStatus]
    ACK_EXPIRED: _ClassVar[AckStatus]
    ACK_INVALID: _ClassVar[AckStatus]
ACK_STATUS_UNSPECIFIED: AckStatus
ACK_EXPIRED: AckStatus
ACK_INVALID: AckStatus

class PopRequest(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "max_messages", "invisible_time_ms", "poll_time_ms", "tag_filter", "orderly", "ack_receipt_handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    POLL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    ACK_RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    max_messages: int
    invisible_time_ms: int
    poll_time_ms: int
    tag_filter: str
    orderly: bool
    ack_receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., max_messages: _Optional[int] = ..., invisible_time_ms: _Optional[int] = ..., poll_time_ms: _Optional[int] = ..., tag_filter: _Optional[str] = ..., orderly: bool = ..., ack_receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class PopResponse(_message.Message):
    __slots__ = ("receipt_handles", "topic", "queue_ids", "offsets", "counts", "reconsume_times", "retry", "record_bytes", "invisible_until_ms", "records", "polling_full", "ack_failures")
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    RECORD_BYTES_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    POLLING_FULL_FIELD_NUMBER: _ClassVar[int]
    ACK_FAILURES_FIELD_NUMBER: _ClassVar[int]
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    reconsume_times: _containers.RepeatedScalarFieldContainer[int]
    retry: _containers.RepeatedScalarFieldContainer[bool]
    record_bytes: _containers.RepeatedScalarFieldContainer[int]
    invisible_until_ms: int
    records: bytes
    polling_full: bool
    ack_failures: _containers.RepeatedCompositeFieldContainer[AckFailure]
    def __init__(self, receipt_handles: _Optional[_Iterable[str]] = ..., topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ..., counts: _Optional[_Iterable[int]] = ..., reconsume_times: _Optional[_Iterable[int]] = ..., retry: _Optional[_Iterable[bool]] = ..., record_bytes: _Optional[_Iterable[int]] = ..., invisible_until_ms: _Optional[int] = ..., records: _Optional[bytes] = ..., polling_full: bool = ..., ack_failures: _Optional[_Iterable[_Union[AckFailure, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("group", "receipt_handles")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    group: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckFailure(_message.Message):
    __slots__ = ("index", "status", "detail")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    index: int
    status: AckStatus
    detail: str
    def __init__(self, index: _Optional[int] = ..., status: _Optional[_Union[AckStatus, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("failures",)
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    failures: _containers.RepeatedCompositeFieldContainer[AckFailure]
    def __init__(self, failures: _Optional[_Iterable[_Union[AckFailure, _Mapping]]] = ...) -> None: ...

class ChangeInvisibleDurationRequest(_message.Message):
    __slots__ = ("group", "receipt_handle", "invisible_time_ms")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    group: str
    receipt_handle: str
    invisible_time_ms: int
    def __init__(self, group: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_time_ms: _Optional[int] = ...) -> None: ...

class ChangeInvisibleDurationResponse(_message.Message):
    __slots__ = ("receipt_handle", "invisible_until_ms")
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    receipt_handle: str
    invisible_until_ms: int
    def __init__(self, receipt_handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...
