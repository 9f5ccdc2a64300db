"""ConsumerOffsetTable: commits, queries, persistence (interval and close, atomic), loading."""

import json
import time

import pytest

from broker_sim.store import ConsumerOffsetTable, StoreError
from broker_sim.store.paths import StorePaths


@pytest.fixture
def path(tmp_path):
    return StorePaths(tmp_path).consumer_offsets


def test_commit_query_and_groups(path):
    with ConsumerOffsetTable(path, flush_interval_ms=None) as table:
        assert table.groups() == [] and table.query("g") == []
        table.commit("g", [("a", 0, 10), ("a", 1, 20), ("b", 3, 7)])
        table.commit("h", [("a", 0, 1)])
        table.commit("g", [("a", 0, 12)])  # the last commit wins, back or forth
        assert table.query("g") == [("a", 0, 12), ("a", 1, 20), ("b", 3, 7)]
        assert table.query("g", ["b"]) == [("b", 3, 7)]
        assert table.query("g", ["nope"]) == [] and table.query("unknown") == []
        assert table.groups() == ["g", "h"]


@pytest.mark.parametrize("group, entries, expected", [
    ("", [("a", 0, 1)], "group name is empty"),
    ("g@x", [("a", 0, 1)], "contains '@'"),
    ("g", [("a", 0, 1), ("a", 1, -1)], "offset -1"),
    ("g", [("a", -2, 1)], "queue id -2"),
    ("g", [("", 0, 1)], "not a topic name"),
])
def test_bad_commits_change_nothing(path, group, entries, expected):
    with ConsumerOffsetTable(path, flush_interval_ms=None) as table:
        table.commit("g", [("a", 0, 5)])
        with pytest.raises(ValueError, match=expected):
            table.commit(group, entries)
        assert table.query("g") == [("a", 0, 5)] and table.groups() == ["g"]


def test_remove_topic_forgets_it_in_every_group(path):
    with ConsumerOffsetTable(path, flush_interval_ms=None) as table:
        table.commit("g", [("a", 0, 1), ("b", 0, 2)])
        table.commit("h", [("a", 1, 3)])
        assert table.remove_topic("a") == 2
        assert table.query("g") == [("b", 0, 2)] and table.groups() == ["g"]


def test_close_writes_rocketmq_shaped_json_and_open_loads_it(path):
    table = ConsumerOffsetTable(path, flush_interval_ms=None)
    table.commit("g", [("orders", 0, 12), ("orders", 1, 40)])
    table.commit("%RETRY%g+orders", [("%RETRY%g+orders", 0, 3)])
    assert not path.exists()  # nothing written before close or flush
    table.close()
    table.close()  # idempotent
    assert json.loads(path.read_text()) == {"offsetTable": {
        "orders@g": {"0": 12, "1": 40}, "%RETRY%g+orders@%RETRY%g+orders": {"0": 3}}}
    assert not list(path.parent.glob("*.tmp"))
    with ConsumerOffsetTable(path, flush_interval_ms=None) as again:
        assert again.query("g") == [("orders", 0, 12), ("orders", 1, 40)]
        assert again.groups() == ["%RETRY%g+orders", "g"]
    with pytest.raises(StoreError, match="closed"):
        table.commit("g", [("orders", 0, 1)])


def test_the_flusher_writes_on_its_interval(path):
    with ConsumerOffsetTable(path, flush_interval_ms=20) as table:
        table.commit("g", [("t", 0, 5)])
        deadline = time.monotonic() + 5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert json.loads(path.read_text()) == {"offsetTable": {"t@g": {"0": 5}}}


def test_a_crash_loses_only_what_was_not_flushed(path):
    table = ConsumerOffsetTable(path, flush_interval_ms=None)
    table.commit("g", [("t", 0, 5)])
    assert table.flush() is True
    assert table.flush() is False  # nothing changed since
    table.commit("g", [("t", 0, 9)])
    path.with_name(path.name + ".tmp").write_text('{"offsetTable": {"t@g": {"0"')  # a torn write, never renamed
    # The process dies here: no close.
    with ConsumerOffsetTable(path, flush_interval_ms=None) as after_crash:
        assert after_crash.query("g") == [("t", 0, 5)]


@pytest.mark.parametrize("content", ['{"offsetTable": {"t@g": {"0": "x"}}}', "{", '{"other": 1}',
                                     '{"offsetTable": {"nogroup": {"0": 1}}}'])
def test_a_damaged_file_is_refused_with_a_sentence(path, content):
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(StoreError, match="consumer offsets file .* is damaged"):
        ConsumerOffsetTable(path, flush_interval_ms=None)
