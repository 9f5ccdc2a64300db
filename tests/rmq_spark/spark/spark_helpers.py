"""Helpers of the Spark connector's tests (tests/rmq_spark/spark/; support.sdk has wait_indexed)."""

import time

from rmq_spark import Message, Producer


def produce(endpoint, topic, queue_id, count, *, batch=10, start=0, codec="arrow", compression="lz4", tags="TagA",
            properties=None):
    """Send ``count`` messages to one queue in batches of ``batch``; returns their bodies in
    offset order (the queue must hold nothing else sent at the same time)."""
    bodies = [f"{topic}/{queue_id}/{i}".encode() for i in range(start, start + count)]
    with Producer(endpoint, codec=codec, compression=compression) as producer:
        for at in range(0, count, batch):
            producer.send_batch([Message(topic, body, tags=tags, keys=f"k{start + at + j}",
                                         properties=dict(properties or {}), queue_id=queue_id)
                                 for j, body in enumerate(bodies[at:at + batch])])
    return bodies


def source(spark, endpoint, stream=False, **options):
    reader = (spark.readStream if stream else spark.read).format("rocketmq-batch").option("endpoint", endpoint)
    for name, value in options.items():
        reader = reader.option(name, str(value).lower() if isinstance(value, bool) else str(value))
    return reader.load()


def run_available_now(df, checkpoint=None, timeout_s=120):
    """Run a stream with Trigger.AvailableNow, collecting its rows with foreachBatch (which,
    unlike the memory sink, restarts from a checkpoint); returns (rows, progress)."""
    rows = []
    writer = df.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect())).trigger(availableNow=True)
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    query = writer.start()
    try:
        assert query.awaitTermination(timeout_s), f"the query did not finish in {timeout_s} s"
        if query.exception() is not None:
            raise query.exception()
        return rows, query.recentProgress
    finally:
        query.stop()


def keyed(rows):
    """(topic, queue_id, queue_offset) -> body."""
    return {(r.topic, r.queue_id, r.queue_offset): bytes(r.body) for r in rows}


def wait_for(condition, what, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s} s"
        time.sleep(0.1)


def forget_commit(checkpoint, batch_id: int) -> None:
    """The driver died after the sink committed micro-batch ``batch_id``, before Spark recorded it
    in the checkpoint's commit log: Spark runs it again at the next start."""
    (checkpoint / "commits" / str(batch_id)).unlink()
    (checkpoint / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)
