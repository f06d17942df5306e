"""Crash points for the crash tests: the job kills itself with SIGKILL at a named step of the protocol.

Set ``COMMITLOG_CRASH_AT=<point>:<n>`` (points: after-append, after-flush, after-commit) to die at the
n-th batch that reaches that point. Unset in production, where ``crash_point`` is one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "COMMITLOG_CRASH_AT"


class CrashPoints:
    """Counts how often each point was reached and dies at the configured one."""

    def __init__(self, spec: str | None = None) -> None:
        spec = os.environ.get(ENV, "") if spec is None else spec
        point, _, nth = spec.partition(":")
        self.point = point or None
        self.nth = int(nth or 1)
        self.seen: dict[str, int] = {}

    def reached(self, point: str) -> None:
        if self.point != point:
            return
        self.seen[point] = self.seen.get(point, 0) + 1
        if self.seen[point] >= self.nth:
            os.kill(os.getpid(), signal.SIGKILL)
