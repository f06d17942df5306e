"""Session-wide fixtures: one Kafka broker and one SparkSession for the whole test run."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.brokers.report import note_broker, report_lines, start_report

ROOT = Path(__file__).resolve().parent.parent

# The Spark drivers the tests start (the shared session, each `commitlog run` / `replay` a test
# spawns, the bench scripts' quick runs) live for seconds: C2's compiles cost more CPU than they
# repay in a run that short, and on 2 cores the suite is bound by CPU, so their JVMs compile with
# C1 only (about half the JVM's CPU for a short job). spark-submit puts SPARK_SUBMIT_OPTS on the
# driver's java command line; a caller's own setting stands.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules marked ``slow(minutes=N)`` first, longest first; the rest in their usual order.
    make test's two workers take whole modules (``--dist loadfile``, in this order with
    ``--no-loadscope-reorder``): a module of minutes taken last would leave one worker running it
    alone while the other has finished, and the hundreds of short tests fill the gaps best at the end."""

    def minutes(item: pytest.Item) -> float:
        marker = item.get_closest_marker("slow")
        return float(marker.kwargs.get("minutes", 1)) if marker else 0.0

    by_module: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        by_module[module] = max(by_module.get(module, 0.0), minutes(item))
    items.sort(key=lambda item: -by_module[item.nodeid.split("::", 1)[0]])


def pytest_configure(config: pytest.Config) -> None:
    # the report of brokers lives in pytest's cache, or with ``-p no:cacheprovider`` in a directory of its own
    if not hasattr(config, "workerinput"):
        cache = getattr(config, "cache", None)
        start_report(Path(cache.mkdir("brokers")) if cache is not None else
                     Path(tempfile.mkdtemp(prefix="commitlog-brokers-")))


def pytest_terminal_summary(terminalreporter: "object", config: pytest.Config) -> None:
    lines = [] if hasattr(config, "workerinput") else report_lines()
    if lines:
        terminalreporter.write_sep("-", "Kafka broker per module")  # type: ignore[attr-defined]
        for line in lines:
            terminalreporter.write_line(line)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    """The broker every Kafka test uses: $KAFKA_BOOTSTRAP_SERVERS, else Apache Kafka in a container
    (our image, through testcontainers) when a Docker engine answers (required under CI), else
    Apache Kafka from the jars `make jvm` resolves, else the embedded Tansu broker (ingest.devtools.broker)."""
    from ingest.devtools.broker import broker

    with broker(log_dir=tmp_path_factory.mktemp("broker")) as b:
        print(f"\n[kafka_broker] {b.describe()}", file=sys.stderr)
        yield b


@pytest.fixture(scope="module")
def bootstrap_servers(kafka_broker: "object", request: pytest.FixtureRequest) -> str:
    note_broker(request.module.__name__, kafka_broker)
    return kafka_broker.bootstrap_servers  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def spark() -> Iterator["object"]:
    """One local SparkSession per test session: the JVM starts once."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from ingest.spark_session import build_session

    session = build_session(master="local[2]", app_name="commitlog-tests", extra_conf={
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
    })
    yield session
    session.stop()


@pytest.fixture(params=["kafka-python", "spark-kafka"])
def source(request: pytest.FixtureRequest) -> str:
    """Each Kafka source the job can read through (``--source``): ours and Spark's own connector
    (its jars from `make jvm`, on the session's classpath: ingest.spark_session)."""
    return str(request.param)


@pytest.fixture
def golden_dir() -> Path:
    return Path(os.environ.get("COMMITLOG_GOLDEN_DIR", ROOT.parent / "shared" / "golden"))


@pytest.fixture(scope="session")
def rocketmq_nameservers(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    """One RocketMQ NameServer per version (tests/helpers/brokers/rocketmq.py), started when a test first asks for
    it: ``rocketmq_nameservers.get("4")``; the brokers of every module register with it."""
    from tests.helpers.brokers.rocketmq import NameServers

    servers = NameServers(tmp_path_factory.mktemp("rocketmq-namesrv"))
    yield servers
    servers.stop()

