"""Our gRPC contract's door (``protos/rmq_wire/contract``): servicers that translate protobuf to
``BrokerCore`` calls and nothing more (``servicers``: topics, sends, reads, offsets;
``pop_servicer``; ``txn_servicer``), and answers serialized by hand where protobuf would copy
large payloads (``serialized``). Imported by the assembly (``broker_sim.broker``) only."""
