"""A stream reader stopped because Spark hung up on PySpark's streaming source runner leaves that
process quietly (ingest/stream_runner.py): no BrokenPipeError traceback in the job's output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingest.stream_runner import leave_if_spark_hung_up

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

# What the runner does when the JVM closes its socket: the EOFError from its read, the reader's
# stop() in a finally, then an attempt to report the error on the closed socket.
RUNNER_LIKE = """
import sys
from importlib.machinery import ModuleSpec
sys.modules["__main__"].__spec__ = ModuleSpec(sys.argv[1], None)
from ingest.stream_runner import leave_if_spark_hung_up
try:
    try:
        raise EOFError()
    finally:
        leave_if_spark_hung_up()
except EOFError:
    raise BrokenPipeError(32, "Broken pipe")
"""


def run_as(module: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUNNER_LIKE, module], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_the_runner_leaves_quietly_when_spark_hung_up() -> None:
    done = run_as("pyspark.sql.streaming.python_streaming_source_runner")
    assert (done.returncode, done.stderr) == (0, "")


def test_any_other_process_goes_on_as_before() -> None:
    done = run_as("some.other.module")
    assert done.returncode == 1 and "BrokenPipeError" in done.stderr


def test_a_stop_without_an_error_in_flight_returns() -> None:
    leave_if_spark_hung_up()
    try:
        raise EOFError()
    except EOFError:
        leave_if_spark_hung_up()         # not the runner: nothing happens
