"""What does a million records cost, in CPU seconds, in each phase of the read tasks and of the one
driver-side writer, and so how many executor cores can one driver core keep busy, and at what rate
does one store saturate?

CPU time of each thread (its own clock, nanoseconds), not wall time: a figure that does not depend
on what else the machine runs. The phases run outside Spark, in this process, on the same code the
job runs, over topics of the pipeline's workloads (bench/workloads.py) on the embedded broker:
- read tasks, one partition range after another (ingest.kafka.read.read_range with the job's
  encoder, ingest.encode.message_source.EncodedBatches): ``fetch`` (kafka-python's poll and the
  fetch response cut into record-batch sections), ``decode+encode`` (the C pass from fetched bytes to
  CommitLog records, or Kafka columns and the mapping for what it hands back), ``hand_over`` (the
  batch written to a spool file, sink.spool, local mode's way);
- the driver, micro-batches of ``batch`` records (sink.CommitLogWriter.write_batch on a fresh store):
  ``collect`` (the spool files mapped in, sink.batch.prepare), ``append`` (MessageStore.append_encoded
  on the caller's thread), ``copy_helper`` (the commit log's second copying thread, which also writes
  the consume queues), ``index`` (the index thread: keys found, hashed, put), ``flush`` (the msyncs, on
  the caller's thread and the flush service's), ``commit`` (the commit point), ``warm_ahead`` (pages
  faulted in ahead of the writer).
Spark's own share (the JVM scheduling tasks, moving the spool files' names, toArrow) is not in these
figures; bench/pipeline.py measures the whole job against Spark's noop sink.
Each phase's minor page faults are counted beside its CPU (``faults_per_m``): on a VM whose host takes
freed memory back, a phase that touches new pages pays for each, and that moves its CPU between runs.
From them: ``executor_cores_per_driver_core`` = read-task CPU / driver CPU, and
``store_saturates_msgs_per_s`` = 1e6 / the driver's CPU seconds per million (one driver core), with
``store_ceiling_msgs_per_s`` = 1e6 / its busiest thread's (the serial limit however many cores).
"""

from __future__ import annotations

import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
import workloads  # noqa: E402

FULL = {"messages": {"uniform": 1_000_000, "mixed": 200_000}, "batch": 50_000, "partitions": 2}
QUICK = {"messages": {"uniform": 20_000, "mixed": 4_000}, "batch": 5_000, "partitions": 2}
DRIVER_THREADS = {"copy_helper": "commitlog-copy", "index": "dispatch-index-", "flush_thread": "commitlog-flush",
                  "warm_ahead": "segment-warm-ahead"}


def thread_usage() -> dict[str, tuple[float, int]]:
    """(CPU seconds, minor page faults) so far of each live thread, by name (several of one name added up)."""
    out: dict[str, tuple[float, int]] = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            secs = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            faults = _thread_faults(t.native_id)
        except OSError:         # ended meanwhile
            continue
        cpu, flt = out.get(t.name, (0.0, 0))
        out[t.name] = (cpu + secs, flt + faults)
    return out


def _thread_faults(tid: int | None) -> int:
    """A thread's minor page faults (/proc/self/task/<tid>/stat, field 10: minflt)."""
    with open(f"/proc/self/task/{tid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[7])


def _own_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


class Phases:
    """CPU seconds and minor page faults by phase, from the caller's thread; a phase inside another
    counts for itself only (commit() flushes: that flush is the flush's, not the commit's)."""

    def __init__(self) -> None:
        self.secs: dict[str, float] = {}
        self.faults: dict[str, int] = {}
        self._inner: list[tuple[float, int]] = []   # per open phase: what the phases inside it took

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        t0, f0 = time.thread_time(), _own_faults()
        self._inner.append((0.0, 0))
        try:
            yield
        finally:
            elapsed, faulted = time.thread_time() - t0, _own_faults() - f0
            inner_s, inner_f = self._inner.pop()
            self.secs[name] = self.secs.get(name, 0.0) + elapsed - inner_s
            self.faults[name] = self.faults.get(name, 0) + faulted - inner_f
            if self._inner:
                s, f = self._inner[-1]
                self._inner[-1] = (s + elapsed, f + faulted)

    def wrap(self, obj: Any, method: str, name: str) -> None:
        fn: Callable[..., Any] = getattr(obj, method)

        def timed(*a: Any, **kw: Any) -> Any:
            with self.timing(name):
                return fn(*a, **kw)

        setattr(obj, method, timed)


class TimedEncoder:
    """The read task's encoder with its CPU counted (ingest.kafka.read.BatchMaker)."""

    def __init__(self, inner: Any, phases: Phases) -> None:
        self.inner, self.phases = inner, phases

    def from_chunk(self, chunk: Any, rng: Any) -> Any:
        with self.phases.timing("decode+encode"):
            return self.inner.from_chunk(chunk, rng)

    def from_records(self, records: list[Any], rng: Any) -> Any:
        with self.phases.timing("decode+encode"):
            return self.inner.from_records(records, rng)


def read_tasks(bootstrap: str, topic: str, partitions: int, n: int, target: Any) -> tuple[Phases, list]:
    """The read tasks' phases over the whole topic; returns (their CPU and faults, spool rows in order)."""
    from ingest.config import JobConfig
    from ingest.encode.message_source import EncodedBatches
    from ingest.job import codec_config, mapping_config
    from ingest.kafka.offsets import KafkaOffsetRange
    from ingest.kafka.options import kafka_client_params
    from ingest.kafka.read import KafkaColumns, read_range
    from ingest.kafka.source import arrow_schema, kafka_schema
    from sink import spool

    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=topic)
    params = kafka_client_params({"kafka.bootstrap.servers": bootstrap})
    phases = Phases()
    rows = []
    per = n // partitions
    for p in range(partitions):
        maker = TimedEncoder(EncodedBatches(KafkaColumns(arrow_schema(kafka_schema(True))), mapping_config(cfg),
                                            codec_config(cfg)), phases)
        with phases.timing("task"):
            for batch in read_range(KafkaOffsetRange(topic, p, 0, per), params, maker, True, 60_000):
                with phases.timing("hand_over"):
                    rows.append(spool.write(batch, target))
    for by_phase in (phases.secs, phases.faults):
        by_phase["fetch"] = by_phase.pop("task")
    return phases, rows


