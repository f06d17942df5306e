"""``commitlog replay``: a bounded run of the ingest job over what a Kafka topic (or an export of it)
already holds, into a CommitLog store, once, completely, and provably.

The write path is ``commitlog run``'s: the same source, ``collect_packed`` and the sink (mapping,
encoding, queue offsets, and dropping whatever the store already holds) and the same ``ForeachBatchSink`` /
``CommitLogWriter`` with its atomic commit per batch. What replay adds is the bound: every partition's
[start, end) is fixed before the first write (kept in ``<store>/replay/`` until done), cut into
batches of ``--max-offsets-per-trigger`` offsets, each a Spark batch query with explicit
startingOffsets/endingOffsets handed to the sink. Each batch's Spark job (read, map, encode, collect:
``collect_packed``, which depends on nothing the writer holds) runs while the one before is written
and committed, so the driver's write hides behind the read. A kill loses at most the batches in
progress; the next run starts where the store's recorded Kafka offsets end.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ingest.broker_groups import BrokerGroup
from ingest.config import JobConfig
from ingest.reader_options import kafka_reader_options
from ingest.job_settings import codec_config, load_source, mapping_config, source_reader
from ingest.replay.plan import (
    Bound,
    ReplayError,
    ReplayPlan,
    TopicPartitionKey,
    apply_store_offsets,
    chunks,
    load_plan,
    plan_identity,
    plan_path,
    resolve_kafka_plan,
    save_plan,
    sub_ranges,
)
from ingest.replay.progress import ReplayProgress
from sink import BatchStats
from store import DeadLetterReason, StoreError, describe_failure
from store.tools import VerifyBehind

if TYPE_CHECKING:
    from ingest.lifecycle import JobLifecycle
    from sink.handover.spool import Spool

log = logging.getLogger("commitlog.replay")

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_ERROR, EXIT_STOPPED = 0, 1, 2, 3


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay; everything about how to write it is the shared JobConfig."""

    topics: tuple[str, ...] | None = None
    topic_pattern: str | None = None
    from_files: str | None = None
    file_format: str = "jsonl"
    begin: Bound = Bound("earliest")
    finish: Bound = Bound("latest")
    strict: bool = False
    verify: bool = True
    progress: str = "auto"

    def plan_spec(self) -> dict[str, Any]:
        """What identifies "the same arguments" for the plan file."""
        return {"topics": sorted(self.topics or ()), "pattern": self.topic_pattern,
                "from": self.begin.describe(), "to": self.finish.describe()}


@dataclass
class ReplaySummary:
    store: str
    plan: ReplayPlan
    records: int = 0                 # messages written by this run
    dead_letters: int = 0            # dead letters written by this run
    tombstones: int = 0              # messages of this run whose Kafka value was null (a 1-byte body)
    empty_values: int = 0            # ... 0 bytes (a 1-byte body too)
    batches: int = 0
    elapsed_s: float = 0.0           # the whole run, Spark start-up and planning included
    write_s: float = 0.0             # from the first batch on
    commit_offset: int = 0
    complete: bool = False
    verified: bool | None = None     # None: verify not run
    notes: list[str] = field(default_factory=list)
    unplaced: int = 0                # dead letters of file rows with no Kafka position, written by this run
    unplaced_held: int = 0           # ... already written by an earlier run
    repeated: int = 0                # file rows at a position an earlier row had (the first was replayed)

    @property
    def rate(self) -> float:
        return (self.records + self.dead_letters) / self.write_s if self.write_s > 0 else 0.0

    def lines(self) -> list[str]:
        p = self.plan
        held = sum(x.held for x in p.partitions)
        total = sum(x.total for x in p.partitions)
        out = [f"replay into {self.store}: {'complete' if self.complete else 'STOPPED before the end'}",
               f"  range: {total} offsets over {len(p.partitions)} partitions of {len(p.topics())} topic(s); "
               f"{held} already in the store (skipped)",
               f"  written: {self.records} messages, {self.dead_letters} dead letters, {self.batches} batches, "
               f"{self.write_s:.1f} s ({self.rate:,.0f} rec/s; {self.elapsed_s:.1f} s with start-up); commit-log "
               f"offset {self.commit_offset}",
               f"  null and empty Kafka values: {self.tombstones} tombstones, {self.empty_values} empty values "
               "(each stored as a 1-byte body with KAFKA_VALUE_NULL or KAFKA_VALUE_EMPTY)"]
        if self.complete:
            # every offset of the range is accounted for
            gaps = total - held - self.records - self.dead_letters
            out.append(f"  offsets: {total} = {held} already held + {self.records} messages + {self.dead_letters} "
                       "dead letters" + (f" + {gaps} with no record (compacted away, transaction markers, or "
                                         "absent from the files)" if gaps else ""))
        if self.unplaced or self.unplaced_held:
            out.append(f"  rows with no Kafka position: {self.unplaced} dead letters written"
                       + (f", {self.unplaced_held} written by an earlier run" if self.unplaced_held else "")
                       + " (each reason names its file and line, or row group and row)")
        if self.repeated:
            out.append(f"  {self.repeated} rows repeat a (topic, partition, offset) an earlier row had: "
                       "the first of each was replayed")
        for topic in p.topics():
            parts = [x for x in p.partitions if x.topic == topic]
            ranges = ", ".join(f"{x.partition}:[{x.start},{x.end})" for x in parts)
            out.append(f"  {topic}: {sum(x.total for x in parts)} offsets, partitions {ranges}")
        if self.verified is not None:
            out.append(f"  verify: {'OK' if self.verified else 'FAILED (see above)'}")
        if not self.complete:
            out.append("  run the same command again to continue where the last commit ended")
        return out


