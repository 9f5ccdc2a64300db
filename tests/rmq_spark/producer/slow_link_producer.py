"""Sends COUNT messages of 1 KiB with an AutoBatch producer, as fast as it takes them, and
prints what came of them as JSON: acked, failed, the distinct failure sentences, seconds.

    python slow_link_producer.py ENDPOINT TOPIC COUNT PRODUCER_OPTIONS_JSON
"""

import json
import sys
import time

from rmq_spark import Message, Producer
from rmq_spark.errors import RmqError


def main() -> None:
    endpoint, topic, count, options = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    started = time.monotonic()
    futures, failed = [], []
    with Producer(endpoint, **options) as producer:
        for i in range(count):
            try:
                futures.append(producer.send_async(Message(topic, b"%06d" % i + b"." * 1018)))
            except RmqError as refused:  # no room in the buffer within send_timeout_ms
                failed.append(str(refused))
        producer.flush()
    failed += [str(error) for error in (f.exception(0) for f in futures) if error is not None]
    print(json.dumps({"acked": count - len(failed), "failed": len(failed), "errors": sorted(set(failed))[:3],
                      "seconds": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    main()
