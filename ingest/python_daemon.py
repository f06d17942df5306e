"""PySpark's daemon for the job's Python workers (`spark.python.daemon.module`), with one change: a
worker's TCP socket to its executor acknowledges and sends at once.

Over loopback TCP an executor's small writes to its Python worker wait for the worker's ACK (Nagle's
algorithm), and Linux holds that ACK back up to 40 ms once the connection looks interactive (a
delayed ACK): every Python task, every micro-batch, lost ~40 ms to that. TCP_QUICKACK has the worker
acknowledge at once; Linux leaves quick-ACK mode again by itself, so it is set anew before each task
the worker runs. TCP_NODELAY does the same for the worker's own small writes. A Unix socket
(`spark.python.unix.domain.socket.enabled`) has neither stall, but there PySpark's daemon prints a
traceback for a worker whose executor hung up at stop (README "Latency").

Started by Spark as ``python -m ingest.python_daemon``; it imports nothing of ours, so nothing starts
a thread before the daemon forks its workers."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pyspark.daemon

Worker = Callable[[socket.socket, bool], int]

# (level, option) pairs this platform has: TCP_QUICKACK is Linux's
PROMPT_TCP = [(socket.IPPROTO_TCP, getattr(socket, name)) for name in ("TCP_NODELAY", "TCP_QUICKACK")
              if hasattr(socket, name)]


def prompt(worker: Worker) -> Worker:
    """``worker`` (PySpark's daemon.worker, called once per task on the worker's one socket), with its
    TCP socket set to acknowledge and send without waiting first."""

    def run(sock: socket.socket, authenticated: bool) -> int:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, option in PROMPT_TCP:
                sock.setsockopt(level, option, 1)
        return worker(sock, authenticated)

    return run


def main() -> None:
    # the daemon's manager looks its worker function up in its own module before each task
    pyspark.daemon.worker = prompt(pyspark.daemon.worker)
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
