"""broker_sim: a local broker with RocketMQ's batch storage and consumption model."""
