"""Replay progress: per topic and overall, offsets done of total, rate and time left.

A bar redrawn in place when stderr is a terminal; one log line per committed batch otherwise.
Progress is measured from what the store committed (its recorded Kafka offsets), so it never runs
ahead of what a kill would keep.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from ingest.replay.plan import ReplayPlan

log = logging.getLogger("commitlog.replay")

BAR_WIDTH = 24


@dataclass(frozen=True)
class TopicProgress:
    topic: str
    done: int        # offsets of the range now in the store (including what it held at start)
    total: int       # offsets of the range
    this_run: int    # offsets written by this run


def _duration(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class ReplayProgress:
    """``update(kafka_offsets)`` after each commit; ``mode`` is auto | bar | log | none."""

    def __init__(self, plan: ReplayPlan, mode: str = "auto", stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "log"
        self.mode = mode
        self.clock = clock
        self.started = clock()
        self._lines_drawn = 0
        self.current: dict[str, int] = {}

    def topics(self) -> list[TopicProgress]:
        from sink.state import tp_key

        out = []
        for topic in self.plan.topics():
            parts = [p for p in self.plan.partitions if p.topic == topic]
            done = this_run = 0
            for p in parts:
                reached = min(max(self.current.get(tp_key(p.topic, p.partition), 0), p.resume), p.end)
                done += max(0, reached - p.start)
                this_run += max(0, reached - p.resume)
            out.append(TopicProgress(topic, done, sum(p.total for p in parts), this_run))
        return out

    def overall(self) -> TopicProgress:
        ts = self.topics()
        return TopicProgress("overall", sum(t.done for t in ts), sum(t.total for t in ts),
                             sum(t.this_run for t in ts))

    def rate(self) -> float:
        elapsed = self.clock() - self.started
        return self.overall().this_run / elapsed if elapsed > 0 else 0.0

    def eta(self, t: TopicProgress) -> float:
        r = self.rate()
        return (t.total - t.done) / r if r > 0 else float("inf")

    def line(self, t: TopicProgress, width: int) -> str:
        frac = t.done / t.total if t.total else 1.0
        bar = "#" * int(frac * BAR_WIDTH) + "-" * (BAR_WIDTH - int(frac * BAR_WIDTH))
        return (f"{t.topic:<{width}} [{bar}] {t.done:>12,}/{t.total:<12,} {frac:6.1%}  "
                f"{self.rate():>10,.0f} rec/s  left {_duration(self.eta(t))}")

    def update(self, kafka_offsets: Mapping[str, int]) -> None:
        self.current = dict(kafka_offsets)
        if self.mode == "none":
            return
        rows = self.topics()
        if len(rows) > 1:
            rows.append(self.overall())
        width = max(len(r.topic) for r in rows)
        if self.mode == "bar":
            if self._lines_drawn:
                self.stream.write(f"\x1b[{self._lines_drawn}F")   # back to the first line of the block
            for r in rows:
                self.stream.write("\x1b[2K" + self.line(r, width) + "\n")
            self.stream.flush()
            self._lines_drawn = len(rows)
        else:
            o = self.overall()
            per_topic = "; ".join(f"{r.topic} {r.done}/{r.total}" for r in self.topics())
            log.info("replay progress: %d/%d offsets (%.1f%%), %.0f rec/s, %s left; %s", o.done, o.total,
                     100.0 * o.done / o.total if o.total else 100.0, self.rate(), _duration(self.eta(o)),
                     per_topic)

    def elapsed(self) -> float:
        return self.clock() - self.started
