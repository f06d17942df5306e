"""`make demo` end to end, smaller: its own broker and job, the bad events dead-lettered, the
awkward headers read back from KAFKA_HEADERS, verify clean. The demo's idea of a bad event must
follow the mapping's rules; this is where a change of those rules shows. Then RocketMQ 4.9's own
DefaultLitePullConsumer, through a 4.9 broker on the demo's store, gets every message of it (issue 35:
it stalled on the empty bodies stores used to hold). The demo prints only our lines: no Spark, Hadoop
or JVM notice a user cannot act on, while a real Spark warning or error still shows (issue 65)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from ingest.devtools.demo import TOPICS
from tests.helpers.brokers.rocketmq import RocketBroker, clients

pytestmark = pytest.mark.integration


# our lines: the logging of `commitlog` (ingest.cli), the demo's own, and the stat / verify it prints
OURS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) [\w.]+: |demo: |  |/)")
# log4j's (Spark's pattern) at ERROR, and what follows it: its stack trace
SPARK_ERROR = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ERROR ")
TRACE = re.compile(r"^(\s+at |\s*\.\.\. \d+ more|Caused by: |[\w.$]+(Exception|Error)\b)")


def not_ours(output: str) -> list[str]:
    """The lines of ``output`` that are neither ours nor part of an error."""
    foreign, in_error = [], False
    for line in output.splitlines():
        if SPARK_ERROR.match(line):
            in_error = True
        elif OURS.match(line) or not line.strip():
            in_error = False
        elif not (in_error and TRACE.match(line)):
            foreign.append(line)
    return foreign


def test_lines_that_are_not_ours_are_told_apart_from_ours_and_errors() -> None:
    ours = ("2026-12-02 00:42:20,912 INFO sink.writer: store open\ndemo: OK\n/tmp/s (store): OK\n  1 segments\n"
            "26/12/02 00:43:58 ERROR Executor: task failed\njava.io.IOException: disk\n\tat a.b(C.java:1)\n")
    assert not_ours(ours) == []
    noise = ["26/12/02 00:42:33 WARN Utils: Your hostname, vm, resolves to a loopback address",
             "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties",
             "WARNING: Using incubator modules: jdk.incubator.vector", "\tat a.b(C.java:1)"]
    assert not_ours("\n".join(noise)) == noise


def test_the_demo_runs_clean(tmp_path: Path, rocketmq_nameservers: object) -> None:
    result = subprocess.run([sys.executable, "-m", "ingest.devtools.demo", "--events", "6000",
                             "--store", str(tmp_path / "demo-store"), "--timeout", "240"],
                            capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert result.returncode == 0 and "demo: OK: 5991 messages, 9 dead letters, verify clean" in result.stdout, (
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert not_ours(result.stdout) == [] and not_ours(result.stderr) == [], result.stderr[-3000:]
    # the job's first line of its own: the version (after the store's open line, once nothing refused)
    job_lines = [ln for ln in result.stderr.splitlines() if " commitlog.run: " in ln]
    assert re.search(r"INFO commitlog.run: commitlog \S+ run: store ", job_lines[0]), result.stderr
    assert "messages with their headers in KAFKA_HEADERS" in result.stdout
    assert ", 0 empty bodies" in result.stdout

    ns = rocketmq_nameservers.get("4")  # type: ignore[attr-defined]
    with RocketBroker.start(tmp_path / "demo-store", ns, "4"):
        rows = clients("4").run("lite", ns.address, "demo-lite", "5991", "4000", *TOPICS)
    coords = Counter((r["properties"]["KAFKA_TOPIC"], r["properties"]["KAFKA_PARTITION"],
                      r["properties"]["KAFKA_OFFSET"]) for r in rows)
    assert len(coords) == 5991 and set(coords.values()) == {1}, (len(rows), len(coords))
    assert all(r["body"] for r in rows)


QUIET_CHECK = textwrap.dedent("""
    from ingest.spark_session import build_session
    spark = build_session("local[1]", app_name="quiet-check", extra_conf={"spark.ui.enabled": "false"})
    log4j = spark._jvm.org.apache.logging.log4j.LogManager
    log4j.getLogger("org.apache.spark.scheduler.DAGScheduler").warn("Failed to cancel job group g1. Cannot find")
    log4j.getLogger("org.apache.spark.scheduler.DAGScheduler").warn("a real scheduler warning")
    log4j.getLogger("org.apache.spark.util.Utils").warn("Set SPARK_LOCAL_IP if you need to bind to another address")
    log4j.getLogger("org.apache.spark.util.Utils").error("a real utils error")
    log4j.getLogger("org.apache.hadoop.util.NativeCodeLoader").warn("Unable to load native-hadoop library")
    log4j.getLogger("org.apache.hadoop.fs.FileSystem").warn("a real hadoop warning")
    spark.stop()
""")


def test_a_local_session_starts_quiet_and_still_shows_real_warnings_and_errors(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", QUIET_CHECK], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    shown = [line.split(": ", 1)[-1] for line in lines]
    assert shown == ["a real scheduler warning", "a real utils error", "a real hadoop warning"], result.stderr
    assert [line.split()[2:4] for line in lines] == [["WARN", "DAGScheduler:"], ["ERROR", "Utils:"],
                                                   ["WARN", "FileSystem:"]], result.stderr
