"""Which transport reaches what the user names, and connecting it.

The one module that knows every transport: ``transport.py`` is the seam they build on and knows
none of them (an import-linter contract in pyproject.toml keeps it so). Admin, Producer,
Transactions and the readers connect here; the Spark sink's options ask ``transport_type`` what
a write through the address named may carry before any task connects.
"""

from __future__ import annotations

from rmq_spark.client.transport import Transport, TransportConfig, check_endpoint, check_name_server
from rmq_spark.errors import ConfigError


def transport_type(*, name_server: bool) -> type[Transport]:
    """The transport of broker_sim's own gRPC door (an endpoint), or of RocketMQ's remoting
    protocol (``name_server``: through name servers, to any RocketMQ cluster). Each is imported
    when first asked for, so that a program using one never loads the other's protocol."""
    if name_server:
        from rmq_spark.client.remoting import RemotingTransport

        return RemotingTransport
    from rmq_spark.client.grpc_transport import GrpcTransport

    return GrpcTransport


def connect(endpoint: str | None = None, config: TransportConfig | None = None, *,
            name_server: str | None = None) -> Transport:
    """The transport to what the user names: ``endpoint``, ``HOST:PORT`` of broker_sim's own
    gRPC door; or ``name_server``, RocketMQ's name server list (``HOST:PORT;HOST:PORT``), to
    any RocketMQ cluster through RocketMQ's remoting protocol. Exactly one of the two."""
    if (endpoint is None) == (name_server is None):
        raise ConfigError("name exactly one of endpoint (broker_sim's HOST:PORT) and name_server (RocketMQ's name "
                          "servers, HOST:PORT;HOST:PORT)" + ("" if endpoint is None else "; got both"))
    address = check_endpoint(endpoint) if name_server is None else check_name_server(name_server)
    return transport_type(name_server=name_server is not None)(address, config or TransportConfig())
