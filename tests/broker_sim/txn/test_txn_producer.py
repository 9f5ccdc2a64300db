"""The producer under a transaction: AutoBatch and send_arrow prepare, a commit shows them."""

import pyarrow as pa

from rmq_spark import Message, OffsetRange, Producer, RangeReader
from rmq_spark.client.transactions import Transactions, new_transaction_id
from txn_helpers import offsets, wait_offsets


def test_a_transactional_producer_prepares_everything_it_sends(broker, topic):
    txn = new_transaction_id("test")
    with Producer(broker.endpoint, transaction_id=txn, codec="arrow", compression="lz4",
                  batch_max_bytes=1000) as producer:
        sent = producer.send_arrow(pa.table({"body": [b"r%03d" % i + b"." * 96 for i in range(200)],
                                             "queue_id": [i % 4 for i in range(200)]}), topic)
        futures = [producer.send_async(Message(topic, b"m%d" % i, queue_id=0)) for i in range(10)]
        sent.wait(10)
        producer.flush()
        prepared = producer.prepared()
    assert (prepared.transaction_id, prepared.message_count) == (txn, 210) and prepared.batch_count >= 20
    assert futures[0].result(0).queue_offset == -1  # offsets are given at the commit
    assert offsets(broker.endpoint, topic) == [0, 0, 0, 0]  # nothing visible yet
    with Transactions(broker.endpoint) as txns:
        result = txns.commit([prepared], sink_id="test-sink", batch_id=0)
    assert all(outcome.changed for outcome in result.transactions)
    wait_offsets(broker.endpoint, topic, [60, 50, 50, 50])
    with RangeReader(broker.endpoint) as reader:
        table = reader.read_table([OffsetRange(topic, 0, 0, 60)])
    bodies = table["body"].to_pylist()
    assert sorted(b for b in bodies if b.startswith(b"m")) == sorted(b"m%d" % i for i in range(10))
    assert [b for b in bodies if b.startswith(b"r")] == [b"r%03d" % i + b"." * 96 for i in range(0, 200, 4)]