def driver(rows: list, root: Path, flush: str, batch: int, spooled: Any) -> Phases:
    """The writer's phases over the spooled batches, cut into micro-batches of about ``batch`` records."""
    import pyarrow as pa

    from sink import CommitLogWriter
    from sink.batch import prepare
    from sink.packed import PACKED_SCHEMA
    from store import StoreConfig

    phases = Phases()
    groups, current, size = [], [], 0
    for r in rows:
        current.append(r)
        size += _records_in(r)
        if size >= batch:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    writer = CommitLogWriter(root, StoreConfig(flush_mode=flush))
    try:
        phases.wrap(writer.store, "append_encoded", "append")
        phases.wrap(writer.store, "flush", "flush")
        phases.wrap(writer.store, "commit", "commit")
        before = thread_usage()
        for i, group in enumerate(groups, 1):
            with phases.timing("collect"):
                table = spooled.resolve(pa.Table.from_batches(group, PACKED_SCHEMA))
            with phases.timing("check"):     # the spool files' MACs and records (sink.spool.Spool.check)
                table = spooled.check(table)
            with phases.timing("collect"):
                table = prepare(table, writer.state.kafka_offsets)
            with phases.timing("write_batch"):
                writer.write_batch(i, "costs", table)
        writer.store.settle_index()
        after = thread_usage()
    finally:
        writer.close()
    for by_phase in (phases.secs, phases.faults):     # dead letters, Kafka offsets, the batch's columns
        by_phase["write_batch_other"] = by_phase.pop("write_batch")
    for phase, prefix in DRIVER_THREADS.items():
        threads = [name for name in after if name.startswith(prefix)]
        phases.secs[phase] = sum(after[t][0] - before.get(t, (0.0, 0))[0] for t in threads)
        phases.faults[phase] = sum(after[t][1] - before.get(t, (0.0, 0))[1] for t in threads)
    return phases


def _records_in(row: Any) -> int:
    import pyarrow as pa

    from sink.packed import SPOOL

    path = row.column(SPOOL)[0].as_py()
    with pa.memory_map(path, "r") as f:
        return pa.ipc.open_stream(f).read_all().num_rows


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="uniform,mixed", help="comma-separated: uniform, mixed")
    args = ap.parse_args(argv)
    from sink.spool import Spool

    p = QUICK if args.quick else FULL
    rep = common.Report("costs", args)
    rep.params = dict(p, runs=1, clock="thread CPU time")
    out = Path(args.out) / "costs"
    with common.work_dir(out, args.keep), cs.tansu(out / "broker") as broker:
        for name in args.workloads.split(","):
            n = p["messages"][name]
            topic = f"costs-{name}"
            workloads.prefill(broker.bootstrap_servers, topic, p["partitions"], n, workloads.WORKLOADS[name],
                              common.SEED)
            per_m = 1e6 / n
            for flush in ("async", "sync"):
                spool_dir = out / f"spool-{name}-{flush}"
                spooled = Spool.given(str(spool_dir), f"costs-{name}-{flush}")
                try:
                    task_phases, rows = read_tasks(broker.bootstrap_servers, topic, p["partitions"], n,
                                                   spooled.target)
                    with common.scratch(args, f"costs/store-{name}-{flush}") as root:
                        driver_phases = driver(rows, root, flush, p["batch"], spooled)
                finally:
                    spooled.close()
                shutil.rmtree(spool_dir, ignore_errors=True)
                tag = f"{name}.{flush}"
                tasks, writer = task_phases.secs, driver_phases.secs
                for side, phases in (("read_task", task_phases), ("driver", driver_phases)):
                    for phase, secs in sorted(phases.secs.items()):
                        rep.add(f"{tag}.{side}.{phase}.cpu_s_per_m", [secs * per_m], "s")
                    # new pages each phase touched: on a VM that hands freed memory back to its host,
                    # these are what moves a phase's CPU between runs (BENCHMARKS.md, "The machine")
                    for phase, faults in sorted(phases.faults.items()):
                        rep.add(f"{tag}.{side}.{phase}.faults_per_m", [faults * per_m], "faults")
                task_total = sum(tasks.values()) * per_m
                driver_total = sum(writer.values()) * per_m
                busiest = max(writer["append"] + writer["collect"] + writer["check"] + writer["flush"] + writer["commit"]
                              + writer["write_batch_other"], writer["index"], writer["copy_helper"]) * per_m
                rep.add(f"{tag}.read_task.total.cpu_s_per_m", [task_total], "s")
                rep.add(f"{tag}.driver.total.cpu_s_per_m", [driver_total], "s")
                rep.add(f"{tag}.store_saturates_msgs_per_s", [1e6 / driver_total], "msg/s")
                rep.add(f"{tag}.store_ceiling_msgs_per_s", [1e6 / busiest], "msg/s")
                rep.add(f"{tag}.executor_cores_per_driver_core", [task_total / driver_total], "cores")
                # one driver core's whole load against its busiest thread alone: how far threads help
                rep.ratio(f"{tag}.ratio.saturates_vs_ceiling", f"{tag}.store_saturates_msgs_per_s",
                          f"{tag}.store_ceiling_msgs_per_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
