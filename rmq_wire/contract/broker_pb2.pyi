from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueueType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUEUE_TYPE_UNSPECIFIED: _ClassVar[QueueType]
    SIMPLE_CQ: _ClassVar[QueueType]
    BATCH_CQ: _ClassVar[QueueType]

class Codec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODEC_UNSPECIFIED: _ClassVar[Codec]
    CODEC_RMQ: _ClassVar[Codec]
    CODEC_ARROW: _ClassVar[Codec]

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[Compression]
    COMPRESSION_LZ4: _ClassVar[Compression]
    COMPRESSION_ZSTD: _ClassVar[Compression]
    COMPRESSION_ZLIB: _ClassVar[Compression]

class RangeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANGE_STATUS_UNSPECIFIED: _ClassVar[RangeStatus]
    FOUND: _ClassVar[RangeStatus]
    NO_MESSAGE: _ClassVar[RangeStatus]
    OFFSET_TOO_SMALL: _ClassVar[RangeStatus]
    OFFSET_OVERFLOW: _ClassVar[RangeStatus]
    BUDGET_EXHAUSTED: _ClassVar[RangeStatus]
    RECORD_CORRUPTED: _ClassVar[RangeStatus]
QUEUE_TYPE_UNSPECIFIED: QueueType
SIMPLE_CQ: QueueType
BATCH_CQ: QueueType
CODEC_UNSPECIFIED: Codec
CODEC_RMQ: Codec
CODEC_ARROW: Codec
COMPRESSION_NONE: Compression
COMPRESSION_LZ4: Compression
COMPRESSION_ZSTD: Compression
COMPRESSION_ZLIB: Compression
RANGE_STATUS_UNSPECIFIED: RangeStatus
FOUND: RangeStatus
NO_MESSAGE: RangeStatus
OFFSET_TOO_SMALL: RangeStatus
OFFSET_OVERFLOW: RangeStatus
BUDGET_EXHAUSTED: RangeStatus
RECORD_CORRUPTED: RangeStatus