# ------------------------------------------------------------------------------------ the job

def _kafka_client_params(cfg: JobConfig) -> dict[str, Any]:
    from ingest.kafka.options import kafka_client_params

    return kafka_client_params(kafka_reader_options(cfg, "earliest"))


def kafka_batch_loader(cfg: JobConfig, spark: Any, spool: Spool | None = None
                       ) -> Callable[[Mapping[TopicPartitionKey, tuple[int, int]]], Any]:
    """Ranges -> a batch DataFrame read by the job's own source (encoded records, or Kafka columns
    with Spark's source), as ingest.encode.prepare takes it; its tasks leave their batches in the
    ``spool`` when one is given (sink.handover.spool)."""
    from ingest.kafka.offsets import offsets_to_json

    base = kafka_reader_options(cfg, "earliest")
    for name in ("subscribe", "subscribePattern", "assign", "maxOffsetsPerTrigger", "startingOffsets"):
        base.pop(name, None)
    fmt, base = source_reader(cfg, spark, base, spool)

    def load(ranges: Mapping[TopicPartitionKey, tuple[int, int]]) -> Any:
        assign: dict[str, list[int]] = {}
        for t, p in sorted(ranges):
            assign.setdefault(t, []).append(p)
        opts = dict(base, assign=json.dumps(assign),
                    startingOffsets=json.dumps(offsets_to_json({tp: a for tp, (a, _) in ranges.items()})),
                    endingOffsets=json.dumps(offsets_to_json({tp: b for tp, (_, b) in ranges.items()})))
        return load_source(spark.read, fmt, opts)

    return load


def group_plan(plan: ReplayPlan, group: BrokerGroup | None) -> ReplayPlan:
    """The partitions of ``plan`` that the broker group replays (ingest.broker_groups)."""
    if group is None:
        return plan
    return ReplayPlan([p for p in plan.partitions if group.owns(p.partition)])


def _kafka_plan(cfg: JobConfig, opts: ReplayOptions) -> tuple[ReplayPlan, list[str], Any]:
    spec = opts.plan_spec()
    if cfg.broker_group:
        spec["brokerGroup"] = cfg.broker_group
    path = plan_path(cfg.store, plan_identity(spec))
    plan = load_plan(path)
    if plan is not None:
        return plan, [f"continuing the replay planned earlier with the same arguments ({path}); its range "
                      "stays fixed until it completes"], path
    plan, notes = resolve_kafka_plan(_kafka_client_params(cfg), opts.topics, opts.topic_pattern,
                                     opts.begin, opts.finish, opts.strict)
    plan = group_plan(plan, cfg.group)
    save_plan(path, plan, spec)
    return plan, notes, path


