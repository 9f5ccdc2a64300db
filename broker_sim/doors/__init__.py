"""broker_sim.doors: the broker's front doors, each a thin adapter of one protocol over the core.

- ``contract``: our gRPC contract (``rmq_wire.contract``), what the SDK speaks;
- ``rocketmq_v2``: RocketMQ 5's gRPC protocol (``apache.rocketmq.v2.MessagingService``), on the
  same gRPC port, for RocketMQ's official 5.x clients;
- ``remoting``: RocketMQ's remoting protocol (a name server and a broker on one TCP port), for
  RocketMQ's 4.x / 5.x remoting clients and tools;
- ``grpc_common``, ``grpc_acl``, ``grpc_limits``: what both gRPC doors share (refusals as gRPC
  statuses, ACL admission, the per-client limit of calls in flight); ``tls``: TLS for every door;
  ``hold``: requests that wait for messages, woken by the store's arrivals (suspended pulls,
  long-polling offsets); ``checks``: transactions RocketMQ's producers left open, checked back
  (both RocketMQ doors, with one ``CheckSettings``).

A door imports the core's face (``broker_sim.core``), ``broker_sim.acl`` and ``rmq_wire``; never
``store``, ``pop``, ``txn`` or ``schedule``, and never another door. Only the broker's assembly
(``broker_sim.broker``) imports the doors. ``make lint`` checks both (pyproject.toml).

The broker's name (RocketMQ's brokerName), in the routes of both RocketMQ doors, is one setting
of the broker's (``Broker(broker_name=...)``, ``--broker-name``), its default here.
"""

BROKER_NAME = "broker-a"  # RocketMQ's brokerName as its example broker.conf names the first broker
