"""bench/peers_bench.py at tiny sizes, run as users run it, so that it cannot rot: every producer
row measures (ours and the peers'), none is skipped or failed here, where the peers are fetched."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import peers

pytestmark = pytest.mark.peers

BENCH = Path(__file__).resolve().parents[2] / "bench" / "peers_bench.py"


def test_the_producer_rows_measure_beside_the_real_peers(tmp_path):
    try:
        for group in ("rocketmq", "kafka", "clients"):
            peers.jars(group)
    except peers.PeersMissing as missing:
        pytest.skip(str(missing))
    run = subprocess.run([sys.executable, str(BENCH), "--sections", "produce", "--producer-messages", "2000"],
                         env={**os.environ, "RMQ_BENCH_RESULTS": str(tmp_path)}, capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [result] = tmp_path.glob("peers-*.json")
    rows = json.loads(result.read_text())["rows"]
    assert [r["system"] for r in rows] == ["ours", "ours", "peer", "peer", "peer", "peer"]
    assert all(row["rows/s"] and row["rows"] > 0 for row in rows), [r["note"] for r in rows]
