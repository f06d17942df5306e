"""Building the SparkSession the job and the tests share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO


# Spark starts its Python workers as `python -m <module>` in the executor's working directory (the
# driver's, in local mode), which Python puts first on their import path: a folder there named ingest,
# sink or store (the store itself, named "store") would be imported in place of ours, and a planted
# ingest/__init__.py would run inside the job. Python's safe-path mode (3.11, the project's floor)
# leaves the working directory off. An environment variable rather than a working directory of our
# own: Spark offers no setting for its workers' directory, but passes the executors' environment
# (spark.executorEnv.*) to every worker on any cluster manager, and the driver's through its JVM.
# deploy/spark-submit.sh and the image set it for a cluster's driver too.
SAFE_PATH = {"PYTHONSAFEPATH": "1"}


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
    conf.update({f"spark.executorEnv.{k}": v for k, v in SAFE_PATH.items()})
    conf.update(extra_conf or {})
    if master:
        # under spark-submit the submitter's --jars and JVM options stand (deploy/spark-submit.sh
        # passes the same jars)
        conf.update(connector_jars(conf.get("spark.jars", "")))
        conf.update(driver_options(conf))
        conf.update(quiet_start_options(conf))
    for key, value in conf.items():
        builder = builder.config(key, value)
    # SparkContext puts in a SIGINT handler of its own (cancel every job, raise KeyboardInterrupt:
    # for a shell); a command that installed its own stop-after-the-batch handler keeps it
    main = threading.current_thread() is threading.main_thread()
    ours = signal.getsignal(signal.SIGINT) if main else None
    with _jvm_environment({**SAFE_PATH, **(spark_home_environment() if master else {})}):
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


@contextmanager
def _jvm_environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``extra`` in the environment while a JVM is launched here (PySpark copies ours into it, and the
    JVM into every Python process it starts: its planner runners, the local executors' workers), then
    our own environment as it was: this process's other children (a test's) keep theirs."""
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def quiet_idle_triggers(session: "object") -> None:
    jvm = session._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(TRIGGER_LOGGER, jvm.org.apache.logging.log4j.Level.ERROR)


LOG4J2 = Path(__file__).with_name("log4j2.properties")
# what the JVM itself prints (not log4j) that a user cannot act on: Spark's launcher always adds the
# incubating vector module
JVM_NOTICES = (b"WARNING: Using incubator modules: jdk.incubator.vector",)


def quiet_start_options(conf: Mapping[str, str]) -> dict[str, str]:
    """A local driver starts without the notices a user cannot act on (ingest/log4j2.properties
    says which); a real warning or error still shows. A caller's spark.driver.defaultJavaOptions
    stands."""
    if "spark.driver.defaultJavaOptions" in conf:
        return {}
    return {"spark.driver.defaultJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}"}


def _forward_jvm_stderr(stream: IO[bytes]) -> None:
    """The driver JVM's stderr (Spark's log, the Python workers' own stderr) copied to our fd 2, where
    it went before, line by line, less JVM_NOTICES. Read to the end whatever happens to fd 2, so that
    the JVM never waits on a full pipe."""
    for line in iter(stream.readline, b""):
        if line.startswith(JVM_NOTICES):
            continue
        try:
            os.write(2, line)
        except OSError:
            pass


def connector_jars(jars: str) -> dict[str, str]:
    """``spark.jars`` with Spark's own Kafka source (``--source spark-kafka``) added, when ``make jvm``
    resolved it (deploy/jvm/pom.xml, set ``spark-kafka``); nothing when it did not."""
    from ingest.jvm import has_jar_set, jar_set

    if not has_jar_set("spark-kafka"):
        return {}
    listed = [j for j in jars.split(",") if j]
    return {"spark.jars": ",".join(listed + [str(j) for j in jar_set("spark-kafka") if str(j) not in listed])}


# The driver JVM compiles with C1 alone. Its part of the job is planning each batch and handing packed
# batches on (Python and the C passes read, encode and write the records): C2 would pay back only
# after many batches, and its compiler threads take the cores the read tasks are using meanwhile.
DRIVER_JIT = "-XX:TieredStopAtLevel=1"


def driver_options(conf: Mapping[str, str]) -> dict[str, str]:
    """The local driver JVM's options: the class archive ``make spark-archive`` made (ingest.spark_archive),
    when there is one, and DRIVER_JIT; nothing when the caller set the driver's JVM options itself."""
    from ingest.spark_archive import driver_java_options as archive_options

    if "spark.driver.extraJavaOptions" in conf:
        return {}
    return {"spark.driver.extraJavaOptions": " ".join(o for o in (archive_options(), DRIVER_JIT) if o)}


def spark_home_environment() -> dict[str, str]:
    """SPARK_HOME for a local driver launched here: the home ``make spark-archive`` made, without the
    pyspark.zip Python would import from (ingest.spark_archive), unless the user chose a Spark home."""
    from ingest.spark_archive import spark_home

    home = spark_home()
    return {} if home is None else {"SPARK_HOME": str(home)}


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
    gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True, "stderr": subprocess.PIPE})
    threading.Thread(target=_forward_jvm_stderr, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True).start()
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
