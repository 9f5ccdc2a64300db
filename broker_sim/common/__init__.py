"""broker_sim.common: what every part of the broker runs on and nothing of RocketMQ's model:
``ServiceThread`` (every background loop; ``ServiceTask``, its twin on an asyncio event loop),
``files`` (atomic writes, fsync of a directory), ``faults`` (``BrokerFault``, the root of every
fault of the broker, and its ``Reason``), ``logs`` (the text and JSON formats of log lines,
``ThrottledLog`` for lines that may repeat at a high rate).
Imported by any part of the broker; imports nothing of it."""
