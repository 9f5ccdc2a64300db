"""What differs between PySpark versions, in one place.

- PySpark 4.0 / 4.1: ``DataSourceStreamReader.latestOffset()`` takes no argument, and there
  are no read limits and no ``Trigger.AvailableNow`` for Python sources.
- PySpark 4.2+: ``latestOffset(start, limit)`` with ``getDefaultReadLimit`` (ReadAllAvailable,
  ReadMinRows, ReadMaxRows, ...), ``reportLatestOffset`` and ``SupportsTriggerAvailableNow``.
  Python sources get back the default read limit they gave, or ReadAllAvailable (for
  ``Trigger.Once``); there is no composite limit, so the source applies minRecordsPerTrigger
  and maxRecordsPerTrigger together itself.
- Every PySpark 4 (classic, not Spark Connect): ``df.write`` and ``writeStream`` find a Python
  data source through the calling thread's active session in the JVM, which PySpark sets only in
  the thread that created the session (``spark.read`` takes its own session and needs none):
  ``activate_in_this_thread``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """The read limit the engine hands back to ``latestOffset`` on every trigger (but Trigger.Once)."""
    if max_records is not None:
        return ReadMaxRows(max_records)
    if min_records is not None:
        return ReadMinRows(min_records)
    return ReadAllAvailable()


def admission(limit: ReadLimit | None, min_records: int | None, max_records: int | None) -> Admission:
    """The engine's ``limit`` as an Admission. ReadAllAvailable (Trigger.Once, or an engine
    without read limits: ``None``) takes everything; any other limit is the source's own
    default coming back, and both of the source's bounds apply."""
    if limit is None or isinstance(limit, ReadAllAvailable):
        return Admission(all_available=True)
    if isinstance(limit, ReadMaxRows):
        max_records = limit.max_rows
    elif isinstance(limit, ReadMinRows):
        min_records = limit.min_rows
    else:
        raise ValueError(f"the rocketmq-batch source does not know the read limit {limit!r}; it reads by records")
    return Admission(all_available=False, min_records=min_records, max_records=max_records)


def activate_in_this_thread(spark) -> None:
    """Make ``spark`` the active session of the calling thread in Spark's JVM, where PySpark 4
    (classic) looks up a Python data source for ``df.write`` and ``writeStream``: a thread
    other than the one that created the session has none, and the lookup fails with
    DATA_SOURCE_NOT_FOUND. Spark Connect sessions have no JVM here and need nothing."""
    session = getattr(spark, "_jsparkSession", None)
    if session is not None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)
