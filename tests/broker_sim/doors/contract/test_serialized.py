"""Answers serialized by hand parse as the protobuf messages they stand for."""

from broker_sim.doors.contract.serialized import serializer, varint, with_bytes_field
from rmq_wire.contract import pop_pb2 as pb


def test_varint():
    assert [varint(v) for v in (0, 1, 127, 128, 300, 1 << 31)] == [
        b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02", b"\x80\x80\x80\x80\x08"]


def test_a_bytes_field_appended_by_hand_parses_as_set_by_protobuf():
    head = pb.PopResponse(receipt_handles=["a", "b"], topic="t", counts=[1, 3], invisible_until_ms=7)
    parts = [b"x" * 200, memoryview(b"yz"), b""]
    parsed = pb.PopResponse.FromString(with_bytes_field(head, 10, parts))
    expected = pb.PopResponse(receipt_handles=["a", "b"], topic="t", counts=[1, 3], invisible_until_ms=7,
                              records=b"x" * 200 + b"yz")
    assert parsed == expected
    assert with_bytes_field(head, 10, []) == head.SerializeToString()


def test_the_client_takes_the_records_as_a_view_of_what_it_received():
    from rmq_spark.client.grpc_transport import _parse_pop
    head = pb.PopResponse(receipt_handles=["a"], topic="t", counts=[1])
    data = with_bytes_field(head, 10, [b"r" * 300])
    response, records = _parse_pop(data)
    assert response == head and isinstance(records, memoryview) and records.obj is data
    assert bytes(records) == b"r" * 300
    response, records = _parse_pop(pb.PopResponse(topic="t", records=b"xy").SerializeToString())
    assert response.topic == "t" and bytes(records) == b"xy"  # any other writer's order


def test_the_serializer_passes_bytes_through():
    serialize = serializer(pb.AckResponse)
    assert serialize(b"raw") == b"raw"
    assert serialize(pb.AckResponse()) == b""
