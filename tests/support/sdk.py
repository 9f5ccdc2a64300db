"""Helpers of the tests that use the SDK as a client (tests/rmq_spark/ and the broker's)."""

import time

from rmq_spark import Admin, OffsetRange, RangeReader


def wait_indexed(endpoint, topic, messages, timeout_s=20.0):
    """Sends return once stored; reads see messages once the broker has indexed them."""
    deadline = time.monotonic() + timeout_s
    with Admin(endpoint) as admin:
        while sum(q.max_offset for q in admin.offsets([topic])[topic]) < messages:
            assert time.monotonic() < deadline, f"{topic}: {messages} messages not indexed in {timeout_s} s"
            time.sleep(0.005)


def bodies(sdk: dict, topic: str) -> list:
    """Every message body of ``topic``, each queue read from its min to its max offset, through
    the door ``sdk`` names (``{"endpoint": ...}`` or ``{"name_server": ...}``)."""
    with Admin(**sdk) as admin:
        ranges = [OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset, q.broker)
                  for q in admin.offsets([topic])[topic]]
    with RangeReader(**sdk) as reader:
        return reader.read_table(ranges).column("body").to_pylist()
