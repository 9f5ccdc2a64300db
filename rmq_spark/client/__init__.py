"""Talking to the broker: the transport seam (transport.py) and its implementations over our gRPC
contract (grpc_transport.py) and RocketMQ's remoting protocol (remoting_transport.py, with routes
and pulls), Admin, and Transactions (ending the transactions producers prepared). Imported by the
producer, the consumers, the Spark connector and the CLI; imports ``structs``, ``errors`` and
``rmq_wire``."""
