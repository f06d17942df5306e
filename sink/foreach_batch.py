"""The foreachBatch function: hands each ordered batch to the one driver-side writer.

How a batch is prepared (mapping, queue offsets, encoding) is the caller's business (``prepare``);
this module only owns the order of things: skip a batch already committed, prepare it (to an Arrow
table on the driver) against the writer's committed state, write and commit, log one line.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sink.writer import BatchStats, CommitLogWriter

log = logging.getLogger("commitlog.batch")


@dataclass(frozen=True)
class BatchInputs:
    """The writer's committed state a batch is prepared against."""

    kafka_next_offsets: Mapping[str, int]            # "topic/partition" -> first offset not yet stored
    next_queue_offsets: Mapping[tuple[str, int], int]


Prepare = Callable[[Any, BatchInputs], pa.Table]     # (DataFrame, inputs) -> the batch, commit-log order


def checkpoint_query_id(checkpoint_dir: str | None) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``: it names one checkpoint."""
    if not checkpoint_dir:
        return None
    path = Path(checkpoint_dir.removeprefix("file:")) / "metadata"
    try:
        return str(json.loads(path.read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


class ForeachBatchSink:
    """Callable for ``writeStream.foreachBatch``; serialises batches against a stop request."""

    def __init__(self, writer: CommitLogWriter, prepare: Prepare, checkpoint_dir: str | None = None,
                 on_batch: Callable[[BatchStats], None] | None = None) -> None:
        self.writer = writer
        self.prepare = prepare
        self.checkpoint_dir = checkpoint_dir
        self.on_batch = on_batch
        self.lock = threading.Lock()       # held for the whole of a batch
        self.stopping = threading.Event()
        self.batches = 0

    def __call__(self, df: Any, batch_id: int) -> None:
        with self.lock:
            if self.stopping.is_set():
                # The job is stopping: leave this batch to the next run (Spark will re-plan it).
                raise InterruptedError(f"batch {batch_id} not started: the job is stopping")
            started = time.perf_counter()
            query_id = checkpoint_query_id(self.checkpoint_dir)
            if self.writer.should_skip(batch_id, query_id):
                log.info("batch %d already committed (store batch %d): skipped", batch_id,
                         self.writer.state.batch_id)
                return
            inputs = BatchInputs(dict(self.writer.state.kafka_offsets), self.writer.next_queue_offsets())
            table = self.prepare(df, inputs)
            prepared = time.perf_counter()
            stats = self.writer.write_batch(batch_id, query_id, table)
            total = time.perf_counter() - started
            self.batches += 1
            log.info("batch %d: %d records, %.0f rec/s, %.0f ms (spark %.0f, append %.0f, flush %.0f, "
                     "commit %.0f), commit-log offset %d, %d dead letters",
                     batch_id, stats.records, stats.records / total if total else 0.0, total * 1e3,
                     (prepared - started) * 1e3, stats.append_ms, stats.flush_ms, stats.commit_ms,
                     stats.commit_offset, stats.dead_letters)
            if self.on_batch:
                self.on_batch(stats)

    def request_stop(self, timeout_s: float | None = None) -> bool:
        """Wait for the batch in progress to commit, then refuse new ones. True if none was cut."""
        acquired = self.lock.acquire(timeout=-1 if timeout_s is None else timeout_s)
        self.stopping.set()
        if acquired:
            self.lock.release()
        return acquired
