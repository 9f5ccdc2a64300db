"""A Spark driver of two streaming aggregations written through ``foreachBatch`` exactly once, as
docs/spark-writes.md says: clicks per page in update mode and in complete mode, each
micro-batch written by ``df.write`` with ``sinkId`` and ``batchId``. With a kill directory, both
queries write micro-batch 1, wait for each other, and the whole driver (its JVM too: the process
group) is SIGKILLed there, after the writes and before Spark records either micro-batch in its
checkpoint; run again, it finishes both queries from their checkpoints.

    python aggregation_driver.py SOURCE_JSON SINK_JSON SOURCE_TOPIC OUT_TOPIC WORK_DIR [KILL]

SOURCE_JSON / SINK_JSON: the options of the read and of the writes (the address, credentials,
deliveryGuarantee...).
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    source, sink, source_topic, out_topic, work = sys.argv[1:6]
    source, sink, work = json.loads(source), json.loads(sink), Path(work)
    kill = len(sys.argv) > 6 and sys.argv[6] == "kill"
    spark = (SparkSession.builder.master("local[2]").appName("aggregations exactly once")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    clicks = (spark.readStream.format("rocketmq-batch").options(**source).option("topic", source_topic)
              .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", 200).load()
              .select(F.get_json_object(F.col("body").cast("string"), "$.page").alias("page")))
    counts = clicks.groupBy("page").count()
    queries = [counts.writeStream.outputMode(mode).foreachBatch(writer(mode, sink, out_topic, work, kill))
               .option("checkpointLocation", str(work / f"checkpoint-{mode}")).trigger(availableNow=True).start()
               for mode in ("update", "complete")]
    for query in queries:
        query.awaitTermination(300)
        if query.exception() is not None:
            raise query.exception()
    spark.stop()


def writer(mode: str, sink: dict, out_topic: str, work: Path, kill: bool):
    def write(batch, batch_id: int) -> None:
        rows = batch.select(F.to_json(F.struct(F.lit(mode).alias("mode"), F.lit(batch_id).alias("batch"), "page",
                                               "count")).alias("body"), F.col("page").alias("keys"))
        (rows.write.format("rocketmq-batch").options(**sink).option("topic", out_topic)
         .option("sinkId", f"clicks-{mode}").option("batchId", batch_id)
         .option("checkpointLocation", str(work / "decisions")).mode("append").save())
        if kill and batch_id == 1:
            (work / f"written-{mode}").touch()
            other = work / f"written-{'complete' if mode == 'update' else 'update'}"
            deadline = time.monotonic() + 120
            while not other.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            if mode == "update":  # both written, neither recorded by Spark: the whole driver dies
                os.killpg(os.getpgrp(), signal.SIGKILL)
            time.sleep(120)  # the complete-mode query waits here for the kill
    return write


if __name__ == "__main__":
    main()
