"""PySpark's daemon for the job's Python workers (`spark.python.daemon.module`), with three changes: a
worker's TCP socket to its executor acknowledges and sends at once, the garbage collection PySpark
runs after every task looks only at what the task made, and Spark's jar is off the workers' path.

Over loopback TCP an executor's small writes to its Python worker wait for the worker's ACK (Nagle's
algorithm), and Linux holds that ACK back up to 40 ms once the connection looks interactive (a
delayed ACK): every Python task, every micro-batch, lost ~40 ms to that. TCP_QUICKACK has the worker
acknowledge at once; Linux leaves quick-ACK mode again by itself, so it is set anew before each task
the worker runs. TCP_NODELAY does the same for the worker's own small writes. A Unix socket
(`spark.python.unix.domain.socket.enabled`) has neither stall, but there PySpark's daemon prints a
traceback for a worker whose executor hung up at stop (README "Latency").

After each task a reused worker runs a full ``gc.collect()``: a pass over every object the worker
holds (PySpark, pyarrow, numpy, the pooled Kafka consumers), tens of milliseconds of CPU a task, taken
from the driver and the next task on a small machine. What is alive after that pass lives across
tasks: before the next task it is moved to the permanent generation (``gc.freeze``), so the pass
after it covers the task's own objects. Once a minute nothing is frozen for a task, so an object held
across tasks that has since become cyclic garbage is still collected.

Spark puts its core jar on every Python worker's path (PythonUtils.sparkPythonPath), and a zip importer
for it lands in the path's importer cache once any import looks there. PySpark's worker calls
``importlib.invalidate_caches()`` before each task, and Python's zip importer answers by reading the
jar's whole directory again: ~6,000 entries, tens of milliseconds of CPU a task. The jar holds no
Python module, so the daemon takes it off the path before it forks its workers.

Started by Spark as ``python -m ingest.python_daemon``, in Python's safe-path mode (ingest.spark_session,
SAFE_PATH: the working directory, where ``-m`` would look first, is not on its path); it imports
nothing of ours, so nothing starts a thread before the daemon forks its workers."""

from __future__ import annotations

import gc
import socket
import sys
import time
from collections.abc import Callable

import pyspark.daemon

Worker = Callable[[socket.socket, bool], int]

# (level, option) pairs this platform has: TCP_QUICKACK is Linux's
PROMPT_TCP = [(socket.IPPROTO_TCP, getattr(socket, name)) for name in ("TCP_NODELAY", "TCP_QUICKACK")
              if hasattr(socket, name)]

# how often a task's garbage collection covers every object again (settled)
FULL_COLLECTION_EVERY_S = 60.0


def prompt(worker: Worker) -> Worker:
    """``worker`` (PySpark's daemon.worker, called once per task on the worker's one socket), with its
    TCP socket set to acknowledge and send without waiting first."""

    def run(sock: socket.socket, authenticated: bool) -> int:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, option in PROMPT_TCP:
                sock.setsockopt(level, option, 1)
        return worker(sock, authenticated)

    return run


def settled(worker: Worker, every_s: float = FULL_COLLECTION_EVERY_S) -> Worker:
    """``worker`` with what survived the last task's collection frozen before the next task, except
    for one task every ``every_s`` seconds, whose collection is a full one."""
    full_at = time.monotonic()

    def run(sock: socket.socket, authenticated: bool) -> int:
        nonlocal full_at
        if time.monotonic() - full_at >= every_s:
            gc.unfreeze()
            full_at = time.monotonic()
        else:
            gc.freeze()
        return worker(sock, authenticated)

    return run


def without_jars(path: list[str], importers: dict[str, object]) -> None:
    """Take the jars off ``path`` (a worker's sys.path) and their importers out of ``importers``
    (its sys.path_importer_cache, where an entry inside a jar has one of its own)."""
    def in_jar(entry: str) -> bool:
        return entry.endswith(".jar") or ".jar/" in entry

    path[:] = [p for p in path if not in_jar(p)]
    for key in [k for k in importers if in_jar(k)]:
        del importers[key]


def main() -> None:
    without_jars(sys.path, sys.path_importer_cache)     # type: ignore[arg-type]
    # the daemon's manager looks its worker function up in its own module before each task
    pyspark.daemon.worker = settled(prompt(pyspark.daemon.worker))
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
