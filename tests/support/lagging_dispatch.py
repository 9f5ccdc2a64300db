"""A dispatcher that lags behind the writers, as on a loaded machine: how the read-your-writes
tests (issue 29, point 5) catch a read that misses what was stored before it, without sleeping
and without a mock of the store.

``LaggingDispatch(store)`` holds the dispatcher's lock, which the dispatcher takes for each
record it indexes: appends go on and sends are answered, nothing more is indexed. ``read(fn)``
runs a read in a thread of its own and lets the dispatcher go on once the read has either
finished (it did not wait for the index: it saw what was indexed) or is waiting for the index
(``MessageStore.reads_waited_for_index`` moved); its result is the read's.

    with LaggingDispatch(broker.core.store) as lag:
        producer.send(message)                               # answered, not indexed
        assert lag.read(lambda: offsets_of(topic)) == [1]    # the read still sees it
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

READ_TIMEOUT_S = 60.0


class LaggingDispatch:
    def __init__(self, store):
        self.store = store
        self._held = False

    def __enter__(self) -> "LaggingDispatch":
        self.store.dispatcher.lock.acquire()
        self._held = True
        return self

    def __exit__(self, *exc) -> None:
        self._let_go()

    def read(self, read):
        """``read()``'s result, run while the dispatcher lags (see the module's notes)."""
        assert self._held, "read() once per block: the dispatcher goes on after the first read"
        waits = self.store.reads_waited_for_index
        with ThreadPoolExecutor(1, thread_name_prefix="lagging-read") as pool:
            future = pool.submit(read)
            deadline = time.monotonic() + READ_TIMEOUT_S
            while not future.done() and self.store.reads_waited_for_index == waits:
                assert time.monotonic() < deadline, f"the read neither finished nor waited in {READ_TIMEOUT_S} s"
                time.sleep(0.001)  # polls the two conditions above
            self._let_go()
            return future.result(READ_TIMEOUT_S)

    def _let_go(self) -> None:
        if self._held:
            self._held = False
            self.store.dispatcher.lock.release()
