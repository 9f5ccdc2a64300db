"""What a transport can do beyond the calls every transport answers is declared on the seam
(``Transport``), never probed for; the native-write rule (through name servers: codec rmq and
no compression, no transactions) is one check of the transport, ``check_write``, which the
Producer asks when it is created and the remoting transport again at each send. No broker:
nothing here reaches one."""

import pytest

from rmq_spark import ConfigError, Message, TransportConfig
from rmq_spark.client.connect import connect, transport_type
from rmq_spark.client.grpc_transport import GrpcTransport
from rmq_spark.client.remoting import TRANSACTIONS_REFUSED, RemotingTransport
from rmq_spark.client.transport import InnerBatch, Send, Transport
from rmq_wire.codec import Codec, Compression

CAPABILITIES = ("native_rocketmq", "supports_transactions", "supports_half_messages", "write_form", "pull_group",
                "unique_keys")
ARROW_REFUSED = ("codec='arrow', compression='none': through name servers a batch is RocketMQ's MessageBatch, "
                 "uncompressed, which RocketMQ's brokers and clients read; use codec='rmq' and compression='none' "
                 "(the defaults)")


def test_capabilities_are_declared_on_the_seam():
    assert all(name in vars(Transport) for name in CAPABILITIES)
    assert (GrpcTransport.native_rocketmq, GrpcTransport.supports_transactions, GrpcTransport.supports_half_messages,
            GrpcTransport.write_form) == (False, True, False, None)
    assert (RemotingTransport.native_rocketmq, RemotingTransport.supports_transactions,
            RemotingTransport.supports_half_messages, RemotingTransport.write_form) == (
        True, False, True, (Codec.RMQ, Compression.NONE))
    assert (transport_type(name_server=False), transport_type(name_server=True)) == (
        GrpcTransport, RemotingTransport)


def test_the_native_write_rule_is_the_transports_with_the_sentences_users_see():
    assert RemotingTransport.refused_write_settings(Codec.ARROW, Compression.LZ4) == {"codec": "rmq",
                                                                                       "compression": "none"}
    assert RemotingTransport.refused_write_settings(Codec.RMQ, Compression.NONE) == {}
    assert GrpcTransport.refused_write_settings(Codec.ARROW, Compression.ZSTD) == {}
    GrpcTransport.check_write(Codec.ARROW, Compression.ZSTD, "tx-1")  # our door carries every write
    with pytest.raises(ConfigError) as refused:
        RemotingTransport.check_write(Codec.ARROW, Compression.NONE)
    assert str(refused.value) == ARROW_REFUSED
    with pytest.raises(ConfigError) as refused:
        RemotingTransport.check_write(Codec.RMQ, Compression.NONE, "tx-1")
    assert str(refused.value) == TRANSACTIONS_REFUSED


def test_the_remoting_transport_refuses_a_send_it_cannot_carry_before_reaching_a_broker():
    """The same check at each send: answered with the sentence, no route looked up (nothing
    listens at the name server named)."""
    transport = connect(name_server="127.0.0.1:1", config=TransportConfig(timeout_ms=1000, retries=0))
    answers = []
    try:
        transport.send_many([Send("t", 0, InnerBatch(b"", 1, Codec.ARROW, Compression.NONE)),
                             Send("t", 0, Message("t", b"x"), transaction_id="tx-1")],
                            1000, lambda outcomes, error: answers.append((outcomes, error)))
    finally:
        transport.close()
    [(outcomes, error)] = answers
    assert error is None and [type(o) for o in outcomes] == [ConfigError, ConfigError]
    assert [str(o) for o in outcomes] == [ARROW_REFUSED, TRANSACTIONS_REFUSED]


def test_a_pull_group_is_set_on_any_transport():
    """RangeReader names its pull group on whichever transport it has (our door's reads ignore it)."""
    transport = connect("127.0.0.1:1", TransportConfig(timeout_ms=1000, retries=0))
    try:
        assert transport.pull_group is None and transport.unique_keys is None
        transport.pull_group = "readers"
    finally:
        transport.close()
