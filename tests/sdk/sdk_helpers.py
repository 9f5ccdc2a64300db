"""Helpers of the SDK tests (a module of its own: conftest modules are not importable)."""

import time

from rmq_spark import Admin


def wait_indexed(endpoint, topic, messages, timeout_s=10.0):
    """Sends return once stored; reads see messages once the broker has indexed them."""
    deadline = time.monotonic() + timeout_s
    with Admin(endpoint) as admin:
        while sum(q.max_offset for q in admin.offsets([topic])[topic]) < messages:
            assert time.monotonic() < deadline, f"{topic}: {messages} messages not indexed in {timeout_s} s"
            time.sleep(0.005)
