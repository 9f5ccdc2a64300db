"""What differs between PySpark versions, in one place. The connector runs on PySpark 4.0 to 4.3.

- PySpark 4.0 has no Arrow writer for streams (``DataSourceStreamArrowWriter`` came in 4.1): a
  stream writer is handed rows, which ``arrow_batches`` makes Arrow batches of with PySpark's own
  conversion of local data, so the sink's one path takes Arrow everywhere. Batch writes have the
  Arrow writer on every version.
- PySpark 4.0 and 4.1 give Python sources no read limits (``latestOffset(start, limit)``,
  ``getDefaultReadLimit``, ``reportLatestOffset``: SPARK-55304, 4.2). ``latestOffset()`` is
  asked with nothing, so the source keeps where the next micro-batch starts itself (a new query:
  ``initialOffset``; then each offset it hands out; on a restart, the checkpoint's last offset,
  which these versions pass to ``partitions(end, end)``, Spark's AcceptsLatestSeenOffset) and
  applies maxRecordsPerTrigger and minRecordsPerTrigger to itself, as Spark's Kafka source did
  before admission control.
- PySpark 4.0 and 4.1 have no ``SupportsTriggerAvailableNow`` for Python sources: Spark runs
  ``Trigger.AvailableNow`` as ``Trigger.Once``, one micro-batch, which maxRecordsPerTrigger caps
  where it is set (``old_engine_limits`` says so once a query).
- PySpark 4.0 does not let a session register a data source under the name of one the install
  registered (DATA_SOURCE_ALREADY_EXISTS; 4.1 replaces it, SPARK-51919): ``register_source``
  keeps the installed one there.
- Every PySpark 4 (classic, not Spark Connect): ``df.write`` and ``writeStream`` find a Python
  data source through the calling thread's active session in the JVM, which PySpark sets only in
  the thread that created the session (``spark.read`` takes its own session and needs none):
  ``activate_in_this_thread``.
- PySpark before 4.0 has no Python data sources at all: importing the connector says so.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import islice
from typing import Iterator

import pyspark

SUPPORTED = "4.0 to 4.3"


def _minor(version: str) -> tuple[int, int]:
    major, minor = (version.split(".") + ["0"])[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


PYSPARK_VERSION = pyspark.__version__
VERSION = _minor(PYSPARK_VERSION)

if VERSION < (4, 0):
    raise ImportError(f"rocketmq-batch needs PySpark {SUPPORTED} (Python data sources came in 4.0), and this Python "
                      f"has PySpark {PYSPARK_VERSION}: pip install 'pyspark>=4.0,<4.4'")
if VERSION > (4, 3):
    warnings.warn(f"rocketmq-batch is tested on PySpark {SUPPORTED}; this is PySpark {PYSPARK_VERSION}", stacklevel=2)

from pyspark.sql.datasource import DataSourceStreamWriter  # noqa: E402 - after the version check

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriter

    ARROW_STREAM_WRITER = True
except ImportError:  # PySpark 4.0: the stream writer takes rows (arrow_batches)
    StreamWriter = DataSourceStreamWriter
    ARROW_STREAM_WRITER = False

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_ADMISSION_CONTROL = True
except ImportError:  # PySpark < 4.2
    HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stands in for PySpark 4.2's ReadLimit."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """A plain mixin where PySpark has no Trigger.AvailableNow for Python sources."""


@dataclass(frozen=True)
class Admission:
    """What a trigger may take: everything, or between ``min_records`` (wait for them, up to
    the trigger delay) and ``max_records``."""

    all_available: bool
    min_records: int | None = None
    max_records: int | None = None


def default_read_limit(min_records: int | None, max_records: int | None) -> ReadLimit:
    """The read limit the engine hands back to ``latestOffset`` on every trigger (but Trigger.Once);
    on PySpark < 4.2 the source hands it to itself."""
    if max_records is not None:
        return ReadMaxRows(max_records)
    if min_records is not None:
        return ReadMinRows(min_records)
    return ReadAllAvailable()


def admission(limit: ReadLimit | None, min_records: int | None, max_records: int | None) -> Admission:
    """The engine's ``limit`` as an Admission. ReadAllAvailable (Trigger.Once, or no limits
    asked: ``None``) takes everything; any other limit is the source's own default coming back,
    and both of the source's bounds apply."""
    if limit is None or isinstance(limit, ReadAllAvailable):
        return Admission(all_available=True)
    if isinstance(limit, ReadMaxRows):
        max_records = limit.max_rows
    elif isinstance(limit, ReadMinRows):
        min_records = limit.min_rows
    else:
        raise ValueError(f"the rocketmq-batch source does not know the read limit {limit!r}; it reads by records")
    return Admission(all_available=False, min_records=min_records, max_records=max_records)


def old_engine_limits(max_records: int | None) -> str | None:
    """What a stream with read limits should know on a PySpark without admission control, said
    once a query (None where there is nothing to say)."""
    if HAS_ADMISSION_CONTROL or max_records is None:
        return None
    return (f"rocketmq-batch: PySpark {PYSPARK_VERSION} gives Python sources no read limits (4.2 does), so this "
            f"source caps each micro-batch at maxRecordsPerTrigger={max_records} itself; Trigger.AvailableNow runs "
            "as Trigger.Once on this PySpark and reads one such micro-batch a run (run it again to read on)")


# Rows a PySpark 4.0 stream write converts to Arrow at a time: Spark's own Arrow batches hold
# up to spark.sql.execution.arrow.maxRecordsPerBatch, 10,000 by default.
ROWS_PER_ARROW_BATCH = 10_000


def arrow_batches(items: Iterator, schema, rows_per_batch: int = ROWS_PER_ARROW_BATCH) -> Iterator:
    """A write task's input as Arrow record batches: as given where PySpark hands the writer
    Arrow (every batch write; stream writes on 4.1+), else Spark's rows (stream writes on 4.0)
    converted ``rows_per_batch`` at a time by PySpark's own conversion of local data, the one
    ``createDataFrame`` uses (``schema``: the rows' Spark schema)."""
    if ARROW_STREAM_WRITER:
        yield from items
        return
    import pyarrow as pa
    from pyspark.sql.conversion import LocalDataToArrowConversion

    items = iter(items)
    while True:
        chunk = list(islice(items, rows_per_batch))
        if not chunk:
            return
        if isinstance(chunk[0], pa.RecordBatch):  # already Arrow (a writer driven with batches)
            yield from chunk
            continue
        yield from LocalDataToArrowConversion.convert(chunk, schema, False).to_batches()


def register_source(spark, source) -> None:
    """``spark.dataSource.register(source)``; on PySpark 4.0, where the one the install registered
    (the same class, found by PySpark's lookup) cannot be replaced, that one stays."""
    try:
        spark.dataSource.register(source)
    except Exception as error:  # noqa: BLE001 - PySpark's AnalysisException, by its error class
        if VERSION >= (4, 1) or "DATA_SOURCE_ALREADY_EXISTS" not in str(error):
            raise


def activate_in_this_thread(spark) -> None:
    """Make ``spark`` the active session of the calling thread in Spark's JVM, where PySpark 4
    (classic) looks up a Python data source for ``df.write`` and ``writeStream``: a thread
    other than the one that created the session has none, and the lookup fails with
    DATA_SOURCE_NOT_FOUND. Spark Connect sessions have no JVM here and need nothing."""
    session = getattr(spark, "_jsparkSession", None)
    if session is not None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)
