"""Helpers of the TLS tests (a module of its own: conftest modules are not importable)."""

from __future__ import annotations

import itertools
import time

from rmq_spark import Admin, Message, Producer, QueueOffsets, TransportConfig

_names = itertools.count()


def send(address: dict, config: TransportConfig, count: int) -> tuple[str, QueueOffsets]:
    """Create a topic of one queue and send it ``count`` messages m-0, m-1, ... over ``config``;
    the topic and its queue, once they are indexed (a send returns before its messages are)."""
    topic = f"tls-{next(_names)}"
    with Admin(**address, transport=config) as admin:
        admin.create_topic(topic, 1)
        with Producer(**address, transport=config) as producer:
            producer.send_batch([Message(topic, f"m-{i}".encode()) for i in range(count)])
        deadline = time.monotonic() + 10
        while (queue := admin.offsets([topic])[topic][0]).max_offset < count:
            assert time.monotonic() < deadline, f"{topic}: {count} messages not indexed in 10 s"
            time.sleep(0.01)
    return topic, queue
