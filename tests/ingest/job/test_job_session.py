"""The Spark session `run` and `replay` build for themselves (ingest.lifecycle.spark_session): the
settings it gives Spark, and those a --spark-conf adds, reach the executors' Python workers.

Each case builds the job's session in a process of its own (a JVM's core settings are fixed when its
context starts, so the test session shared by the other tests cannot show them)."""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.python_daemon import prompt, settled, without_jars

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
    import gc, os, socket, sys, zipimport
    for _ in batches:
        pass
    # what each task's importlib.invalidate_caches() has read again
    archives = sorted({os.path.basename(v.archive) for v in sys.path_importer_cache.values()
                       if isinstance(v, zipimport.zipimporter)})
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:   # the daemon that forked the worker
        daemon = cmdline.read().split(b"\0")[2].decode()
    nodelay = []                                                  # of the worker's TCP sockets
    for fd in os.listdir("/proc/self/fd"):
        try:
            what = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:                                   # listdir's own, closed by now
            continue
        if what.startswith("socket:"):
            sock = socket.socket(fileno=os.dup(int(fd)))
            if sock.family == socket.AF_INET:
                nodelay.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            sock.close()
    yield pa.RecordBatch.from_pydict({"unix": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false").lower()],
                                      "daemon": [daemon], "nodelay": [json.dumps(sorted(set(nodelay)))],
                                      "frozen": [gc.get_freeze_count() > 0], "archives": [json.dumps(archives)]})

row = spark.range(1).mapInArrow(where_the_task_runs,
                                "unix string, daemon string, nodelay string, frozen boolean, archives string") \
    .collect()[0]
print(json.dumps({"unix": row.unix, "daemon": row.daemon, "nodelay": json.loads(row.nodelay), "frozen": row.frozen,
                  "archives": json.loads(row.archives)}))
spark.stop()
"""


def python_task(tmp_path: Path, *spark_conf: str) -> dict:
    """How the job's executor talks to a Python task's worker: over a Unix socket or not, from which
    daemon, TCP_NODELAY on its TCP sockets; whether the worker's long-lived objects are frozen; the
    archives its zip importers read."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "store"), *spark_conf],
                          capture_output=True, text=True, timeout=180, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_python_tasks_talk_to_their_executor_over_prompt_tcp_through_our_daemon_unless_told_otherwise(
        tmp_path: Path) -> None:
    # over TCP, a worker that waits to acknowledge costs every task ~40 ms; a Unix socket is the
    # user's choice (PySpark's daemon prints a traceback when an executor closes one at stop)
    ours = python_task(tmp_path)
    ours.pop("archives")
    assert ours == {"unix": "false", "daemon": "ingest.python_daemon", "nodelay": [1], "frozen": True}
    theirs = python_task(tmp_path, "spark.python.daemon.module=pyspark.daemon")
    theirs.pop("archives")
    assert theirs == {"unix": "false", "daemon": "pyspark.daemon", "nodelay": [0], "frozen": False}
    assert python_task(tmp_path, "spark.python.unix.domain.socket.enabled=true")["unix"] == "true"


def test_python_tasks_read_no_jar_before_each_task_and_no_pyspark_zip_from_our_home(tmp_path: Path) -> None:
    # PySpark's worker has every zip importer read its archive's directory again before each task:
    # Spark's core jar (~6,000 entries) and pyspark.zip (~2,600) cost tens of milliseconds a task
    from ingest.spark_archive import spark_home

    assert spark_home() is not None, "no Spark home for this Python and pyspark: `make spark-archive` makes it"
    assert python_task(tmp_path)["archives"] == ["py4j-0.10.9.9-src.zip"]
    assert any(a.startswith("spark-core") and a.endswith(".jar")
               for a in python_task(tmp_path, "spark.python.daemon.module=pyspark.daemon")["archives"])


def test_our_daemon_takes_jars_and_the_importers_inside_them_off_the_path() -> None:
    jar = "/spark/jars/spark-core_2.13-4.2.0.jar"
    path = ["/home/python/lib/py4j-src.zip", jar, "/venv/site-packages"]
    importers: dict[str, object] = {p: object() for p in path}
    importers[jar + "/org"] = object()
    importers["/data/jarvis"] = object()
    without_jars(path, importers)
    assert path == ["/home/python/lib/py4j-src.zip", "/venv/site-packages"]
    assert sorted(importers) == ["/data/jarvis", "/home/python/lib/py4j-src.zip", "/venv/site-packages"]


def connected_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        executor = socket.create_connection(server.getsockname())
        worker, _ = server.accept()
    return executor, worker


def test_our_daemon_runs_each_task_on_a_socket_that_acknowledges_and_sends_at_once() -> None:
    seen: list[tuple[int, int]] = []

    def task(sock: socket.socket, authenticated: bool) -> int:
        seen.append((sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
                     sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)   # as Linux leaves quick-ACK mode
        return 0

    executor, worker = connected_pair()
    with executor, worker:
        assert worker.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        run = prompt(task)
        assert [run(worker, True), run(worker, True)] == [0, 0]
    assert seen == [(1, 1), (1, 1)]                 # set again before every task the worker runs
    unix, other = socket.socketpair(socket.AF_UNIX)
    with unix, other:
        assert prompt(lambda sock, authenticated: 7)(unix, True) == 7


def test_our_daemon_freezes_what_outlived_the_last_tasks_collection_and_unfreezes_once_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # PySpark collects garbage after every task: with the worker's long-lived objects frozen, that
    # pass covers only what the task made; now and then a task's pass covers everything again
    from ingest import python_daemon

    clock = [100.0]
    monkeypatch.setattr(python_daemon.time, "monotonic", lambda: clock[0])
    frozen_during: list[bool] = []

    def task(sock: socket.socket, authenticated: bool) -> int:
        frozen_during.append(gc.get_freeze_count() > 0)
        return 0

    try:
        run = settled(task, every_s=60.0)
        for advance in (0.0, 30.0, 31.0, 1.0):
            clock[0] += advance
            assert run(None, True) == 0  # type: ignore[arg-type]
    finally:
        gc.unfreeze()
    assert frozen_during == [True, True, False, True]