def replay(cfg: JobConfig, opts: ReplayOptions, spark: Any | None = None,
           stop: threading.Event | None = None) -> ReplaySummary:
    """Run one replay; see the module docstring. ``spark``: an existing session (tests), else one is
    built from ``cfg`` and stopped at the end."""
    from ingest.lifecycle import JobLifecycle

    started = time.monotonic()
    pieces = None
    if opts.from_files:
        from ingest.replay.file_pieces import plan_pieces

        # before Spark: a file that is not of the format stops the replay here (the executors read them)
        pieces = plan_pieces(opts.from_files, opts.file_format)
    job = JobLifecycle(cfg, "replay", spark, reach_brokers=not opts.from_files)
    batch_log = logging.getLogger("commitlog.batch")
    batch_log_level = batch_log.level
    job.closing(lambda: batch_log.setLevel(batch_log_level))
    verify = _ClosingVerify(str(cfg.store), behind=opts.verify)
    with verify, job:
        summary = _replay(job, opts, pieces, stop or threading.Event(), batch_log, verify.committed)
        summary.elapsed_s = time.monotonic() - started
        if opts.verify:
            # once the writer has closed the store, while Spark stops (most of that a wait on PySpark's
            # accumulator server, which polls for its shutdown once a second)
            job.closed(verify.start)
    if opts.verify:
        summary.verified = verify.result()
    return summary


class _ClosingVerify:
    """The replay's closing `commitlog verify`, on a thread of its own from ``start`` to ``result``.
    With ``behind``, the records each batch committed are checked while the next batches are written
    (store.tools.VerifyBehind, fed by ``committed``), and the closing verify does not read them again."""

    def __init__(self, store: str, behind: bool = False) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="replay-verify")    # no thread before start
        self._verdict: Future[int] | None = None
        # its thread starts with the first commit
        self._behind: VerifyBehind | None = VerifyBehind(store) if behind else None

    def __enter__(self) -> _ClosingVerify:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._behind is not None:
            self._behind.abandon()
        self._pool.shutdown(wait=True)

    def committed(self, offset: int) -> None:
        """A batch was committed: the store's commit point is now ``offset``."""
        if self._behind is not None:
            self._behind.committed(offset)

    def start(self) -> None:
        from store.tools import verify_store

        checked = self._behind.close() if self._behind is not None else None
        log.info("verifying: commitlog verify %s", self.store)
        self._verdict = self._pool.submit(verify_store, self.store, checked)

    def result(self) -> bool:
        """True: the store verified; False: problems (reported on stdout)."""
        assert self._verdict is not None, "the verify starts when the job closes its writer"
        try:
            return self._verdict.result() == 0
        except (StoreError, OSError) as exc:    # the store could not be read: not a verdict on it
            raise ReplayError(f"verifying {self.store} failed: {describe_failure(exc)}; what the replay stored "
                              f"is committed: run `commitlog verify {self.store}` once the disk answers") from exc


