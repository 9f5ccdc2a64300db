"""broker_sim.doors.remoting: RocketMQ's remoting protocol (a broker and a name server on one TCP
port), a thin door over the broker core, so that RocketMQ's own clients and tools use broker_sim
unchanged."""

from broker_sim.doors.remoting.door import RemotingDoor, RemotingOptions

__all__ = ["RemotingDoor", "RemotingOptions"]
