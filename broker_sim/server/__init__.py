"""broker_sim.server: the broker on the network. gRPC servicers that translate the wire
protocol (rmq_spark.protocol.v1) to store calls, the one error mapping (errors.py), the
Broker that runs them, and the `rmq-broker-sim` CLI (cli.py). The only broker package that
imports grpc or the protocol.

Names are imported on first use, so that the CLI can check its arguments (and configure
gRPC's logging) before grpc is loaded.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"Broker": ".broker", "BindError": ".broker", "Reason": ".errors", "REASON_KEY": ".errors"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
