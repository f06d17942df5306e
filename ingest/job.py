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
import hashlib
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ingest.config import JobConfig, kafka_reader_options, spark_interval
from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import collect_packed
from ingest.kafka.admin import earliest_offsets
from sink import CommitLogWriter, spool
from sink.foreach_batch import ForeachBatchSink
from sink.spark_checkpoint import local_checkpoint_path, rewind_to_store
from sink.state import parse_tp_key
from store import IndexConfig, RetentionConfig, StoreConfig
from store.format import END_FILE_MIN_BLANK_LENGTH, CodecConfig

log = logging.getLogger("commitlog.run")


def store_config(cfg: JobConfig) -> StoreConfig:
    retention = None
    if cfg.retention_hours is not None:
        retention = RetentionConfig(file_reserved_time_h=cfg.retention_hours, delete_when=cfg.delete_when,
                                    disk_max_used_space_ratio=cfg.disk_max_used_space_ratio,
                                    clean_immediately_ratio=max(0.85, cfg.disk_max_used_space_ratio),
                                    disk_full_ratio=max(0.90, cfg.disk_max_used_space_ratio))
    return StoreConfig(segment_size=cfg.segment_size, flush_mode=cfg.flush,
                       consume_queue_units=cfg.consume_queue_units, retention=retention,
                       codec=codec_config(cfg),
                       index=IndexConfig(cfg.message_index, cfg.max_hash_slot_num, cfg.max_index_num))


def mapping_config(cfg: JobConfig) -> MappingConfig:
    return MappingConfig(topic_map=dict(cfg.topic_map), queue_mode=cfg.queue_mode, queue_count=cfg.queue_count,
                         store_host=cfg.store_host, born_host=cfg.born_host,
                         born_host_header=cfg.born_host_header, envelope=cfg.envelope,
                         max_message_size=cfg.message_size_limit)


def spark_session(cfg: JobConfig) -> Any:
    from ingest.spark_session import build_session

    conf = {"spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
            "spark.ui.enabled": "false",
            # a task's packed batch (megabytes) comes back with its task status, not through a slower
            # block-manager fetch (BENCHMARKS.md, "Pipeline")
            "spark.task.maxDirectResultSize": str(64 << 20)}
    conf.update(cfg.spark_conf)
    return build_session(master=cfg.master, app_name="commitlog-run", extra_conf=conf)


def spool_directory(cfg: JobConfig, spark: Any) -> str | None:
    """Where our source's read tasks leave their batches for the driver (sink.spool), or None:
    through Spark. ``auto`` spools only when the executors are on this machine (local mode), in a
    directory of this store's own under the temporary directory."""
    if cfg.spool_dir == "off" or cfg.source != "kafka-python":
        return None
    if cfg.spool_dir != "auto":
        return os.path.abspath(cfg.spool_dir)
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    digest = hashlib.sha1(os.path.realpath(cfg.store).encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"commitlog-spool-{digest}")


def close_spool(cfg: JobConfig, spool_dir: str | None) -> None:
    if spool_dir is not None:
        (spool.remove_dir if cfg.spool_dir == "auto" else spool.sweep)(spool_dir)


def source_reader(cfg: JobConfig, spark: Any, kafka_options: dict[str, str],
                  spool_dir: str | None = None) -> tuple[str, dict[str, str]]:
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
    return SHORT_NAME, source_options(kafka_options, mapping_config(cfg), codec_config(cfg), spool_dir)


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
    from ingest.kafka.options import DataLossError

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