def _replay(job: JobLifecycle, opts: ReplayOptions, pieces: Any, stop: threading.Event,
            batch_log: logging.Logger, committed: Callable[[int], None]) -> ReplaySummary:
    """The replay's work inside its lifecycle: plan, open the store, write the batches (``committed``:
    told the store's commit point after each)."""
    from ingest.encode.prepare import collect_packed
    from sink.foreach_batch import ForeachBatchSink

    cfg, metrics = job.cfg, job.metrics
    export = None
    plan_file = None
    if pieces is None:
        job.start_session()        # the JVM starts while the brokers are asked for the plan
        plan, notes, plan_file = _kafka_plan(cfg, opts)
        spark = job.session()
    else:
        from ingest.replay.file_batches import file_batch
        from ingest.replay.file_pieces import scan_export
        from ingest.replay.files import resolve_file_plan

        spark = job.session()
        # the executors scan the files before anything is written: a piece that cannot be read stops here
        export = scan_export(spark, pieces, opts.begin.timestamp if opts.begin.kind == "timestamp" else None,
                             opts.finish.timestamp if opts.finish.kind == "timestamp" else None)
        if not export.partitions() and export.unplaced:
            plan = ReplayPlan([])    # nothing but bad rows: they are still the replay's dead letters
        else:
            plan = group_plan(resolve_file_plan(export, opts.begin, opts.finish, opts.topics, opts.topic_pattern),
                              cfg.group)
        notes = []
    writer = job.open_writer()
    spool = job.open_spool()
    if export is None:
        load = kafka_batch_loader(cfg, spark, spool)
    else:
        load = partial(file_batch, spark, export, mapping=mapping_config(cfg), codec=codec_config(cfg),
                       spool=None if spool is None else spool.target, index_keys=cfg.message_index)
    notes += apply_store_offsets(plan, writer.state.kafka_offsets)
    for note in notes:
        log.warning("%s", note)
    summary = ReplaySummary(str(cfg.store), plan, notes=notes)
    first_records, first_dead = writer.state.records, writer.state.dead_letters
    first_null, first_empty = writer.state.tombstones, writer.state.empty_values
    if export is not None:
        from ingest.replay.unplaced import selected, write_unplaced

        # rows with no partition belong to no group: the first group writes them
        unplaced = selected(export.unplaced, opts.topics, opts.topic_pattern) if not cfg.group or \
            cfg.group.index == 0 else []
        summary.unplaced, summary.unplaced_held = write_unplaced(writer, unplaced)
        if summary.unplaced:
            metrics.count_dead_letters({DeadLetterReason.FILE_ROW_INVALID: summary.unplaced})
        summary.repeated = export.repeated
        for u in unplaced[:20]:
            log.warning("dead letter: %s", u.reason)
        if len(unplaced) > 20:
            log.warning("... and %d more rows with no Kafka position (see the dead letters)", len(unplaced) - 20)
    progress = ReplayProgress(plan, opts.progress)
    if progress.mode == "bar":
        # the bar replaces the sink's per-batch log lines, which would break its redraw
        batch_log.setLevel(max(batch_log.getEffectiveLevel(), logging.WARNING))
    if plan.todo == 0:
        log.warning("nothing to replay: the store already holds the whole range")

    def after_batch(stats: BatchStats) -> None:
        committed(writer.store.committed_offset)
        job.batch_committed(stats)
        metrics.kafka_lag(remaining(plan, writer.state.kafka_offsets))
        progress.update(writer.state.kafka_offsets)

    metrics.kafka_lag(remaining(plan, writer.state.kafka_offsets))
    sink = ForeachBatchSink(writer, Future.result, checkpoint_dir=None, on_batch=after_batch,
                            check=None if spool is None else spool.check)
    collect = partial(collect_packed, mapping=mapping_config(cfg), codec=codec_config(cfg), spool=spool,
                      index_keys=cfg.message_index)
    with ThreadPoolExecutor(1, thread_name_prefix="replay-read") as reader:
        summary.complete = _write_batches(
            (reader.submit(collect, load(sub_ranges(start, until)))
             for start, until in chunks(plan.starts(), plan.ends(), cfg.max_offsets_per_trigger)),
            lambda batch: sink(batch, writer.state.batch_id + 1), stop)
    if not summary.complete:
        log.warning("stopping: the last committed batch ends at %s", dict(writer.state.kafka_offsets))
    summary.batches = sink.batches
    summary.records = writer.state.records - first_records
    summary.tombstones = writer.state.tombstones - first_null
    summary.empty_values = writer.state.empty_values - first_empty
    summary.dead_letters = writer.state.dead_letters - first_dead - summary.unplaced
    summary.commit_offset = writer.store.committed_offset
    if summary.complete and plan_file is not None:
        # done: the same command run later plans afresh (and skips what is now held)
        plan_file.unlink(missing_ok=True)
    summary.write_s = progress.elapsed()
    return summary


def remaining(plan: ReplayPlan, held: Mapping[str, int]) -> dict[TopicPartitionKey, int]:
    """Per partition, the offsets of the range the store does not hold yet: a replay's lag."""
    from sink.state import tp_key

    return {p.key: max(p.end - max(held.get(tp_key(*p.key), 0), p.start), 0) for p in plan.partitions}


def _write_batches(batches: Iterator[Future], write: Callable[[Future], None], stop: threading.Event) -> bool:
    """Write each collected batch in order, the next one's read submitted before this one's write.
    True when all were written; False on a stop request (batches read ahead are dropped unwritten)."""
    pending: deque[Future] = deque()
    try:
        for batch in batches:
            pending.append(batch)
            if len(pending) > 1:
                if stop.is_set():
                    return False
                write(pending.popleft())
        while pending:
            if stop.is_set():
                return False
            write(pending.popleft())
        return True
    finally:
        for batch in pending:
            batch.cancel()
