"""broker_sim.schedule: delayed messages (RocketMQ's delay levels and RocketMQ 5's delivery
times), held in a system topic until their time, then delivered to their topic. Imported by the
core; imports the store, ``common`` and ``rmq_wire``."""

from broker_sim.schedule.service import DELAY_LEVELS_MS, SCHEDULE_TOPIC, ScheduleService, delay_problem

__all__ = ["DELAY_LEVELS_MS", "SCHEDULE_TOPIC", "ScheduleService", "delay_problem"]