class Topic(_message.Message):
    __slots__ = ("name", "queue_count", "queue_type", "perm")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_count: int
    queue_type: QueueType
    perm: int
    def __init__(self, name: _Optional[str] = ..., queue_count: _Optional[int] = ..., queue_type: _Optional[_Union[QueueType, str]] = ..., perm: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic", "created")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    created: bool
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., created: bool = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class DescribeTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DescribeTopicResponse(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "queue_count", "perm")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue_count: int
    perm: int
    def __init__(self, name: _Optional[str] = ..., queue_count: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: Topic
    def __init__(self, topic: _Optional[_Union[Topic, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[Topic]
    def __init__(self, topics: _Optional[_Iterable[_Union[Topic, _Mapping]]] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class TopicOffsets(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class GetOffsetsRequest(_message.Message):
    __slots__ = ("topics", "max_queues", "page_token", "known", "wait_ms")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    max_queues: int
    page_token: str
    known: _containers.RepeatedCompositeFieldContainer[TopicOffsets]
    wait_ms: int
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., max_queues: _Optional[int] = ..., page_token: _Optional[str] = ..., known: _Optional[_Iterable[_Union[TopicOffsets, _Mapping]]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class GetOffsetsResponse(_message.Message):
    __slots__ = ("topics", "next_page_token")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicOffsets]
    next_page_token: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicOffsets, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class OffsetForTimestampRequest(_message.Message):
    __slots__ = ("topic", "queue_ids", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_ids: _Optional[_Iterable[int]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetForTimestampResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue_id", "offset")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    offset: int
    def __init__(self, queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class BrokerStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatsResponse(_message.Message):
    __slots__ = ("topics", "queues", "commitlog_min_offset", "commitlog_max_offset", "commitlog_flushed_offset", "dispatched_offset", "dispatch_lag_bytes", "messages_put", "messages_read", "resident_memory_bytes", "data_dir", "flush_mode", "dispatch_lag_ms", "corrupted_records", "corrupted", "disk_failure", "broker_name")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_PUT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_READ_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    CORRUPTED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    CORRUPTED_FIELD_NUMBER: _ClassVar[int]
    DISK_FAILURE_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    topics: int
    queues: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    dispatched_offset: int
    dispatch_lag_bytes: int
    messages_put: int
    messages_read: int
    resident_memory_bytes: int
    data_dir: str
    flush_mode: str
    dispatch_lag_ms: int
    corrupted_records: int
    corrupted: _containers.RepeatedCompositeFieldContainer[CorruptedRecord]
    disk_failure: str
    broker_name: str
    def __init__(self, topics: _Optional[int] = ..., queues: _Optional[int] = ..., commitlog_min_offset: _Optional[int] = ..., commitlog_max_offset: _Optional[int] = ..., commitlog_flushed_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., dispatch_lag_bytes: _Optional[int] = ..., messages_put: _Optional[int] = ..., messages_read: _Optional[int] = ..., resident_memory_bytes: _Optional[int] = ..., data_dir: _Optional[str] = ..., flush_mode: _Optional[str] = ..., dispatch_lag_ms: _Optional[int] = ..., corrupted_records: _Optional[int] = ..., corrupted: _Optional[_Iterable[_Union[CorruptedRecord, _Mapping]]] = ..., disk_failure: _Optional[str] = ..., broker_name: _Optional[str] = ...) -> None: ...

class CorruptedRecord(_message.Message):
    __slots__ = ("commitlog_offset", "size", "topic", "queue_id", "first_offset", "end_offset", "reason", "found_by")
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FOUND_BY_FIELD_NUMBER: _ClassVar[int]
    commitlog_offset: int
    size: int
    topic: str
    queue_id: int
    first_offset: int
    end_offset: int
    reason: str
    found_by: str
    def __init__(self, commitlog_offset: _Optional[int] = ..., size: _Optional[int] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., reason: _Optional[str] = ..., found_by: _Optional[str] = ...) -> None: ...

class SingleMessage(_message.Message):
    __slots__ = ("body", "properties", "tags", "keys", "flag")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    properties: _containers.ScalarMap[str, str]
    tags: str
    keys: str
    flag: int
    def __init__(self, body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., flag: _Optional[int] = ...) -> None: ...

class EarlyBatch(_message.Message):
    __slots__ = ("payload", "count")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    count: int
    def __init__(self, payload: _Optional[bytes] = ..., count: _Optional[int] = ...) -> None: ...

class InnerBatch(_message.Message):
    __slots__ = ("payload", "count", "codec", "compression", "tags", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    count: int
    codec: Codec
    compression: Compression
    tags: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, payload: _Optional[bytes] = ..., count: _Optional[int] = ..., codec: _Optional[_Union[Codec, str]] = ..., compression: _Optional[_Union[Compression, str]] = ..., tags: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "born_timestamp_ms", "single", "early_batch", "inner_batch", "producer_id", "sequence", "transaction_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SINGLE_FIELD_NUMBER: _ClassVar[int]
    EARLY_BATCH_FIELD_NUMBER: _ClassVar[int]
    INNER_BATCH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    born_timestamp_ms: int
    single: SingleMessage
    early_batch: EarlyBatch
    inner_batch: InnerBatch
    producer_id: str
    sequence: int
    transaction_id: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ..., single: _Optional[_Union[SingleMessage, _Mapping]] = ..., early_batch: _Optional[_Union[EarlyBatch, _Mapping]] = ..., inner_batch: _Optional[_Union[InnerBatch, _Mapping]] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., transaction_id: _Optional[str] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("queue_id", "base_offset", "count", "message_ids", "store_timestamp_ms", "duplicate", "batch_message_id")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    base_offset: int
    count: int
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    store_timestamp_ms: int
    duplicate: bool
    batch_message_id: str
    def __init__(self, queue_id: _Optional[int] = ..., base_offset: _Optional[int] = ..., count: _Optional[int] = ..., message_ids: _Optional[_Iterable[str]] = ..., store_timestamp_ms: _Optional[int] = ..., duplicate: bool = ..., batch_message_id: _Optional[str] = ...) -> None: ...

class SendManyRequest(_message.Message):
    __slots__ = ("sends",)
    SENDS_FIELD_NUMBER: _ClassVar[int]
    sends: _containers.RepeatedCompositeFieldContainer[SendRequest]
    def __init__(self, sends: _Optional[_Iterable[_Union[SendRequest, _Mapping]]] = ...) -> None: ...

class SendOutcome(_message.Message):
    __slots__ = ("response", "reason", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: SendResponse
    reason: str
    error: str
    def __init__(self, response: _Optional[_Union[SendResponse, _Mapping]] = ..., reason: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class SendManyResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[SendOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[SendOutcome, _Mapping]]] = ...) -> None: ...

class ReadRange(_message.Message):
    __slots__ = ("topic", "queue_id", "start_offset", "end_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    start_offset: int
    end_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class ReadRangesRequest(_message.Message):
    __slots__ = ("ranges", "max_bytes", "tag_filter")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAG_FILTER_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[ReadRange]
    max_bytes: int
    tag_filter: str
    def __init__(self, ranges: _Optional[_Iterable[_Union[ReadRange, _Mapping]]] = ..., max_bytes: _Optional[int] = ..., tag_filter: _Optional[str] = ...) -> None: ...

class ReadRangesResponse(_message.Message):
    __slots__ = ("range_index", "records", "record_count", "done", "status", "next_offset", "min_offset", "max_offset", "corrupted_from", "detail")
    RANGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CORRUPTED_FROM_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    range_index: int
    records: bytes
    record_count: int
    done: bool
    status: RangeStatus
    next_offset: int
    min_offset: int
    max_offset: int
    corrupted_from: int
    detail: str
    def __init__(self, range_index: _Optional[int] = ..., records: _Optional[bytes] = ..., record_count: _Optional[int] = ..., done: bool = ..., status: _Optional[_Union[RangeStatus, str]] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., corrupted_from: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class GroupOffset(_message.Message):
    __slots__ = ("topic", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group", "offsets")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    group: str
    offsets: _containers.RepeatedCompositeFieldContainer[GroupOffset]
    def __init__(self, group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[GroupOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryOffsetsRequest(_message.Message):
    __slots__ = ("group", "topics")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class QueryOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[GroupOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[GroupOffset, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ConsumerGroup(_message.Message):
    __slots__ = ("name", "consumers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    consumers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., consumers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[ConsumerGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[ConsumerGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: bool = ...) -> None: ...

class QueryMessagesRequest(_message.Message):
    __slots__ = ("topic", "key", "unique_key", "begin_ms", "end_ms", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    unique_key: bool
    begin_ms: int
    end_ms: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., unique_key: bool = ..., begin_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class QueryMessagesResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    def __init__(self, records: _Optional[bytes] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("commitlog_offset",)
    COMMITLOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    commitlog_offset: int
    def __init__(self, commitlog_offset: _Optional[int] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    def __init__(self, record: _Optional[bytes] = ...) -> None: ...
