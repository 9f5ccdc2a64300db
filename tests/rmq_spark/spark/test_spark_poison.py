"""spark.read over a queue holding a stored batch that does not decode (stored before payloads
were checked, issue 15): failOnDataLoss (the default) fails naming topic, queue and offsets;
false skips the batch's offsets and reads every other message."""

import pytest

import broker_sim
from broker_sim.store import BatchPut, MessageStore
from rmq_wire.codec import encode_messages
from spark_helpers import source


def payload(first: int, count: int) -> bytes:
    return encode_messages([(b"m%d" % i, None, None, None, None) for i in range(first, first + count)], "rmq", "none")


@pytest.fixture
def poisoned(tmp_path):
    """Queue 0 of topic "p": good 0-2, poison 3-5 (it holds 2 messages), good 6-8; queue 1: good 0-2."""
    with MessageStore(tmp_path / "data") as store:  # no payload check: as stored before it
        store.create_topic("p", 2, "BatchCQ")
        for queue_id, data, count in ((0, payload(0, 3), 3), (0, payload(3, 2), 3), (0, payload(6, 3), 3),
                                      (1, payload(0, 3), 3)):
            assert store.put_inner_batch("p", queue_id, BatchPut(data, count)).ok
    with broker_sim.embedded(tmp_path / "data") as endpoint:
        yield endpoint


def test_fail_on_data_loss_names_the_batch_and_false_skips_it(spark, poisoned):
    with pytest.raises(Exception) as caught:
        source(spark, poisoned, topic="p").collect()
    assert "p queue 0: the stored batch at offsets 3 to 5 does not decode" in str(caught.value)
    rows = source(spark, poisoned, topic="p", failOnDataLoss=False).select("queue_id", "queue_offset").collect()
    assert sorted(tuple(r) for r in rows) == [(0, 0), (0, 1), (0, 2), (0, 6), (0, 7), (0, 8), (1, 0), (1, 1), (1, 2)]
