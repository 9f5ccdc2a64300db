"""rmq_wire: what travels between the SDK and the broker, and how it is stored, for both products.

- ``record``: RocketMQ's CommitLog record (V1 magic) and its batch encoding, byte for byte;
- ``codec``: batch codecs (``rmq``, ``arrow``), compression, properties, stored records as Arrow;
- ``remoting``: RocketMQ's remoting protocol (frames, commands, codes, fastjson, a connection);
- ``signing``: RocketMQ's ACL signatures (remoting and gRPC);
- ``contract``, ``rocketmq_v2``: the generated gRPC code of our contract and of RocketMQ 5's
  (``make protos`` regenerates them from ``protos/``);
- ``types``, ``errors``: the types and the root of the error tree both products share.

Both ``broker_sim`` and ``rmq_spark`` import this package; it imports neither (``make lint``
checks the layers, see ``.importlinter``).
"""

import os

# gRPC's fork handlers (grpcio turns them on unless told otherwise, when grpc is imported) close and
# reopen its pollers around every fork(). A fork made while a channel is busy then breaks: the
# child's pipes are closed under it and the parent logs "epoll_wait error: Bad file descriptor".
# PySpark starts its JVM with such a fork (Popen with preexec_fn), so a SparkSession started after
# a Producer or an Admin failed with JAVA_GATEWAY_EXITED. Nothing here uses gRPC in a forked child.
# A user who sets the variable keeps their choice; it must be set before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
