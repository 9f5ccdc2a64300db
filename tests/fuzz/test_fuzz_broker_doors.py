"""A real broker (every door, a real data directory) given hostile input through each door:
random and mutated bytes as every gRPC method's request (our Admin, Messaging, Transactions
and Pop services, and RocketMQ 5's MessagingService), and random or mutated remoting frames
over TCP. Every call is answered (or refused) within a timeout; after each test the broker
still serves, the known messages read back byte-identical, memory stayed bounded, no thread
died and no internal error was logged (broker_watch.py)."""

import socket
import time

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_watch import CALL_SECONDS, SENDS_TOPIC, BrokerUnderFire
from rmq_wire.codec.records import decode_records
from rmq_wire.contract import broker_pb2 as pb
from rmq_wire.contract import pop_pb2, txn_pb2
from rmq_wire.remoting import FrameReader, RequestCode, decode, encode
from rmq_wire.rocketmq_v2 import messaging_pb2 as v2_pb2
from strategies import CODECS, COMPRESSIONS, batch_payloads, frames, mutated, remoting_commands, request_bytes
from support.budget import examples

SERVICES = [(pb, "Admin"), (pb, "Messaging"), (txn_pb2, "Transactions"), (pop_pb2, "Pop"),
            (v2_pb2, "MessagingService")]
METHODS = [(service, method) for module, name in SERVICES
           for service in [module.DESCRIPTOR.services_by_name[name]] for method in service.methods]
METHOD_BY_NAME = {f"{service.name}.{method.name}": method for service, method in METHODS}
# Calls that may wait for messages by design (long polling) until their deadline (GetOffsets: with known
# offsets and wait_ms).
LONG_POLLING = {"Pop", "ReceiveMessage", "PullMessage", "Telemetry", "GetOffsets"}
ESCAPED = {grpc.StatusCode.UNKNOWN}  # an exception a handler did not turn into a refusal


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    fire = BrokerUnderFire(tmp_path_factory.mktemp("fuzz-broker") / "data").start()
    yield fire
    fire.stop()


@pytest.fixture(autouse=True)
def still_intact(target):
    yield
    target.assert_intact()


@pytest.mark.parametrize("service, method", METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
@examples(25)
@given(data=st.data())
def test_any_request_bytes_are_answered_or_refused(target, service, method, data):
    request = data.draw(request_bytes(method.input_type))
    path = f"/{service.full_name}/{method.name}"
    code = _call(target.channel, path, method, request)
    assert code not in ESCAPED, f"{path} failed with {code}"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        assert method.name in LONG_POLLING, f"{path} did not answer within {CALL_SECONDS} s"


def _call(channel, path: str, method, request: bytes):
    timeout = 3.0 if method.name in LONG_POLLING else CALL_SECONDS
    try:
        if method.client_streaming:
            for _ in channel.stream_stream(path)(iter([request]), timeout=timeout):
                pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path)(request, timeout=timeout):
                pass
        else:
            channel.unary_unary(path)(request, timeout=timeout)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


_CODECS = {"rmq": pb.CODEC_RMQ, "arrow": pb.CODEC_ARROW}
_COMPRESSIONS = {"none": pb.COMPRESSION_NONE, "lz4": pb.COMPRESSION_LZ4, "zstd": pb.COMPRESSION_ZSTD,
                 "zlib": pb.COMPRESSION_ZLIB}


@examples(60)
@given(data=st.data())
def test_a_valid_send_mutated_is_refused_or_stored_as_readers_read_it(target, data):
    """What the broker's payload check lets in, the client's decoder reads: a stored batch that
    readers cannot decode would be data lost for every consumer."""
    codec, compression = data.draw(st.sampled_from(CODECS)), data.draw(st.sampled_from(COMPRESSIONS))
    payload, count = data.draw(batch_payloads(codec, compression))
    queue_id = data.draw(st.sampled_from([0, 1]))
    request = pb.SendRequest(topic=SENDS_TOPIC, queue_id=queue_id, inner_batch=pb.InnerBatch(
        payload=payload, count=count, codec=_CODECS[codec], compression=_COMPRESSIONS[compression]))
    sent = data.draw(mutated(request.SerializeToString()))
    send = METHOD_BY_NAME["Messaging.Send"]
    code = _call(target.channel, "/rmq_spark.protocol.v1.Messaging/Send", send, sent)
    assert code not in ESCAPED
    for queue in (0, 1):  # a mutated queue id may name the other queue
        stored = target.read(SENDS_TOPIC, queue)
        assert decode_records(stored, 0).num_rows >= 0  # raises CodecError if the broker stored what readers refuse


# --- the remoting door -----------------------------------------------------------------------

def _codes(target) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(target.remoting_codes), st.integers(-0x8000, 0x7FFF))


@examples(150)
@given(data=st.data())
def test_any_remoting_bytes_are_answered_or_end_the_connection(target, data):
    stream = data.draw(frames(_codes(target)))
    _answers(target, stream, data.draw(st.sampled_from([1, 7, 64, 4096])))


@examples(150)
@given(data=st.data())
def test_valid_remoting_requests_mutated_are_answered_or_refused(target, data):
    command = data.draw(remoting_commands(st.sampled_from(target.remoting_codes)))
    command.flag = 0
    stream = data.draw(mutated(encode(command)))
    _answers(target, stream, 4096)


def _answers(target, stream: bytes, piece: int) -> None:
    """Send ``stream`` in pieces, then end the sending side: every whole request frame that is
    not oneway is answered before the broker closes the connection, all within the timeout."""
    expected = _requests_in(stream)
    with socket.create_connection(target.remoting_address, timeout=CALL_SECONDS) as conn:
        try:
            for at in range(0, len(stream), piece):
                conn.sendall(stream[at:at + piece])
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            return  # the broker closed a connection it cannot read on: allowed
        answered = _read_answers(conn, expected)
    assert answered >= expected or expected < 0, f"{answered} answers to {expected} requests"


def _requests_in(stream: bytes) -> int:
    """How many answers the frames of ``stream`` call for (-1: the stream cannot be cut)."""
    try:
        found = FrameReader().feed(stream)
    except ValueError:
        return -1
    count = 0
    for frame in found:
        try:
            command = decode(frame)
        except ValueError:
            count += 1  # an unreadable header is answered too
            continue
        if not command.is_oneway and not command.is_response and command.code not in _WAITING:
            count += 1
    return count


_WAITING = {RequestCode.PULL_MESSAGE, RequestCode.POP_MESSAGE}  # may hold the request (long polling)


def _read_answers(conn: socket.socket, expected: int) -> int:
    reader, answered = FrameReader(), 0
    deadline = time.monotonic() + CALL_SECONDS
    while answered < max(expected, 0) or expected < 0:
        conn.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            break
        except OSError:
            break
        if not chunk:
            break
        answered += len(reader.feed(chunk))
    return answered
