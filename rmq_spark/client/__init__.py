"""Talking to the broker: the transport seam (transport.py) and its gRPC implementation
(grpc_transport.py), Admin, and Transactions (ending the transactions producers prepared)."""
