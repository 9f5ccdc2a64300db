import pytest

from pop_helpers import Clock, Node


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def node(tmp_path, clock):
    node = Node(tmp_path / "data", clock)
    yield node
    node.close()
