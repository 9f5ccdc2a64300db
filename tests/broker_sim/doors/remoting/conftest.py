"""Fixtures of the limits tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def stopped():
    """Brokers to stop at the end of the test."""
    brokers = []
    yield brokers
    for broker in brokers:
        broker.stop(grace=1.0)
