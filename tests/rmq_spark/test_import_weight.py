"""What a process pays to start using the SDK: a Spark worker imports it in every Python worker
process it forks, before its first row."""

import subprocess
import sys

from rmq_spark import Admin, Message, Producer

_READ = """
import sys
from rmq_spark import OffsetRange, RangeReader
import rmq_spark.spark.source
with RangeReader(sys.argv[1]) as reader:
    rows = sum(batch.num_rows for batch in reader.read([OffsetRange(sys.argv[2], 0, 0)]))
print(rows, "pandas" in sys.modules)
"""


def test_a_read_imports_no_pandas(endpoint, topic_name):
    """pyarrow imports pandas (a quarter of a second) to look at any Python list or scalar it is
    given: the read path makes its Arrow constants from buffers instead."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic_name, 1, "BatchCQ")
    with Producer(endpoint) as producer:
        producer.send_batch([Message(topic_name, b"m%d" % i, tags="A", queue_id=0) for i in range(10)])
    answer = subprocess.run([sys.executable, "-c", _READ, endpoint, topic_name], capture_output=True, text=True,
                            timeout=120, check=True)
    assert answer.stdout.split() == ["10", "False"], answer.stderr
