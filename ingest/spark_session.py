"""Building the SparkSession the job and the tests share."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def build_session(master: str | None = "local[*]", app_name: str = "commitlog-ingest",
                  extra_conf: Mapping[str, str] | None = None) -> "object":
    """A SparkSession with our Kafka data source registered.

    ``master=None`` leaves the master to spark-submit.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master:
        # under spark-submit (master None) the submitter's --name and --master stand
        builder = builder.master(master).appName(app_name)
    conf = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register_sources(session)
    return session


def register_sources(session: "object") -> None:
    """Register our Python data sources on ``session`` (idempotent)."""
    from ingest.encode.message_source import KafkaMessageSource
    from ingest.kafka.source import KafkaDataSource

    session.dataSource.register(KafkaDataSource)  # type: ignore[attr-defined]
    session.dataSource.register(KafkaMessageSource)  # type: ignore[attr-defined]
