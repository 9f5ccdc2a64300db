"""`rmq-broker-sim` that kills itself with SIGKILL at a chosen point of a commit, for the
crash tests: ``crashing_broker.py MODE [broker flags]``.

MODE ``appends:N``: after the decision, once N runs of records were appended (0: before any);
``before-end``: after every batch was appended and flushed, before the transactions are
marked committed.
"""

import os
import signal
import sys

from broker_sim import cli
from broker_sim.txn import service
from broker_sim.txn.state import StateStore


def die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    mode, argv = sys.argv[1], sys.argv[2:]
    if mode.startswith("appends:"):
        limit = int(mode.split(":")[1])
        original = service.TransactionService._append_run
        done = []

        def append_run(self, key, records):
            if len(done) >= limit:
                die()
            original(self, key, records)
            done.append(key)

        service.TransactionService._append_run = append_run
    elif mode == "before-end":
        original_end = StateStore.end

        def end(self, txns, sync, **kwargs):
            if any(t.state.name == "COMMITTED" for t in txns):
                die()
            original_end(self, txns, sync, **kwargs)

        StateStore.end = end
    else:
        raise SystemExit(f"unknown crash mode {mode!r}")
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
