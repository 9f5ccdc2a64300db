"""RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService), served over the broker
core on the broker's gRPC port, beside our own contract: the official 5.x clients use
broker_sim with only their endpoint changed."""

from broker_sim.doors.rocketmq_v2.service import MessagingService

__all__ = ["MessagingService"]
