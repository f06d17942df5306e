"""Building the SparkSession the job and the tests share."""

from __future__ import annotations

import os
import signal
import sys
import threading
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
    if master:
        # under spark-submit the submitter's --jars and JVM options stand (deploy/spark-submit.sh
        # passes the same jars)
        conf.update(connector_jars(conf.get("spark.jars", "")))
        conf.update(archive_options(conf))
    for key, value in conf.items():
        builder = builder.config(key, value)
    # SparkContext puts in a SIGINT handler of its own (cancel every job, raise KeyboardInterrupt:
    # for a shell); a command that installed its own stop-after-the-batch handler keeps it
    main = threading.current_thread() is threading.main_thread()
    ours = signal.getsignal(signal.SIGINT) if main else None
    if master and SparkSession.getActiveSession() is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        _start_jvm_in_its_own_session(master, app_name, conf)
    session = builder.getOrCreate()
    if main and callable(ours) and ours is not signal.default_int_handler:
        signal.signal(signal.SIGINT, ours)
    session.sparkContext.setLogLevel("WARN")
    quiet_idle_triggers(session)
    register_sources(session)
    return session


# Spark warns at every trigger that takes longer than its interval ("Current batch is falling behind"):
# with a short trigger (the job's default 100ms) an idle query's empty triggers, which only ask Kafka
# for its latest offsets, take about that long, and the warning would fill the log ten times a second.
TRIGGER_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def quiet_idle_triggers(session: "object") -> None:
    jvm = session._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(TRIGGER_LOGGER, jvm.org.apache.logging.log4j.Level.ERROR)


def connector_jars(jars: str) -> dict[str, str]:
    """``spark.jars`` with Spark's own Kafka source (``--source spark-kafka``) added, when ``make jvm``
    resolved it (deploy/jvm/pom.xml, set ``spark-kafka``); nothing when it did not."""
    from ingest.jvm import has_jar_set, jar_set

    if not has_jar_set("spark-kafka"):
        return {}
    listed = [j for j in jars.split(",") if j]
    return {"spark.jars": ",".join(listed + [str(j) for j in jar_set("spark-kafka") if str(j) not in listed])}


def archive_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The driver JVM maps the class archive ``make spark-archive`` made (ingest.spark_archive), unless the
    caller set the driver's JVM options itself."""
    from ingest.spark_archive import driver_java_options

    if "spark.driver.extraJavaOptions" in conf:
        return {}
    options = driver_java_options()
    return {"spark.driver.extraJavaOptions": options} if options else {}


def _start_jvm_in_its_own_session(master: str, app_name: str, conf: Mapping[str, str]) -> None:
    """Launch the driver JVM (and with it Spark's Python workers) in a session of its own, so that
    a signal to our process group (what `timeout`, systemd, Kubernetes and a terminal's Ctrl-C
    send) reaches the Python driver only: it stops after the current batch and closes the store,
    and only then the JVM goes, when its stdin pipe from us closes. PySpark's launch_gateway takes
    Popen arguments for this; SparkContext takes the gateway it returns."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    for key, value in conf.items():
        spark_conf.set(key, value)
    gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})
    SparkContext(conf=spark_conf, gateway=gateway)


def register_sources(session: "object") -> None:
    """Register our Python data sources on ``session`` (idempotent): the Kafka sources and the
    store read back (``rocketmq-commitlog``, ingest.readback)."""
    from ingest.encode.message_source import KafkaMessageSource
    from ingest.kafka.source import KafkaDataSource
    from ingest.readback import register as register_readback

    session.dataSource.register(KafkaDataSource)  # type: ignore[attr-defined]
    session.dataSource.register(KafkaMessageSource)  # type: ignore[attr-defined]
    register_readback(session)
