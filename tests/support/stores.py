"""The message store, opened on the test's data directory with small files: fixtures of every test
(loaded by tests/conftest.py), for the store's tests and the record format's (rmq_wire)."""

import pytest

from broker_sim.store import MessageStore, StoreConfig

# Small files, so that every test crosses segments and index files.
SMALL = StoreConfig(segment_bytes=64 * 1024, simple_cq_units_per_file=16, batch_cq_units_per_file=8)


@pytest.fixture
def open_store(tmp_path):
    """Open (or reopen) a store on the test's data directory; all are closed at the end."""
    opened = []

    def open_(config=SMALL, **kwargs):
        store = MessageStore(tmp_path / "data", config, **kwargs)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store):
    """A store of small files on the test's data directory (``SMALL``)."""
    return open_store()
