"""What does a million records cost, in CPU seconds, in each phase of the read tasks and of the one
driver-side writer, and so how many executor cores can one driver core keep busy, and at what rate
does one store saturate?

CPU time of each thread (its own clock, nanoseconds), not wall time: a figure that does not depend
on what else the machine runs. The phases run outside Spark, in this process, on the same code the
job runs, over topics of the pipeline's workloads (bench/workloads.py) on the embedded broker:
- read tasks, one partition range after another (ingest.kafka.read.read_range with the job's
  encoder, ingest.encode.message_reader.EncodedBatches): ``fetch`` (kafka-python's poll and the
  fetch response cut into record-batch sections), ``decode+encode`` (the C pass from fetched bytes to
  CommitLog records, or Kafka columns and the mapping for what it hands back), ``index_keys`` (each
  record's index keys found and hashed for the batch, ingest.encode.index_keys, the index being on),
  ``hand_over`` (the batch written to a spool file, sink.handover.spool, local mode's way);
- the driver, micro-batches of ``batch`` records (sink.CommitLogWriter.write_batch on a fresh store):
  ``collect`` (the spool files mapped in, sink.batch.prepare), ``append`` (MessageStore.append_encoded
  on the caller's thread), ``copy_helper`` (the commit log's second copying thread, which also writes
  the consume queues), ``index`` (the keys the batch brings put, on that same helper thread: counted
  here, not in ``copy_helper``), ``flush`` (the msyncs, on
  the caller's thread and the flush service's), ``commit`` (the commit point), ``warm_ahead`` (pages
  faulted in ahead of the writer).
Spark's own share (the JVM scheduling tasks, moving the spool files' names, toArrow) is not in these
figures; bench/pipeline.py measures the whole job against Spark's noop sink.
Beside each phase's CPU, the kernel's share of it (``kernel_s_per_m``: page faults, writes into the
page cache, msync) and its minor page faults (``faults_per_m``; pages a write() or a populating
madvise takes are not faults, only their kernel time shows): on a VM whose host takes freed memory
back, a phase that takes new pages pays for each, and that moves its CPU between runs.
From them: ``executor_cores_per_driver_core`` = read-task CPU / driver CPU, and
``store_saturates_msgs_per_s`` = 1e6 / the driver's CPU seconds per million (one driver core), with
``store_ceiling_msgs_per_s`` = 1e6 / its busiest thread's (the serial limit however many cores).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
import workloads  # noqa: E402

FULL = {"messages": {"uniform": 1_000_000, "mixed": 200_000}, "batch": 50_000, "partitions": 2}
QUICK = {"messages": {"uniform": 20_000, "mixed": 4_000}, "batch": 5_000, "partitions": 2}
DRIVER_THREADS = {"copy_helper": "commitlog-copy", "flush_thread": "commitlog-flush", "warm_ahead": "segment-warm-ahead"}


@dataclass(frozen=True)
class Usage:
    """What a thread has used: CPU seconds, of them the kernel's (page faults, writes into the page
    cache, msync), and minor page faults."""

    cpu: float = 0.0
    kernel: float = 0.0
    faults: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu + other.cpu, self.kernel + other.kernel, self.faults + other.faults)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpu - other.cpu, self.kernel - other.kernel, self.faults - other.faults)


TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def thread_usage() -> dict[str, Usage]:
    """Each live thread's usage so far, by name (several of one name added up)."""
    out: dict[str, Usage] = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            secs = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            with open(f"/proc/self/task/{t.native_id}/stat", "rb") as f:
                stat = f.read()
        except OSError:         # ended meanwhile
            continue
        fields = stat[stat.rindex(b")") + 2:].split()      # from field 3 (state): minflt is 10, stime 15
        out[t.name] = out.get(t.name, Usage()) + Usage(secs, int(fields[12]) * TICK_S, int(fields[7]))
    return out


def own_usage() -> Usage:
    """The calling thread's usage so far."""
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return Usage(time.thread_time(), ru.ru_stime, ru.ru_minflt)


