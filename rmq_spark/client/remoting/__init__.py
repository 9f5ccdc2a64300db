"""The SDK over RocketMQ's remoting protocol, to any RocketMQ 4.x / 5.x cluster reached through
its name servers (broker_sim's remoting door included): the one package of the SDK that knows
RocketMQ's request headers.

Routes come from the name servers, requests go to each broker's master on one connection per
broker, many in flight, and answers become the SDK's types. A topic's queues are (broker, queue
id). Reads are pulls by offset; writes are RocketMQ's own sends (a batch in RocketMQ's
MessageBatch encoding, which a BatchCQ topic stores as one inner batch); group offsets are
RocketMQ's consumer offsets, which its tools show. Transactions are RocketMQ's transactional
messages, one message at a time. Not here, because RocketMQ has no such thing: transactions that
end a writer's batches in one step with a fence against replays (the Spark sink builds exactly
once on the half messages: rmq_spark/spark/sink_rocketmq.py), and idempotent sends (a retried send
may be stored twice: sends are at least once, each message carrying the UNIQ_KEY its producer
gave it).

One module a subject:

- ``transport.py``: ``RemotingTransport``, the Transport the parts below make, each operation
  handed to its part;
- ``calls.py``: connections, requests in flight, waits, retries, each broker's version
  (``versions.py``);
- ``routes.py``: the name servers, topic routes, the route of a first send;
- ``topics.py``: creating, updating, deleting and listing topics;
- ``offsets.py``: queue offsets, the long poll past offsets known, offsets by time;
- ``groups.py``: consumer groups, their offsets, live consumers and connections, deleting one;
- ``cluster.py``: the cluster's brokers and a broker's runtime figures;
- ``messages.py``: stored messages found by key, by the id their producer gave, by offset id;
- ``sends.py``: sends of messages and batches;
- ``pulls.py``: range reads by pulls;
- ``pops.py``: pop, ack, invisible time, receipt handles;
- ``halves.py``: transactional (half) messages and the brokers' checks;
- ``refusals.py``: a broker's refusal as a typed error (``acl_refusals.py``: a real RocketMQ's ACL
  refusals in our words).
"""

from rmq_spark.client.remoting.transport import TRANSACTIONS_REFUSED, RemotingTransport

__all__ = ["RemotingTransport", "TRANSACTIONS_REFUSED"]
