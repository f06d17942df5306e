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
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ingest.broker_groups import BrokerGroupError, check_store_group, owned
from ingest.config import JobConfig, kafka_reader_options, spark_interval
from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import collect_packed
from ingest.kafka.admin import earliest_offsets
from ingest.kafka.options import DataLossError
from ingest.lag import LagLog
from ingest.metrics import JobMetrics, MetricsPortError, MetricsServer, observe_batches
from sink import BatchStats, CommitLogWriter
from sink.foreach_batch import BatchWriteError, ForeachBatchSink
from sink.spool import Spool, auto_dir
from sink.trust import check_existing_dir
from sink.spark_checkpoint import check_checkpoint_dir, local_checkpoint_path, rewind_to_store
from sink.state import parse_tp_key
from store import IndexConfig, RetentionConfig, StoreConfig
from store.format import END_FILE_MIN_BLANK_LENGTH, CodecConfig

log = logging.getLogger("commitlog.run")


class StreamingQueryError(RuntimeError):
    """Spark's query failed on its own (not in our sink): Spark's reason in one line."""


def _query_failure(exc: BaseException, checkpoint: str) -> StreamingQueryError:
    """Spark's first line, without its query ids and SQLSTATE (the plan and the stack follow in its message)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    reason = re.sub(r" SQLSTATE: \w+$", "", first.split("terminated with exception: ", 1)[-1])
    return StreamingQueryError(f"the streaming query failed: {reason} (Spark's checkpoint {checkpoint or 'none'}); "
                               f"the store is closed at its last commit: run again to resume")


def store_config(cfg: JobConfig) -> StoreConfig:
    retention = None
    if cfg.retention_hours is not None:
        retention = RetentionConfig(file_reserved_time_h=cfg.retention_hours, delete_when=cfg.delete_when,
                                    disk_max_used_space_ratio=cfg.disk_max_used_space_ratio,
                                    clean_immediately_ratio=max(0.85, cfg.disk_max_used_space_ratio),
                                    disk_full_ratio=max(0.90, cfg.disk_max_used_space_ratio))
    return StoreConfig(segment_size=cfg.segment_size, flush_mode=cfg.flush,
                       consume_queue_units=cfg.consume_queue_units, retention=retention,
                       codec=codec_config(cfg), drop_cache_behind=cfg.drop_cache_behind,
                       foreign_tail=cfg.foreign_tail, index=IndexConfig(cfg.message_index, cfg.max_hash_slot_num, cfg.max_index_num))


def mapping_config(cfg: JobConfig) -> MappingConfig:
    group = cfg.group
    return MappingConfig(topic_map=dict(cfg.topic_map), queue_mode=cfg.queue_mode, queue_count=cfg.queue_count,
                         broker_groups=group.count if group else 1, store_host=cfg.store_host, born_host=cfg.born_host,
                         born_host_header=cfg.born_host_header, envelope=cfg.envelope,
                         max_message_size=cfg.message_size_limit)


def spark_session(cfg: JobConfig) -> Any:
    from ingest.spark_session import build_session

    conf = {"spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
            "spark.ui.enabled": "false",
            # a task's packed batch (megabytes) comes back with its task status, not through a slower
            # block-manager fetch (BENCHMARKS.md, "Pipeline")
            "spark.task.maxDirectResultSize": str(64 << 20),
            # Spark's offset and commit logs on a local disk without Hadoop's .crc side files: two
            # files written and renamed per entry, not four, halves walCommit + commitOffsets, a fixed
            # cost of every batch's latency (BENCHMARKS.md, "Latency"). Hadoop's local files are
            # never fsynced either way; a torn entry is what sink.spark_checkpoint rewinds.
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs"}
    conf.update(cfg.spark_conf)
    return build_session(master=cfg.master, app_name="commitlog-run", extra_conf=conf)


def spool_directory(cfg: JobConfig, spark: Any) -> str | None:
    """Where our source's read tasks leave their batches for the driver (sink.spool), or None:
    through Spark. ``auto`` spools only when the executors are on this machine (local mode), in
    ``<store>/spool``, which the store's lock keeps to one job."""
    if cfg.spool_dir == "off" or cfg.source != "kafka-python":
        return None
    if cfg.spool_dir != "auto":
        return os.path.realpath(cfg.spool_dir)
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    return auto_dir(cfg.store)


def open_spool(cfg: JobConfig, spark: Any) -> Spool | None:
    """The spool the job's tasks write to (sink.spool), checked and opened; call with the store's
    lock held. None: batches come through Spark."""
    directory = spool_directory(cfg, spark)
    if directory is None:
        return None
    return Spool.for_store(cfg.store) if cfg.spool_dir == "auto" else Spool.given(directory, cfg.store)


def check_spool_setting(cfg: JobConfig) -> None:
    """Before Spark starts: the spool directory the job would use, if it exists, is one it may use
    (sink.trust); raises UntrustedPathError. The automatic one is checked whatever the master: it
    is inside the store, where no one else should have put anything."""
    if cfg.spool_dir == "off" or cfg.source != "kafka-python":
        return
    if cfg.spool_dir == "auto":
        check_existing_dir(auto_dir(cfg.store), "spool directory", private=True)
    else:
        check_existing_dir(os.path.realpath(cfg.spool_dir), "--spool-dir", private=False)


