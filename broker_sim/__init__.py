"""broker_sim: a local broker with RocketMQ's batch storage and consumption model.

    import broker_sim

    with broker_sim.embedded() as endpoint:    # "127.0.0.1:PORT", data in a temporary directory
        ...                                     # point clients at endpoint

The same broker runs as a process with `rmq-broker-sim --data-dir DIR --port PORT`.

The house, top to bottom (each layer imports only those below it; ``make lint`` checks it):

- ``cli``, ``broker``, ``broker_conf``: the command, the assembly of doors over one core, its
  configuration file;
- ``doors``: our gRPC contract, RocketMQ 5's gRPC protocol, RocketMQ's remoting protocol;
- ``acl``: accounts and permissions, asked by the doors;
- ``core``: ``BrokerCore``, the one domain object behind every door, and its face for them;
- ``pop``, ``txn``, ``schedule``: pop consumption, transactions, delayed messages;
- ``store``: the commitlog, its indexes and the dispatcher; ``common``: loops and files.

Beneath both this package and ``rmq_spark`` lies ``rmq_wire`` (record format, codecs, protocols).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import sys
import tempfile

import rmq_wire  # noqa: F401  (before grpc loads: it sets how gRPC treats fork(), see rmq_wire/__init__.py)

__all__ = ["embedded", "embedded_unless", "missing_dependencies"]

_DEFAULT = object()  # an argument left to the broker's own default

# The broker's own dependencies, the package's extra ``broker`` (the SDK and Spark's executors
# need none of them): module -> distribution.
_DEPENDENCIES = {"rocksdict": "rocksdict", "yaml": "pyyaml", "prometheus_client": "prometheus-client"}


def missing_dependencies() -> str | None:
    """The sentence for a Python that lacks the broker's dependencies, or None."""
    missing = [dist for module, dist in _DEPENDENCIES.items() if importlib.util.find_spec(module) is None]
    if not missing:
        return None
    return (f"broker_sim needs {', '.join(missing)} (the package's extra 'broker'), not installed in {sys.executable}: "
            "pip install 'rocketmq-batch-spark[broker]'")


@contextlib.contextmanager
def embedded(data_dir=None, *, pop=None, transactions=None, limits=None, auto_create_topics=_DEFAULT,
             **store_options):
    """Run a broker in this process on 127.0.0.1 and a free port; yields its endpoint
    "127.0.0.1:PORT" and stops it cleanly on exit.

    ``data_dir`` None: a temporary directory, removed afterwards. ``store_options`` are
    ``broker_sim.store.StoreConfig`` fields (``flush_mode="sync"``, ``segment_bytes=...``);
    ``pop`` a ``broker_sim.pop.PopConfig`` (``max_reconsume_times=...``), ``transactions`` a
    ``broker_sim.txn.TransactionConfig`` (``timeout_ms=...``), ``limits`` a
    ``broker_sim.core.limits.ClientLimits`` (``max_requests_in_flight_per_ip=...``),
    ``auto_create_topics`` a ``broker_sim.core.AutoCreateTopics`` (the queues and type of the topics
    a first send creates) or None (sends create no topic).
    """
    if missing_dependencies():
        raise ImportError(missing_dependencies())
    from broker_sim.broker import Broker  # grpc only for those who run a broker
    from broker_sim.store import StoreConfig

    config = StoreConfig(**store_options)
    temporary = tempfile.mkdtemp(prefix="rmq-broker-sim-") if data_dir is None else None
    try:
        more = {} if auto_create_topics is _DEFAULT else {"auto_create_topics": auto_create_topics}
        broker = Broker(temporary or data_dir, "127.0.0.1", 0, config, pop_config=pop, transaction_config=transactions,
                        limits=limits, **more)
        broker.start()
        try:
            yield broker.endpoint
        finally:
            broker.stop(grace=1.0)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


@contextlib.contextmanager
def embedded_unless(endpoint: str | None, **options):
    """Yield ``endpoint`` when one is given (a running broker), otherwise run an ``embedded``
    broker with ``options`` for the block: how the examples take ``--endpoint``."""
    if endpoint:
        yield endpoint
    else:
        with embedded(**options) as started:
            yield started
