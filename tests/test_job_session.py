"""The Spark session `run` and `replay` build for themselves (ingest.lifecycle.spark_session): the
settings it gives Spark, and those a --spark-conf adds, reach the executors' Python workers.

Each case builds the job's session in a process of its own (a JVM's core settings are fixed when its
context starts, so the test session shared by the other tests cannot show them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROBE = r"""
import json, sys
import pyarrow as pa
from ingest.config import JobConfig
from ingest.lifecycle import spark_session

cfg = JobConfig(store=sys.argv[1], master="local[1]", skip_preflight=True,
                spark_conf=dict(kv.split("=", 1) for kv in sys.argv[2:]))
spark = spark_session(cfg)

def where_the_task_runs(batches):
    import os
    for _ in batches:
        pass
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:   # the daemon that forked the worker
        daemon = cmdline.read().split(b"\0")[2].decode()
    yield pa.RecordBatch.from_pydict({"unix": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false").lower()],
                                      "daemon": [daemon]})

row = spark.range(1).mapInArrow(where_the_task_runs, "unix string, daemon string").collect()[0]
print(json.dumps({"unix": row.unix, "daemon": row.daemon}))
spark.stop()
"""


def python_task_socket(tmp_path: Path, *spark_conf: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "store"), *spark_conf],
                          capture_output=True, text=True, timeout=180, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    return said["unix"], said["daemon"]


def test_python_tasks_talk_to_their_executor_over_a_unix_socket_through_our_daemon_unless_told_not_to(
        tmp_path: Path) -> None:
    # no ~40 ms Nagle/delayed-ACK stall a task; our daemon keeps a worker whose executor hung up quiet
    assert python_task_socket(tmp_path) == ("true", "ingest.python_daemon")
    assert python_task_socket(tmp_path, "spark.python.unix.domain.socket.enabled=false")[0] == "false"
    assert python_task_socket(tmp_path, "spark.python.daemon.module=pyspark.daemon") == ("true", "pyspark.daemon")


HANG_UP = r"""
import os, socket
os.environ["PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"] = "true"   # as Spark's executors set it
import pyspark.daemon, pyspark.worker
from ingest.python_daemon import quiet_on_hang_up

def task(infile, outfile):
    outfile.write(b"the task's last words")   # buffered: the daemon flushes them after the task

pyspark.worker.main = task

def outcome(worker, executor_hung_up):
    ours, executor = socket.socketpair(socket.AF_UNIX)
    if executor_hung_up:
        executor.close()
    try:
        return str(worker(ours, True))
    except BrokenPipeError:
        return "BrokenPipeError"

for hung_up in (False, True):
    print(outcome(pyspark.daemon.worker, hung_up), outcome(quiet_on_hang_up(pyspark.daemon.worker), hung_up))
"""


def test_a_worker_whose_executor_hung_up_ends_quietly_where_pysparks_daemon_raises() -> None:
    done = subprocess.run([sys.executable, "-c", HANG_UP], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["0 0", "BrokenPipeError 1"]
