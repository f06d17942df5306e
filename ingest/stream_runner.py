"""What a streaming Python data source's reader does when Spark hangs up on it.

PySpark runs a streaming Python data source's reader in a process of its own
(pyspark.sql.streaming.python_streaming_source_runner), which serves the driver JVM's calls over a
socket until the JVM closes it: when a query stops, for whatever reason. The runner then calls the
reader's ``stop()`` and tries to send the EOFError it got back over the closed socket, which ends in
a BrokenPipeError traceback printed into the job's output, at random (it races the JVM ending the
process). A job that stops cleanly or says its one error line must not print it.
"""

from __future__ import annotations

import os
import sys

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def in_streaming_runner() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == RUNNER


def leave_if_spark_hung_up() -> None:
    """Called at the end of a stream reader's ``stop()``: when the runner is stopping it because the
    JVM closed the socket (the EOFError in flight), nobody is left to answer, so the runner process
    exits here, quietly, its reader already stopped. Anywhere else this does nothing."""
    if isinstance(sys.exc_info()[1], EOFError) and in_streaming_runner():
        sys.stderr.flush()
        os._exit(0)
