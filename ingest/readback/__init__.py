"""Reading a store back in Spark: the ``rocketmq-commitlog`` batch data source (source.py), a PySpark
Python data source over store.StoreReader with the columns of store.scan.record_batch, and
register(), which makes it known to a SparkSession.

    from ingest.readback import register
    register(spark)
    spark.read.format("rocketmq-commitlog").load("/data/store").where("topic = 'orders'")
"""

from __future__ import annotations

from typing import Any

SHORT_NAME = "rocketmq-commitlog"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``rocketmq-commitlog`` source on ``spark`` (idempotent) and turn on the filter
    pushdown of Python data sources (spark.sql.python.filterPushdown.enabled), which its reader
    uses: Spark refuses a reader that pushes filters while it is off. A session that must keep it
    off reads with ``.option("pushFilters", "false")`` instead (Spark then filters every row)."""
    from ingest.readback.source import CommitLogDataSource

    spark.dataSource.register(CommitLogDataSource)
    spark.conf.set(PUSHDOWN_CONF, "true")
