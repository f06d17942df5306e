"""How far a streaming job is behind Kafka, from Spark's query progress.

Spark's Kafka source reports minOffsetsBehindLatest, maxOffsetsBehindLatest and
avgOffsetsBehindLatest as source metrics; PySpark's Python data source API has no hook for those, so
the job works them out of each progress' ``endOffset`` and ``latestOffset`` (what our source's
``reportLatestOffset`` gives): one log line per batch, and the per-partition figures for the
metrics (ingest.metrics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("commitlog.run")


def partition_lag(end: Any, latest: Any) -> dict[tuple[str, int], int]:
    """Per (topic, partition), latest - end, from the progress' offset JSON ({"topic": {"0": 42}})."""
    def parse(value: Any) -> dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return {}
        return value if isinstance(value, dict) else {}

    ends, latests = parse(end), parse(latest)
    out: dict[tuple[str, int], int] = {}
    for topic, parts in latests.items():
        if not isinstance(parts, dict):
            continue
        for p, off in parts.items():
            done = ends.get(topic, {}).get(p) if isinstance(ends.get(topic), dict) else None
            if isinstance(off, int) and isinstance(done, int):
                out[(topic, int(p))] = max(off - done, 0)
    return out


def offsets_behind(end: Any, latest: Any) -> list[int]:
    """Per partition, latest - end (partition_lag's figures)."""
    return list(partition_lag(end, latest).values())


class LagLog:
    """One log line per batch with how far its end lies behind the latest offsets the source saw
    (min, avg, max per partition); ``on_lag`` gets the per-partition figures of every new progress,
    the idle ones between batches included."""

    def __init__(self, on_lag: Callable[[Mapping[tuple[str, int], int]], None] | None = None) -> None:
        self.batch_id = -1
        self.timestamp: str | None = None
        self.last: dict[str, float] | None = None
        self.on_lag = on_lag

    def after(self, progress: Mapping[str, Any] | None) -> None:
        if not progress or progress.get("timestamp") == self.timestamp:
            return
        self.timestamp = progress.get("timestamp")
        new_batch = progress.get("batchId", -1) != self.batch_id
        self.batch_id = progress.get("batchId", -1)
        for source in progress.get("sources") or ():
            lag = partition_lag(source.get("endOffset"), source.get("latestOffset"))
            if lag and self.on_lag is not None:
                self.on_lag(lag)
            behind = list(lag.values())
            if behind and new_batch:
                self.last = {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
                             "avgOffsetsBehindLatest": sum(behind) / len(behind)}
                log.info("batch %d: %d offsets behind latest (per partition min %d, avg %.1f, max %d)",
                         self.batch_id, sum(behind), self.last["minOffsetsBehindLatest"],
                         self.last["avgOffsetsBehindLatest"], self.last["maxOffsetsBehindLatest"])