def source_reader(cfg: JobConfig, spark: Any, kafka_options: dict[str, str],
                  spool: Spool | None = None) -> tuple[str, dict[str, str]]:
    """(format, options) to read with. Ours (``kafka-python``) reads through the message source, which
    maps and encodes in its read tasks; Spark's own, only when its package is on the classpath, gives
    Kafka columns that ingest.encode.prepare maps with mapInArrow."""
    from ingest.encode.message_source import SHORT_NAME, source_options
    from ingest.kafka.source import source_format, spark_kafka_available

    fmt = source_format(cfg.source)
    if fmt == "kafka":
        if not spark_kafka_available(spark):
            raise RuntimeError("--source spark-kafka needs the spark-sql-kafka package on the classpath "
                               "(spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>)")
        return fmt, kafka_options
    return SHORT_NAME, source_options(kafka_options, mapping_config(cfg), codec_config(cfg),
                                      None if spool is None else spool.target, index_keys=cfg.message_index)


def codec_config(cfg: JobConfig) -> CodecConfig:
    return CodecConfig(max_message_size=cfg.message_size_limit,
                       segment_room=cfg.segment_size - END_FILE_MIN_BLANK_LENGTH)


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


class StopSignal:
    """SIGTERM/SIGINT set a flag the main loop polls: the batch in progress commits or is abandoned,
    the store closes cleanly, the command exits 0. A second signal stops at once (exit 128 +
    signal, as a shell reports it): committed data is safe, the next run resumes after it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.event.is_set():
            log.warning("%s again: stopping now; what was committed stays, the next run resumes after it", name)
            logging.shutdown()
            os._exit(128 + signum)
        log.warning("%s: stopping after the current batch (send it again to stop at once)", name)
        self.event.set()

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def start_metrics(cfg: JobConfig, command: str) -> tuple[JobMetrics, MetricsServer | None]:
    """The job's metrics, served on --metrics-port if one is given (before anything else starts:
    a port that cannot be served is a usage error)."""
    metrics = JobMetrics(command, os.path.abspath(cfg.store), cfg.broker_group)
    if cfg.metrics_port is None:
        return metrics, None
    return metrics, MetricsServer(metrics, cfg.metrics_host, cfg.metrics_port)


def open_writer(cfg: JobConfig, metrics: JobMetrics) -> CommitLogWriter:
    """The store's writer, refused if the store was written as another broker group."""
    writer = CommitLogWriter(cfg.store, store_config(cfg), truncate_on_corruption=cfg.truncate_on_corruption,
                             broker_group=cfg.broker_group)
    try:
        check_store_group(cfg.store, cfg.group, writer.state)
    except BrokerGroupError:
        writer.close()
        raise
    metrics.watch_store(writer.store.usage, writer.store.open_report)
    return writer


def _both(first: Callable[[BatchStats], None], then: Callable[[BatchStats], None] | None
          ) -> Callable[[BatchStats], None]:
    def call(stats: BatchStats) -> None:
        first(stats)
        if then is not None:
            then(stats)
    return call


def run_stream(cfg: JobConfig, stop: threading.Event | None = None, spark: Any | None = None,
               on_batch: Callable[..., None] | None = None, available_now: bool = False) -> int:
    """Run the job until ``stop`` is set (or the available data is in, with ``available_now``)."""
    from pyspark.errors import StreamingQueryException

    check_checkpoint_dir(cfg.checkpoint or None)
    if not cfg.skip_preflight:
        from ingest.preflight import check_store_path

        check_store_path(cfg.store)
    metrics, server = start_metrics(cfg, "run")
    try:
        writer = open_writer(cfg, metrics)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    own_spark = spark is None
    query = None
    sink = None
    spool = None
    reported: BatchWriteError | None = None
    try:
        rewind_to_store(cfg.checkpoint or None, writer.state)
        start = starting_offsets(writer, cfg)     # before Spark: a data loss is one line
        spark = spark or spark_session(cfg)
        options = kafka_reader_options(cfg, start)
        spool = open_spool(cfg, spark)     # after the writer took the store's lock: no other job uses it
        fmt, reader_options = source_reader(cfg, spark, options, spool)
        df = observe_batches(spark.readStream.format(fmt).options(**reader_options).load())
        sink = ForeachBatchSink(writer, partial(collect_packed, mapping=mapping_config(cfg), codec=codec_config(cfg),
                                                spool=spool, index_keys=cfg.message_index),
                                checkpoint_dir=cfg.checkpoint or None, on_batch=_both(metrics.batch, on_batch),
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
    finally:
        if server is not None:
            server.stop()
        if query is not None and query.isActive:
            query.stop()
        if sink is not None:
            try:
                sink.close()
            except BatchWriteError as exc:
                if exc is not reported:   # else raised above; here the query's own failure is
                    log.error("%s", exc)
        writer.close()
        if spool is not None:
            spool.close()
        if sink is not None:
            log.info("this run wrote %s", sink.totals.line())
        if writer.store.closed_cleanly:
            log.info("store %s closed cleanly at commit offset %d", cfg.store, writer.store.committed_offset)
        else:
            log.warning("store %s closed after a failed flush at commit offset %d: the next open re-validates "
                        "what follows its checkpoint", cfg.store, writer.store.committed_offset)
        if own_spark and spark is not None:
            spark.stop()


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


def run(cfg: JobConfig) -> int:
    """The ``commitlog run`` command."""
    stop = StopSignal()
    stop.install()
    try:
        return run_stream(cfg, stop=stop.event)
    except (MetricsPortError, BrokerGroupError, DataLossError) as exc:   # found before Spark starts
        print(f"commitlog run: error: {exc}", file=sys.stderr)
        return 2
    finally:
        stop.restore()
