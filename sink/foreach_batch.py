"""The foreachBatch function: hands each ordered batch to the one driver-side writer.

How a batch is made (mapping, encoding) is the caller's business: ``collect`` runs the Spark job
(DataFrame -> the batch on the driver, sink.batch's form, no store state needed). This module owns
the order of things: skip a batch already committed, collect it, prepare it against the writer's
committed state (sink.batch.prepare), write and commit it, log one line.

With ``overlap``, a batch is prepared, written and committed on a writer thread while Spark records
it and collects the next one: the driver's share of a batch leaves Spark's critical path
(BENCHMARKS.md, "Pipeline"). At most one batch is in the writer; the next call waits for it. A
failed write (a full disk) stops the sink: where Spark's record of the batches can be rewound to the
store on the next start (sink.spark_checkpoint), later calls return without a word and the job reads
``failure`` and stops, so the cause is one line and not a stack trace through Spark; elsewhere the
call raises it, which fails the query.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sink.batch import prepare
from sink.spark_checkpoint import checkpoint_query_id, local_checkpoint_path
from sink.writer import BatchStats, CommitLogWriter

log = logging.getLogger("commitlog.batch")

# The writer thread's nice value. Off Spark's critical path, the write should take the CPU Spark leaves
# idle: at normal priority it competes with Spark's own per-batch work (offset and commit logs,
# planning), which is on the critical path (BENCHMARKS.md, "Pipeline").
WRITER_NICE = 10

Collect = Callable[[Any], pa.Table]   # DataFrame -> the batch on the driver (sink.batch), source order
# On the writer thread, before prepare: what a collected batch must pass before any of it is written
# (sink.handover.spool.Spool.check); returns the batch as prepare takes it.
Check = Callable[[pa.Table], pa.Table]


class BatchWriteError(RuntimeError):
    """Writing a batch to the store failed; nothing of it is committed. ``cause``: the store's error."""

    def __init__(self, batch_id: int, cause: BaseException) -> None:
        self.batch_id, self.cause = batch_id, cause
        super().__init__(f"writing batch {batch_id} to the store failed: {cause}")


@dataclass
class BatchTotals:
    """What the batches this sink wrote add up to (the run's summary line)."""

    batches: int = 0
    records: int = 0
    dead_letters: int = 0
    tombstones: int = 0       # Kafka null values, stored as a 1-byte body with KAFKA_VALUE_NULL
    empty_values: int = 0     # 0-byte Kafka values, stored as a 1-byte body with KAFKA_VALUE_EMPTY

    def add(self, stats: BatchStats) -> None:
        self.batches += 1
        self.records += stats.records
        self.dead_letters += stats.dead_letters
        self.tombstones += stats.tombstones
        self.empty_values += stats.empty_values

    def line(self) -> str:
        return (f"{self.batches} batches, {self.records} records ({self.tombstones} tombstones and "
                f"{self.empty_values} empty values among them, stored as a 1-byte body), {self.dead_letters} "
                f"dead letters")


