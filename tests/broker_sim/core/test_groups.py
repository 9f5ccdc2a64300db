"""Consumer groups that consume orderly (RocketMQ's consumeMessageOrderly) are remembered in
config/subscriptionGroup.json, across restarts; a damaged file stops the start with a sentence."""

import pytest

from broker_sim.core.groups import GroupTable, LiveConsumers
from broker_sim.doors.remoting.clients import ClientRegistry
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


def test_live_consumers_are_seen_until_gone_or_expired():
    now = [0.0]
    consumers = LiveConsumers(expiry_ms=1_000, clock_ms=lambda: now[0])
    consumers.seen("g", "a")
    consumers.seen("g", "b")
    consumers.seen("h", "c")
    assert consumers.of("g") == ["a", "b"] and consumers.groups() == ["g", "h"]
    consumers.gone("g", "a")
    now[0] = 800.0
    consumers.seen("h", "c")  # seen again: its expiry starts again
    now[0] = 1_500.0
    assert consumers.of("g") == [] and consumers.of("h") == ["c"] and consumers.groups() == ["h"]


def test_remoting_clients_are_live_consumers_from_heartbeat_to_unregister_or_disconnect():
    consumers, clients = LiveConsumers(), ClientRegistry()
    clients.consumers = consumers
    for connection, client_id in ((object(), "c1"), (object(), "c2")):
        clients.heartbeat(connection, {"clientID": client_id, "consumerDataSet": [
            {"groupName": "g", "subscriptionDataSet": [{"topic": "t", "subString": "*"}]}]})
        if client_id == "c1":
            first = connection
    assert consumers.of("g") == ["c1", "c2"]
    clients.forget(first)  # its connection closed
    assert consumers.of("g") == ["c2"]
    clients.unregister(connection, "c2", None, "g")
    assert consumers.of("g") == []


def test_expired_consumers_do_not_pile_up_while_new_ones_come():
    now = [0.0]
    consumers = LiveConsumers(expiry_ms=1_000, clock_ms=lambda: now[0])
    for i in range(100):
        now[0] = i * 100.0
        consumers.seen("g", f"peer-{i}")
    assert len(consumers._seen["g"]) <= 11  # those of the last second, never asked for
