"""An AutoBatch producer through a slow, lossy link (issue 45): a producer in a network namespace
of its own reaches the broker through 50 +- 10 ms each way, 2 MB/s and 2 % of its chunks stalled
for a retransmission timeout (slow_link.py). With the defaults (30 s an attempt, 120 s a batch)
every message is acked and stored once; with the old 3 s deadline for everything most fail, with
a sentence naming the settings to raise, and what failed may still have been stored."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

from broker_sim.testing import broker_process
from rmq_spark import Admin, OffsetRange, RangeReader
from slow_link import SlowLink, require_namespaces

PRODUCER = Path(__file__).with_name("slow_link_producer.py")
COUNT = 20_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    require_namespaces()
    with broker_process(tmp_path_factory.mktemp("broker"), "--auto-create-topics", "false") as (endpoint, _process):
        yield endpoint


def produce(broker: str, topic: str, **options) -> dict:
    with Admin(broker) as admin:
        admin.create_topic(topic, 4, "BatchCQ")
    with SlowLink(broker) as link:
        ran = link.run([sys.executable, str(PRODUCER), link.endpoint, topic, str(COUNT), json.dumps(options)],
                       timeout_s=600)
    assert ran.returncode == 0, ran.stderr[-4000:]
    outcome = json.loads(ran.stdout.strip().splitlines()[-1])
    outcome["stored"] = stored(broker, topic)
    print(topic, {k: v for k, v in outcome.items() if k != "stored"}, "stored:", sum(outcome["stored"].values()))
    return outcome


def stored(broker: str, topic: str) -> collections.Counter:
    """How many times each message is stored."""
    with Admin(broker) as admin:
        queues = admin.offsets([topic])[topic]
    with RangeReader(broker) as reader:
        bodies = reader.read_table([OffsetRange(topic, q.queue_id, q.min_offset, q.max_offset)
                                    for q in queues]).column("body").to_pylist()
    return collections.Counter(body[:6] for body in bodies)


def test_every_message_through_a_slow_lossy_link_is_acked_and_stored_once(broker):
    outcome = produce(broker, "slow-defaults")
    assert (outcome["acked"], outcome["failed"]) == (COUNT, 0), outcome["errors"]
    assert len(outcome["stored"]) == COUNT and set(outcome["stored"].values()) == {1}


def test_a_deadline_the_link_cannot_meet_fails_with_a_sentence_naming_what_to_raise(broker):
    """The old defaults, 3 s for each attempt and no more for its retries: most sends fail, each
    saying which settings ran out; the retries stored nothing twice, and some of what failed is
    stored (the sentence says so)."""
    outcome = produce(broker, "slow-3s", request_timeout_ms=3000, delivery_timeout_ms=3000)
    assert outcome["failed"] > COUNT // 10, outcome
    assert all("delivery_timeout_ms=3000" in e and "raise request_timeout_ms and delivery_timeout_ms" in e
               and "it may have been stored" in e for e in outcome["errors"]), outcome["errors"]
    assert set(outcome["stored"].values()) == {1}  # a retry of a batch the broker had is answered, not stored
    assert len(outcome["stored"]) >= outcome["acked"]
