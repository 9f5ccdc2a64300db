"""Consumer groups that consume orderly (RocketMQ's consumeMessageOrderly) are remembered in
config/subscriptionGroup.json, across restarts; a damaged file stops the start with a sentence."""

import pytest

from broker_sim.core.groups import GroupTable
from broker_sim.store import StoreError


def test_an_orderly_group_is_remembered(tmp_path):
    path = tmp_path / "config" / "subscriptionGroup.json"
    table = GroupTable(path)
    assert not table.orderly("g")
    table.update("g", True)
    table.update("h", False)
    assert GroupTable(path).orderly("g") and not GroupTable(path).orderly("h")
    table.update("g", False)
    assert not GroupTable(path).orderly("g")


def test_a_damaged_table_is_refused_saying_what_to_do(tmp_path):
    path = tmp_path / "subscriptionGroup.json"
    path.write_text("[not a table")
    with pytest.raises(StoreError, match="delete it"):
        GroupTable(path)
