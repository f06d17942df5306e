"""``commitlog run``: the streaming job, Kafka to CommitLog, exactly once.

The driver holds the one writer of the store. Spark reads Kafka (one task per partition), maps and
encodes in the executors; each micro-batch comes to the driver as Arrow in source order, takes its
queue offsets and is appended and committed by the sink, on its writer thread while Spark runs the
next batch (with a local checkpoint, which the job brings back to the store before it starts:
sink.spark_checkpoint). SIGTERM/SIGINT let the batches in progress commit, then stop.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ingest.broker_groups import owned
from ingest.config import JobConfig, spark_interval
from ingest.reader_options import kafka_reader_options
from ingest.encode.prepare import collect_packed
from ingest.job_settings import codec_config, load_source, mapping_config, source_reader
from ingest.kafka.admin import earliest_offsets
from ingest.kafka.options import DataLossError
from ingest.lag import LagLog
from ingest.lifecycle import JobLifecycle, StopSignal
from ingest.metrics import MetricsPortError, observe_batches
from sink import BatchStats, CommitLogWriter
from sink.foreach_batch import BatchWriteError, ForeachBatchSink
from sink.spark_checkpoint import local_checkpoint_path, rewind_to_store
from sink.state import parse_tp_key

log = logging.getLogger("commitlog.run")


class StreamingQueryError(RuntimeError):
    """Spark's query failed on its own (not in our sink): Spark's reason in one line."""


# the last line of a Python traceback: the exception raised and its message
_RAISED = re.compile(r"^(?!org\.|java\.|py4j\.|scala\.)[A-Za-z_][\w.]*(?:Error|Exception): (.+)$")


def _query_failure(exc: BaseException, checkpoint: str) -> StreamingQueryError:
    """Spark's first line, without its query ids and SQLSTATE (the plan and the stack follow in its
    message); when the function of our own foreachBatch raised, that exception's message instead
    (Spark's first line is then its wrapper)."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    first = lines[0]
    raised = [m.group(1) for m in map(_RAISED.match, lines) if m]
    # Spark's line is its wrapper when our function raised: the error class, or, when Spark passes
    # py4j's message on as it is, the line that ends where the Python traceback starts
    wrapped = "FOREACH_BATCH_USER_FUNCTION_ERROR" in first or first.endswith("Traceback (most recent call last):")
    if wrapped and raised:
        first = raised[-1]
    reason = re.sub(r" SQLSTATE: \w+$", "", first.split("terminated with exception: ", 1)[-1])
    return StreamingQueryError(f"the streaming query failed: {reason} (Spark's checkpoint {checkpoint or 'none'}); "
                               f"the store is closed at its last commit: run again to resume")


def starting_offsets(writer: CommitLogWriter, cfg: JobConfig) -> str | dict:
    """Continue from the Kafka offsets the store recorded, whatever the Spark checkpoint says: a lost
    or reset checkpoint then re-reads nothing the store holds. Like Spark's source, the JSON form must
    name every partition read; partitions the store has not seen start per ``--starting-offsets``.

    Offsets retention deleted while the job was stopped are found here, before Spark starts: with
    --fail-on-data-loss (the default) a DataLossError naming each partition and range, else one
    warning with their count, and the job starts at the earliest offset left."""
    recorded = writer.state.kafka_offsets
    if not recorded:
        return cfg.starting_offsets
    if cfg.assign:
        wanted = {(t, int(p)) for t, ps in json.loads(cfg.assign).items() for p in ps}
        earliest = earliest_offsets(cfg.bootstrap_servers, topics=sorted({t for t, _ in wanted}),
                                    kafka_params=cfg.kafka_option)
        earliest = {tp: off for tp, off in earliest.items() if tp in wanted}
    else:
        earliest = earliest_offsets(cfg.bootstrap_servers, topics=cfg.subscribe,
                                    pattern=cfg.subscribe_pattern, kafka_params=cfg.kafka_option)
    earliest = {tp: earliest[tp] for tp in owned(sorted(earliest), cfg.group)}
    default = {"earliest": -2, "latest": -1}.get(cfg.starting_offsets.strip().lower())
    named: dict[str, dict[str, int]] = {}
    given = {}
    if default is None:  # per-partition JSON given by the user: used where the store has nothing
        given = {(t, int(p)): int(o) for t, ps in json.loads(cfg.starting_offsets).items() for p, o in ps.items()}
    stored = check_retention(cfg, {parse_tp_key(k): v for k, v in recorded.items()}, earliest)
    for topic, partition in sorted(earliest):
        off = stored.get((topic, partition), given.get((topic, partition), -2 if default is None else default))
        named.setdefault(topic, {})[str(partition)] = off
    return named


def check_retention(cfg: JobConfig, stored: dict[tuple[str, int], int],
                    earliest: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The stored next offsets, raised past what the brokers deleted since (see starting_offsets)."""
    lost = {tp: (nxt, earliest[tp]) for tp, nxt in stored.items() if tp in earliest and nxt < earliest[tp]}
    if not lost:
        return stored
    ranges = ", ".join(f"{t}-{p} offsets {a}..{b - 1}" for (t, p), (a, b) in sorted(lost.items()))
    count = sum(b - a for a, b in lost.values())
    if cfg.fail_on_data_loss:
        raise DataLossError(f"data loss: {ranges} ({count} offsets) were deleted by the brokers (retention?) "
                            f"before this store took them; --fail-on-data-loss false skips them")
    log.warning("data loss: %d offsets deleted by the brokers before this store took them, skipped: %s",
                count, ranges)
    return {**stored, **{tp: b for tp, (_, b) in lost.items()}}


def _both(first: Callable[[BatchStats], None], then: Callable[[BatchStats], None] | None
          ) -> Callable[[BatchStats], None]:
    def call(stats: BatchStats) -> None:
        first(stats)
        if then is not None:
            then(stats)
    return call


def run_stream(cfg: JobConfig, stop: threading.Event | None = None, spark: Any | None = None,
               on_batch: Callable[..., None] | None = None, available_now: bool = False,
               job: JobLifecycle | None = None) -> int:
    """Run the job until ``stop`` is set (or the available data is in, with ``available_now``).
    ``job``: its lifecycle, settings already checked (the command's); else one is made here."""
    from pyspark.errors import StreamingQueryException

    job = job or JobLifecycle(cfg, "run", spark)
    query = None
    sink = None
    reported: BatchWriteError | None = None

    def stop_query() -> None:
        if query is not None and query.isActive:
            query.stop()
        if sink is not None:
            try:
                sink.close()
            except BatchWriteError as exc:
                if exc is not reported:   # else raised below; here the query's own failure is
                    log.error("%s", exc)

    def last_lines() -> None:
        if sink is not None:
            log.info("this run wrote %s", sink.totals.line())
        if writer.store.closed_cleanly:
            log.info("store %s closed cleanly at commit offset %d", cfg.store, writer.store.committed_offset)
        else:
            log.warning("store %s closed after a failed flush at commit offset %d: the next open re-validates "
                        "what follows its checkpoint", cfg.store, writer.store.committed_offset)

    with job:
        metrics = job.metrics
        writer = job.open_writer()
        job.closing(stop_query)
        job.closed(last_lines)
        rewind_to_store(cfg.checkpoint or None, writer.state)
        start = starting_offsets(writer, cfg)     # before Spark: a data loss is one line
        spark = job.session()
        options = kafka_reader_options(cfg, start)
        spool = job.open_spool()
        fmt, reader_options = source_reader(cfg, spark, options, spool)
        df = observe_batches(load_source(spark.readStream, fmt, reader_options))
        sink = ForeachBatchSink(writer, partial(collect_packed, mapping=mapping_config(cfg), codec=codec_config(cfg),
                                                spool=spool, index_keys=cfg.message_index),
                                checkpoint_dir=cfg.checkpoint or None, on_batch=_both(job.batch_committed, on_batch),
                                overlap=overlap_writes(cfg), check=None if spool is None else spool.check)
        stream = df.writeStream.foreachBatch(sink).queryName("commitlog")
        if cfg.checkpoint:
            stream = stream.option("checkpointLocation", cfg.checkpoint)
        if available_now or cfg.trigger == "available-now":
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=spark_interval(cfg.trigger))
        query = stream.start()
        log.info("streaming %s into %s (flush %s, checkpoint %s)", options.get("subscribe") or
                 options.get("subscribePattern") or options.get("assign"), cfg.store, cfg.flush, cfg.checkpoint)
        stop = stop or threading.Event()
        lag = LagLog(on_lag=metrics.kafka_lag)
        try:
            while query.isActive and not stop.is_set() and sink.failure is None:
                query.awaitTermination(0.25)
                lag.after(query.lastProgress)
        except StreamingQueryException as exc:
            if sink.failure is None:     # else the sink's own failure, raised by drain() below
                raise _query_failure(exc, cfg.checkpoint) from None
        if stop.is_set() or sink.failure is not None:
            sink.request_stop()
            _wait_between_triggers(query)
        if query.isActive:
            query.stop()
        try:
            sink.drain()   # the last batch in the writer: its failure fails the run
        except BatchWriteError as exc:
            reported = exc
            raise
        failure = query.exception()
        if failure is not None and not stop.is_set():
            raise _query_failure(failure, cfg.checkpoint)
        return 0


def _wait_between_triggers(query: Any, timeout_s: float = 60.0) -> None:
    """Let the trigger in progress end before query.stop(): stop() interrupts the stream thread, and
    one caught writing Spark's offset or commit log ends in a Java stack trace (the data is safe
    either way: the store's commit point decides)."""
    from py4j.protocol import Py4JError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not query.isActive or not query.status.get("isTriggerActive"):
                return
        except Py4JError:      # the query ended while asked: nothing left to wait for
            return
        time.sleep(0.05)


def overlap_writes(cfg: JobConfig) -> bool:
    """Write each batch while Spark runs the next (sink.foreach_batch) where a stopped job's
    checkpoint can be rewound to the store on restart: a local checkpoint, or none (a new query then
    starts from the store's Kafka offsets)."""
    return not cfg.checkpoint or local_checkpoint_path(cfg.checkpoint) is not None


def run(job: JobLifecycle) -> int:
    """The ``commitlog run`` command, its settings checked (``job``)."""
    stop = StopSignal()
    stop.install()
    try:
        return run_stream(job.cfg, stop=stop.event, job=job)
    except (MetricsPortError, DataLossError) as exc:   # found before Spark starts
        print(f"commitlog run: error: {exc}", file=sys.stderr)
        return 2
    finally:
        stop.restore()
