"""The abort marker that tells clean stops from crashes, and one store per data directory.
Stops and helpers: recovery_helpers.py."""

from __future__ import annotations

import pytest

from broker_sim.store import DataDirInUseError, StoreError
from broker_sim.store.paths import StorePaths
from recovery_helpers import WAIT_S, Model, assert_log_ends_at, check_model, create_topics, fill, open_at

# --- 5: the abort marker and clean stops -------------------------------------------------------

def test_clean_stop_removes_abort_marker_and_reports_clean(tmp_path):
    data = tmp_path / "data"
    store = open_at(data)
    assert store.recovery.clean is True  # a new directory
    assert StorePaths(data).abort.exists(), "an open store has an abort marker"
    create_topics(store)
    model = Model()
    fill(store, model, 0, 80)
    store.close()
    assert not StorePaths(data).abort.exists(), "a clean stop removes the abort marker"
    with open_at(data) as store:
        report = store.recovery
        assert report.clean is True
        assert (report.dropped_units, report.redispatched_records) == (0, 0), report
        assert StorePaths(data).abort.exists()
        check_model(store, model, tail=report.tail)
        assert_log_ends_at(data, report.tail)
        fill(store, model, 80, 20)
    assert not StorePaths(data).abort.exists()
    with open_at(data) as store:
        assert store.recovery.clean is True
        check_model(store, model)


def test_unclean_stop_is_reported_until_next_clean_stop(tmp_path):
    data = tmp_path / "data"
    model = Model()
    with open_at(data) as store:
        create_topics(store)
        fill(store, model, 0, 30)
    StorePaths(data).abort.touch()  # as a crash leaves it
    store = open_at(data)
    assert store.recovery.clean is False
    check_model(store, model)
    fill(store, model, 30, 10)
    store.close()
    assert not StorePaths(data).abort.exists()
    with open_at(data) as store:
        assert store.recovery.clean is True
        check_model(store, model)


# --- 6: one store per data directory ----------------------------------------------------------

def test_second_open_of_data_dir_raises_in_use(tmp_path):
    data = tmp_path / "data"
    store = open_at(data)
    create_topics(store)
    model = Model()
    fill(store, model, 0, 10)
    for path in (data, tmp_path / "data" / ".." / "data"):
        with pytest.raises(DataDirInUseError) as info:
            open_at(path)
        assert str(path) in str(info.value)
    fill(store, model, 10, 10)  # the first store is unharmed
    assert store.wait_dispatched(WAIT_S)
    check_model(store, model)
    store.close()
    with open_at(data) as store:  # free again once closed
        assert store.recovery.clean is True
        check_model(store, model)


def test_failed_open_releases_the_data_dir(tmp_path):
    data = tmp_path / "data"
    model = Model()
    with open_at(data) as store:
        create_topics(store)
        fill(store, model, 0, 10)
    topics = StorePaths(data).topics
    good = topics.read_bytes()
    topics.write_text("{not json")
    with pytest.raises(StoreError, match="topics.json"):
        open_at(data)
    topics.write_bytes(good)
    with open_at(data) as store:
        check_model(store, model)