class Phases:
    """Usage by phase, from the caller's thread; a phase inside another counts for itself only
    (commit() flushes: that flush is the flush's, not the commit's)."""

    def __init__(self) -> None:
        self.used: dict[str, Usage] = {}
        self._inner: list[Usage] = []       # per open phase: what the phases inside it used

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        start = own_usage()
        self._inner.append(Usage())
        try:
            yield
        finally:
            spent = own_usage() - start
            inner = self._inner.pop()
            self.used[name] = self.used.get(name, Usage()) + spent - inner
            if self._inner:
                self._inner[-1] = self._inner[-1] + spent

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
    from ingest.encode.index_keys import add_index_keys
    from ingest.encode.message_reader import EncodedBatches
    from ingest.job_settings import codec_config, mapping_config
    from ingest.kafka.offsets import KafkaOffsetRange
    from ingest.kafka.options import kafka_client_params
    from ingest.kafka.read import KafkaColumns, read_range
    from ingest.kafka.source import arrow_schema, kafka_schema
    from sink.handover import spool_task as spool

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
                if cfg.message_index:
                    with phases.timing("index_keys"):
                        batch = add_index_keys(batch)
                with phases.timing("hand_over"):
                    rows.append(spool.write(batch, target))
    phases.used["fetch"] = phases.used.pop("task")
    return phases, rows


def driver(rows: list, root: Path, flush: str, batch: int, spooled: Any) -> Phases:
    """The writer's phases over the spooled batches, cut into micro-batches of about ``batch`` records."""
    import pyarrow as pa

    from sink import CommitLogWriter
    from sink.batch import prepare
    from sink.handover.packed import PACKED_SCHEMA
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
    # the index's puts, on whichever thread runs them (the copy helper): a Phases of their own, as
    # the caller's nests its phases on its own thread
    behind = Phases()
    index = writer.store._services.index
    service = index.service if index is not None else None
    if service is not None:
        behind.wrap(service, "put_shipped", "index")
        behind.wrap(service, "put_records", "index")
    try:
        phases.wrap(writer.store, "append_encoded", "append")
        phases.wrap(writer.store, "flush", "flush")
        phases.wrap(writer.store, "commit", "commit")
        before = thread_usage()
        for i, group in enumerate(groups, 1):
            with phases.timing("collect"):
                table = spooled.resolve(pa.Table.from_batches(group, PACKED_SCHEMA))
            with phases.timing("check"):     # the spool files' MACs and records (sink.handover.spool.Spool.check)
                table = spooled.check(table)
            with phases.timing("collect"):
                table = prepare(table, writer.state.kafka_offsets)
            with phases.timing("write_batch"):
                writer.write_batch(i, "costs", table)
        writer.store.settle_index()
        after = thread_usage()
    finally:
        writer.close()
    # dead letters, Kafka offsets, the batch's columns
    phases.used["write_batch_other"] = phases.used.pop("write_batch")
    for phase, prefix in DRIVER_THREADS.items():
        phases.used[phase] = sum((after[t] - before.get(t, Usage()) for t in after if t.startswith(prefix)), Usage())
    phases.used["index"] = behind.used.get("index", Usage())
    phases.used["copy_helper"] = phases.used["copy_helper"] - phases.used["index"]
    return phases


def _records_in(row: Any) -> int:
    import pyarrow as pa

    from sink.handover.packed import SPOOL

    path = row.column(SPOOL)[0].as_py()
    with pa.memory_map(path, "r") as f:
        return pa.ipc.open_stream(f).read_all().num_rows


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="uniform,mixed", help="comma-separated: uniform, mixed")
    args = ap.parse_args(argv)
    from sink.handover.spool import Spool

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
                tasks = {k: u.cpu for k, u in task_phases.used.items()}
                writer = {k: u.cpu for k, u in driver_phases.used.items()}
                for side, phases in (("read_task", task_phases), ("driver", driver_phases)):
                    for phase, u in sorted(phases.used.items()):
                        rep.add(f"{tag}.{side}.{phase}.cpu_s_per_m", [u.cpu * per_m], "s")
                        # the kernel's share and the pages faulted: on a VM that hands freed memory
                        # back to its host, new pages are what moves a phase's CPU between runs
                        rep.add(f"{tag}.{side}.{phase}.kernel_s_per_m", [u.kernel * per_m], "s")
                        rep.add(f"{tag}.{side}.{phase}.faults_per_m", [u.faults * per_m], "faults")
                task_total = sum(tasks.values()) * per_m
                driver_total = sum(writer.values()) * per_m
                busiest = max(writer["append"] + writer["collect"] + writer["check"] + writer["flush"] + writer["commit"]
                              + writer["write_batch_other"], writer["index"] + writer["copy_helper"]) * per_m
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
