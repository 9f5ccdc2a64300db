import pytest

from txn_helpers import start_broker


@pytest.fixture
def broker(tmp_path, clock):
    """A real Broker on 127.0.0.1 with the transaction clock injected; stopped at the end."""
    broker = start_broker(tmp_path / "data", clock)
    yield broker
    broker.stop(grace=1.0)


_names = iter(range(1_000_000))


@pytest.fixture
def topic(broker):
    """A fresh BatchCQ topic of 4 queues."""
    from rmq_spark import Admin

    name = f"t{next(_names)}"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(name, 4, "BatchCQ")
    return name
