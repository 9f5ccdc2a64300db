"""Exactly-once writes with the producer: writers prepare, one commit makes it all visible.

    python examples/transactional_producer.py                      # an embedded broker
    python examples/transactional_producer.py --endpoint HOST:PORT # a running rmq-broker-sim

What the Spark sink does for each micro-batch, by hand:

1. Each writer (a Spark task attempt) sends with ``Producer(transaction_id=...)``, an id of its
   own: every batch is stored prepared, invisible to readers, and no offset moves.
2. The committer (the Spark driver) commits the writers' ``prepared()`` transactions and records
   the sink's batch id in the same atomic step.
3. The same batch committed again (a driver that restarted and replays it) makes nothing
   visible: every message is read exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import broker_sim
from rmq_spark import (
    Admin,
    Message,
    OffsetRange,
    Producer,
    RangeReader,
    TopicConflictError,
    Transactions,
    new_transaction_id,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="HOST:PORT of a running broker (default: start one in this process)")
    parser.add_argument("--topic", default="txn-demo")
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10_000, help="messages per writer")
    parser.add_argument("--sink", default="txn-demo-sink", help="the sink id the commit records")
    parser.add_argument("--batch-id", type=int, default=0, help="the sink batch id the commit records")
    return parser.parse_args(argv)


def write(endpoint: str, topic: str, writer: int, messages: int, sink: str) -> object:
    """One writer attempt: everything it sends is prepared under its own transaction."""
    with Producer(endpoint, transaction_id=new_transaction_id(f"{sink}.w{writer}")) as producer:
        for i in range(messages):
            producer.send_async(Message(topic, b"writer %d message %d" % (writer, i), keys=f"w{writer}-{i}"))
        producer.flush()  # every batch answered: prepared() counts them all
        return producer.prepared()


def visible_messages(endpoint: str, topic: str, queues: int) -> int:
    with RangeReader(endpoint) as reader:
        return reader.read_table([OffsetRange(topic, q, 0) for q in range(queues)]).num_rows


def main(argv=None) -> dict:
    args = parse_args(argv)
    with broker_sim.embedded_unless(args.endpoint) as endpoint:
        with Admin(endpoint) as admin:
            with contextlib.suppress(TopicConflictError):  # it exists with other settings: use it as it is
                admin.create_topic(args.topic, args.queues, "BatchCQ")
        before = visible_messages(endpoint, args.topic, args.queues)

        with ThreadPoolExecutor(args.writers) as writers:  # the tasks of a micro-batch, side by side
            prepared = list(writers.map(lambda w: write(endpoint, args.topic, w, args.messages, args.sink),
                                        range(args.writers)))
        print(f"{args.writers} writers prepared {sum(p.message_count for p in prepared):,} messages; visible now: "
              f"{visible_messages(endpoint, args.topic, args.queues) - before}")

        with Transactions(endpoint) as txns:
            result = txns.commit(prepared, sink_id=args.sink, batch_id=args.batch_id)
            replay = txns.commit(prepared, sink_id=args.sink, batch_id=args.batch_id)  # a driver's replay
        print(f"the commit made {result.messages_made_visible:,} messages visible; the replay "
              f"{replay.messages_made_visible} (replayed: {replay.sink_batch_replayed})")
        # The commit returns once the batches are stored; the index follows within milliseconds.
        expected = before + result.messages_made_visible
        for _ in range(500):
            visible = visible_messages(endpoint, args.topic, args.queues)
            if visible >= expected:
                break
            time.sleep(0.01)
        print(f"readers see {visible - before:,} new messages")
        return {"prepared": sum(p.message_count for p in prepared), "committed": result.messages_made_visible,
                "replayed": replay.messages_made_visible, "visible": visible - before}


if __name__ == "__main__":
    main()
