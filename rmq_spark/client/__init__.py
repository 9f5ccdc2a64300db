"""Talking to the broker: the transport seam (transport.py, which declares what a transport can
do and knows none of them), its two transports (grpc_transport.py, our own gRPC door; the
package remoting/, RocketMQ's remoting protocol through name servers, a module a subject),
connect.py (picks one for what the user names), Admin, and Transactions (ending the
transactions producers prepared). Imported by the producer, the consumers, the Spark connector
and the CLI; imports ``structs``, ``errors`` and ``rmq_wire``."""
