"""PySpark's daemon for the job's Python workers (`spark.python.daemon.module`), with one change: a
worker whose executor has already hung up ends quietly.

The job's executors talk to their Python workers over a Unix socket (ingest.lifecycle): over loopback
TCP every Python task waits ~40 ms for a small write (Nagle's algorithm meeting a delayed ACK). On a
Unix socket a worker's last flush after its executor closed the socket (a task killed as the job
stops) fails at once, where TCP takes the write; PySpark's daemon then prints that BrokenPipeError's
traceback to the job's stderr, beside the job's own one line. Nothing is lost by ending quietly: the
executor that closed the socket has already given up on the task's output.

Started by Spark as ``python -m ingest.python_daemon [worker module]``; it imports nothing of ours,
so nothing starts a thread before the daemon forks its workers."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pyspark.daemon

Worker = Callable[[socket.socket, bool], int]


def quiet_on_hang_up(worker: Worker) -> Worker:
    """``worker`` (PySpark's daemon.worker), returning 1 instead of raising when its socket's peer is
    gone: the daemon then waits for the socket to close and ends the process with no traceback."""

    def run(sock: socket.socket, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


def main() -> None:
    # the daemon's manager looks its worker function up in its own module at each fork
    pyspark.daemon.worker = quiet_on_hang_up(pyspark.daemon.worker)
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