def run_stream(cfg: JobConfig, stop: threading.Event | None = None, spark: Any | None = None,
               on_batch: Callable[..., None] | None = None, available_now: bool = False) -> int:
    """Run the job until ``stop`` is set (or the available data is in, with ``available_now``)."""
    if not cfg.skip_preflight:
        from ingest.preflight import check_store_path

        check_store_path(cfg.store)
    writer = CommitLogWriter(cfg.store, store_config(cfg), truncate_on_corruption=cfg.truncate_on_corruption)
    own_spark = spark is None
    query = None
    sink = None
    spool_dir = None
    try:
        rewind_to_store(cfg.checkpoint or None, writer.state)
        start = starting_offsets(writer, cfg)     # before Spark: a data loss is one line
        spark = spark or spark_session(cfg)
        options = kafka_reader_options(cfg, start)
        spool_dir = spool_directory(cfg, spark)
        if spool_dir is not None:
            spool.prepare_dir(spool_dir)    # after the writer took the store's lock: no other job uses it
        fmt, reader_options = source_reader(cfg, spark, options, spool_dir)
        df = spark.readStream.format(fmt).options(**reader_options).load()
        sink = ForeachBatchSink(writer, partial(collect_packed, mapping=mapping_config(cfg), codec=codec_config(cfg),
                                                spool_dir=spool_dir),
                                checkpoint_dir=cfg.checkpoint or None, on_batch=on_batch,
                                overlap=overlap_writes(cfg))
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
        lag = LagLog()
        while query.isActive and not stop.is_set():
            query.awaitTermination(0.25)
            lag.after(query.lastProgress)
        if stop.is_set():
            sink.request_stop()
            _wait_between_triggers(query)
        if query.isActive:
            query.stop()
        sink.drain()   # the last batch in the writer: its failure fails the run
        failure = query.exception()
        if failure is not None and not stop.is_set():
            raise RuntimeError(f"the streaming query failed: {failure}")
        return 0
    finally:
        if query is not None and query.isActive:
            query.stop()
        if sink is not None:
            try:
                sink.close()
            except RuntimeError as exc:   # already raised above, or the query's own failure is
                log.error("%s", exc)
        writer.close()
        close_spool(cfg, spool_dir)
        if sink is not None:
            log.info("this run wrote %s", sink.totals.line())
        log.info("store %s closed cleanly at commit offset %d", cfg.store, writer.store.committed_offset)
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


class LagLog:
    """How far each batch's end lies behind the latest offsets the source saw, per partition, as
    Spark's Kafka source reports it (minOffsetsBehindLatest, maxOffsetsBehindLatest,
    avgOffsetsBehindLatest): from the query progress' endOffset and latestOffset, since PySpark's
    Python data source API has no hook for source metrics. One log line per batch."""

    def __init__(self) -> None:
        self.batch_id = -1
        self.last: dict[str, float] | None = None

    def after(self, progress: Mapping[str, Any] | None) -> None:
        if not progress or progress.get("batchId", -1) == self.batch_id:
            return
        self.batch_id = progress["batchId"]
        for source in progress.get("sources") or ():
            behind = offsets_behind(source.get("endOffset"), source.get("latestOffset"))
            if behind:
                self.last = {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
                             "avgOffsetsBehindLatest": sum(behind) / len(behind)}
                log.info("batch %d: %d offsets behind latest (per partition min %d, avg %.1f, max %d)",
                         self.batch_id, sum(behind), self.last["minOffsetsBehindLatest"],
                         self.last["avgOffsetsBehindLatest"], self.last["maxOffsetsBehindLatest"])


def offsets_behind(end: Any, latest: Any) -> list[int]:
    """Per partition, latest - end, from the progress' offset JSON ({"topic": {"0": 42}})."""
    def parse(value: Any) -> dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return {}
        return value if isinstance(value, dict) else {}

    ends, latests = parse(end), parse(latest)
    out = []
    for topic, parts in latests.items():
        if not isinstance(parts, dict):
            continue
        for p, off in parts.items():
            done = ends.get(topic, {}).get(p) if isinstance(ends.get(topic), dict) else None
            if isinstance(off, int) and isinstance(done, int):
                out.append(max(off - done, 0))
    return out


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
    finally:
        stop.restore()
