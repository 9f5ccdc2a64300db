"""The gRPC transport's translations between our protocol and the SDK's types cover every value
of the protocol's enums, so that a status or codec added to the .proto fails here, not on a read."""

import pytest

from rmq_spark.client import grpc_transport
from rmq_spark.client.transport import ReadStatus
from rmq_spark.structs import QueueType, TransactionState
from rmq_wire.codec import Codec, Compression
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import txn_pb2


def named(enum, values) -> set[str]:
    return {enum.Name(value) for value in values}


def test_every_enum_value_of_the_protocol_has_an_sdk_value():
    assert named(pb.RangeStatus, grpc_transport._READ_STATUSES) == set(pb.RangeStatus.keys()) - {
        "RANGE_STATUS_UNSPECIFIED"}
    assert named(pb.QueueType, grpc_transport._FROM_PB_QUEUE_TYPE) == set(pb.QueueType.keys()) - {
        "QUEUE_TYPE_UNSPECIFIED"}
    assert named(pb.Codec, grpc_transport._CODECS.values()) == set(pb.Codec.keys()) - {"CODEC_UNSPECIFIED"}
    assert named(pb.Compression, grpc_transport._COMPRESSIONS.values()) == set(pb.Compression.keys())
    assert named(txn_pb2.TransactionState, grpc_transport._TXN_STATES) == set(txn_pb2.TransactionState.keys())


def test_every_sdk_value_has_a_protocol_value():
    assert set(grpc_transport._READ_STATUSES.values()) == set(ReadStatus)
    assert set(grpc_transport._QUEUE_TYPES) == set(QueueType)
    assert set(grpc_transport._CODECS) == set(Codec)
    assert set(grpc_transport._COMPRESSIONS) == set(Compression)
    assert set(grpc_transport._TXN_STATES.values()) == set(TransactionState)


def test_an_inner_batch_answer_gives_each_message_its_record_id_and_index():
    stored = grpc_transport._stored(pb.SendResponse(queue_id=2, base_offset=10, count=3, batch_message_id="AB"))
    assert list(stored.message_ids) == ["AB-0", "AB-1", "AB-2"] and stored.message_ids[-1] == "AB-2"
    assert stored.message_ids[1:] == ["AB-1", "AB-2"] and len(stored.message_ids) == 3
    with pytest.raises(IndexError, match="message 3 of an inner batch of 3"):
        stored.message_ids[3]
    single = grpc_transport._stored(pb.SendResponse(count=1, message_ids=["CD"]))
    assert list(single.message_ids) == ["CD"]