class ForeachBatchSink:
    """Callable for ``writeStream.foreachBatch``; serialises batches against a stop request."""

    def __init__(self, writer: CommitLogWriter, collect: Collect, checkpoint_dir: str | None = None, on_batch: Callable[[BatchStats], None] | None = None,
                 overlap: bool = False, check: Check | None = None) -> None:
        self.writer = writer
        self.collect = collect
        self.check = check
        self.checkpoint_dir = checkpoint_dir
        self.on_batch = on_batch
        self.lock = threading.Lock()       # held for the whole of a call
        self.stopping = threading.Event()
        self.batches = 0
        self.totals = BatchTotals()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="commitlog-write",
                                            initializer=_lower_priority) if overlap else None
        self._pending: Future[None] | None = None
        self._pending_id = -1
        self._failure: BatchWriteError | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        with self.lock:
            if self.stopping.is_set():
                # The job is stopping: this batch is left to the next run. Returning is quiet (an
                # exception here is a Python traceback in Spark's log) and safe where Spark's record
                # of the batch is rewound to the store on the next start (sink.spark_checkpoint);
                # elsewhere only failing the batch keeps Spark from counting it as done.
                if not self._rewindable():
                    raise InterruptedError(f"batch {batch_id} not started: the job is stopping")
                log.info("batch %d left to the next run: the job is stopping", batch_id)
                return
            if self._executor is not None and self.failure is not None and self._rewindable():
                self.stopping.set()     # the job reads ``failure`` and stops; Spark's record is rewound
                return
            started = time.perf_counter()
            query_id = checkpoint_query_id(self.checkpoint_dir)
            # A batch in the writer has a lower id than this one, so the committed state decides.
            if self.writer.should_skip(batch_id, query_id):
                log.info("batch %d already committed (store batch %d): skipped", batch_id,
                         self.writer.state.batch_id)
                return
            try:
                table = self.collect(df)
            except Exception as exc:
                log.error("batch %d not committed: %s", batch_id, _first_line(exc))
                raise
            collected = time.perf_counter()
            try:
                self._settle()
            except BatchWriteError:
                if not self._rewindable():
                    raise
                self.stopping.set()
                log.debug("batch %d not written: an earlier write failed", batch_id)
                return
            if self._executor is None:
                try:
                    self._write(batch_id, query_id, table, started, collected)
                except Exception as exc:  # noqa: BLE001 - kept for the later calls
                    self._failure = BatchWriteError(batch_id, exc)
                    raise
            else:
                self._pending = self._executor.submit(self._write, batch_id, query_id, table, started, collected)
                self._pending_id = batch_id

    def _rewindable(self) -> bool:
        """Spark's record of a batch the store did not commit is undone on the next start."""
        return self.checkpoint_dir is None or local_checkpoint_path(self.checkpoint_dir) is not None

    @property
    def failure(self) -> BatchWriteError | None:
        """The failed write, once the writer thread is done with it (never waits)."""
        pending = self._pending
        if self._failure is None and pending is not None and pending.done() and pending.exception() is not None:
            exc = pending.exception()
            assert exc is not None
            self._failure = BatchWriteError(self._pending_id, exc)
        return self._failure

    def _write(self, batch_id: int, query_id: str | None, table: pa.Table, started: float,
               collected: float) -> None:
        try:
            if self.check is not None:
                table = self.check(table)
            stats = self.writer.write_batch(batch_id, query_id, prepare(table, self.writer.state.kafka_offsets))
        except Exception as exc:
            log.error("batch %d not committed: %s", batch_id, exc)
            raise
        stats = dataclasses.replace(stats, collect_ms=(collected - started) * 1e3)
        total = time.perf_counter() - started
        self.batches += 1
        latency = stats.latency_s()
        log.info("batch %d: %d records, %.0f rec/s, %.0f ms (spark %.0f, append %.0f, index %.0f, flush %.0f, "
                 "commit %.0f), latency p50 %s max %s, commit-log offset %d, %d dead letters, %d tombstones, "
                 "%d empty values",
                 batch_id, stats.records, stats.records / total if total else 0.0, total * 1e3,
                 stats.collect_ms, stats.append_ms, stats.index_ms, stats.flush_ms, stats.commit_ms,
                 _ms(float(np.median(latency))) if len(latency) else "-", _ms(float(latency.max())) if len(latency) else "-",
                 stats.commit_offset, stats.dead_letters, stats.tombstones, stats.empty_values)
        self.totals.add(stats)
        if self.on_batch:
            self.on_batch(stats)

    def _settle(self) -> None:
        """Wait for the batch in the writer; raise its failure (then and on every later call: a
        failed write leaves the store to be recovered by reopening it)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception as exc:  # noqa: BLE001 - kept and raised to every later caller
                self._failure = BatchWriteError(self._pending_id, exc)
        if self._failure is not None:
            raise self._failure

    def drain(self) -> None:
        """Wait until every batch handed to the writer is committed; raise if one failed."""
        with self.lock:
            self._settle()

    def request_stop(self, timeout_s: float | None = None) -> bool:
        """Wait for the batch in progress (and in the writer) to commit, then refuse new ones. True
        if none was cut. A failed write is raised by ``drain``/``close``, not here."""
        acquired = self.lock.acquire(timeout=-1 if timeout_s is None else timeout_s)
        self.stopping.set()
        if acquired:
            try:
                self._settle()
            except BatchWriteError:
                pass
            finally:
                self.lock.release()
        return acquired

    def close(self) -> None:
        """Wait for the writer thread and end it; raise if a batch handed to it failed."""
        try:
            self.drain()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _first_line(exc: BaseException) -> str:
    """A Spark failure's message runs on with its Java stack: its first line says what happened."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _lower_priority() -> None:
    """Give the calling thread WRITER_NICE (Linux: a thread is a task with its own nice value; the
    store's helper threads started from it inherit it). Where that is not possible, run as is."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
    except (AttributeError, OSError) as exc:
        log.debug("writer thread keeps its priority: %s", exc)
