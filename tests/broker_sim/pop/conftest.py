"""The pop service's tests: a real store, offset table and pop service on the test's data
directory (support.pop.Node), on the test's clock."""

import pytest

from support.pop import Node


@pytest.fixture
def node(tmp_path, clock):
    node = Node(tmp_path / "data", clock)
    yield node
    node.close()
