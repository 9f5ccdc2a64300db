import pytest

from pop_helpers import CLOCK_START_MS, Node
from support.clock import Clock


@pytest.fixture
def clock():
    return Clock(CLOCK_START_MS)


@pytest.fixture
def node(tmp_path, clock):
    node = Node(tmp_path / "data", clock)
    yield node
    node.close()
