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
    yield pa.RecordBatch.from_pydict({"unix": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false").lower()]})

row = spark.range(1).mapInArrow(where_the_task_runs, "unix string").collect()[0]
print(json.dumps({"unix": row.unix}))
spark.stop()
"""


def python_task_socket(tmp_path: Path, *spark_conf: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "store"), *spark_conf],
                          capture_output=True, text=True, timeout=180, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["unix"]


def test_python_tasks_talk_to_their_executor_over_a_unix_socket_only_when_told(tmp_path: Path) -> None:
    # faster (no ~40 ms Nagle/delayed-ACK stall a task), but PySpark's daemon prints a traceback when
    # an executor closes a worker's Unix socket at stop: the user's choice, not the default
    assert python_task_socket(tmp_path) == "false"
    assert python_task_socket(tmp_path, "spark.python.unix.domain.socket.enabled=true") == "true"
