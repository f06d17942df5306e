"""Prometheus metrics of ``commitlog run`` and ``commitlog replay`` (``--metrics-port``).

Each job has its own CollectorRegistry (no process-wide state: two jobs in one process, as the tests
run them, count apart). The figures come from what the sink and the store expose: each committed
batch's BatchStats (counters, the phase histogram), the query progress (Kafka lag), and at scrape
time the store's ``usage()`` and ``open_report`` (sizes, positions, what recovery found). The names
follow Prometheus' conventions (``commitlog_`` prefix, ``_total`` counters, seconds and bytes); the
README's "Watching a job" lists them.

Spark's own progress gets the batch's records, bytes and dead letters too: ``observe_batches``
sums the counts every packed row carries (sink.handover.packed) into ``observedMetrics["commitlog"]`` of each
progress event (``query.lastProgress``, StreamingQueryListener, the event log). Spark's UI does not
chart observed metrics, and a Python data source cannot report source metrics, so its streaming tab
keeps counting input rows as the packed batches Spark moves, not records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
import numpy as np
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from ingest import version
from ingest.kafka.commit_group import GroupCommitter
from sink import BatchStats
from store import OpenReport, StoreError, StoreUsage

log = logging.getLogger("commitlog.metrics")

PHASES = ("collect", "append", "index", "flush", "commit")
# a batch's phases run from a millisecond (an idle commit) to tens of seconds (a large first batch)
PHASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OBSERVED = "commitlog"      # the name of the observed metrics in Spark's progress
# a record's time from its producer to the commit that made it durable: a fraction of a second with a
# short trigger, minutes for a job catching up
LATENCY_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
                   300.0, 1800.0)

class MetricsPortError(OSError):
    """The metrics port cannot be served (in use, no such address)."""


class StoreCollector(Collector):
    """The store's figures, read when Prometheus scrapes (from the HTTP server's thread)."""

    def __init__(self, usage: Callable[[], StoreUsage], opened: OpenReport) -> None:
        self.usage = usage
        self.opened = opened

    def collect(self) -> Iterator[Any]:
        o = self.opened
        yield _gauge("commitlog_store_open_unclean", "1 when the last writer had not closed the store "
                     "(recovered after a crash)", int(o.unclean))
        yield _gauge("commitlog_store_open_dropped_bytes", "Uncommitted bytes cut at open (a crash's torn tail)",
                     o.dropped_bytes)
        yield _gauge("commitlog_store_open_dropped_segments", "Uncommitted segments deleted at open",
                     o.dropped_segments)
        yield _gauge("commitlog_store_open_damaged_records", "Committed records found damaged at open (kept; "
                     "`commitlog verify` lists them)", o.damaged_records)
        yield _gauge("commitlog_store_open_lost_committed_bytes", "Committed bytes cut at open by "
                     "--truncate-on-corruption", o.lost_committed_bytes)
        yield _gauge("commitlog_store_open_adopted_bytes", "Bytes another writer (a RocketMQ broker) appended "
                     "past the commit point, adopted at open", o.adopted_bytes)
        yield _gauge("commitlog_store_open_adopted_records", "Records another writer appended past the commit "
                     "point, adopted at open", o.adopted_records)
        try:
            u = self.usage()
        except (StoreError, OSError) as exc:      # the store closed while the job ends
            log.debug("store figures not read: %s", exc)
            return
        yield _gauge("commitlog_store_committed_offset_bytes", "The commit point: commit-log offset of the last "
                     "commit", u.committed_offset)
        yield _gauge("commitlog_store_commit_log_bytes", "Committed commit-log bytes the store holds",
                     u.commit_log_bytes)
        yield _gauge("commitlog_store_disk_bytes", "Bytes the store's files take on disk", u.disk_bytes)
        yield _gauge("commitlog_store_free_disk_bytes", "Free bytes on the store's file system", u.free_disk_bytes)
        yield _gauge("commitlog_store_segments", "Commit-log segment files", u.segments)
        yield _gauge("commitlog_store_index_files", "index/ files", u.index_files)
        yield _gauge("commitlog_store_index_fill_ratio", "How full the newest index file is (0 to 1)", u.index_fill)
        yield _gauge("commitlog_store_last_commit_timestamp_seconds", "When the last commit was written "
                     "(Unix time)", u.last_commit_ms / 1000)


class LatencyCollector(Collector):
    """End-to-end latency, counted a batch at a time (a batch holds up to millions of records: one
    numpy pass, not one observe() each), and the age of what is not committed yet."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counts = np.zeros(len(LATENCY_BUCKETS) + 1, dtype=np.int64)    # the last: +Inf
        self._sum = 0.0
        self._newest_born_ms = 0
        self._behind = False

    def observe(self, latency_s: np.ndarray, newest_born_ms: int) -> None:
        if not len(latency_s):
            return
        at = np.searchsorted(np.asarray(LATENCY_BUCKETS), latency_s, side="left")
        with self._lock:
            self._counts += np.bincount(at, minlength=len(self._counts))
            self._sum += float(latency_s.sum())
            self._newest_born_ms = max(self._newest_born_ms, newest_born_ms)

    def behind(self, is_behind: bool) -> None:
        with self._lock:
            self._behind = is_behind

    def collect(self) -> Iterator[Any]:
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total, newest, behind = self._sum, self._newest_born_ms, self._behind
        buckets = [(repr(le), int(c)) for le, c in zip(LATENCY_BUCKETS, cumulative)] + [("+Inf", int(cumulative[-1]))]
        yield HistogramMetricFamily("commitlog_end_to_end_latency_seconds", "Each stored record's time from its "
                                    "producer's timestamp (the Kafka record's) to the commit that made it durable",
                                    buckets=buckets, sum_value=total)
        age = max(self._clock() - newest / 1000, 0.0) if behind and newest else 0.0
        yield _gauge("commitlog_uncommitted_age_seconds", "How long the oldest record not committed yet may have "
                     "waited: seconds since the producer timestamp of the newest committed record, while the job "
                     "is behind Kafka's latest offsets (0 once it has caught up)", age)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class CommitGroupCollector(Collector):
    """--commit-group: the group's name and meaning, and its commits (ingest.kafka.commit_group)."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer

    def collect(self) -> Iterator[Any]:
        c = self.committer.counts
        yield InfoMetricFamily("commitlog_commit_group", "The Kafka consumer group the job commits the store's "
                               "next offsets to after each batch: for Kafka's lag tools only; the job's position "
                               "is the store's commit point and it never reads the group back",
                               value={"group": self.committer.group})
        for name, doc, value in (
                ("commits", "Commits of the stored offsets the group's coordinator took", c.commits),
                ("failures", "Commits of the stored offsets refused or lost (the stream goes on; a warning a "
                             "minute at most)", c.failures),
                ("last_commit_timestamp_seconds", "When the group last took a commit (0: none yet)", c.last_commit_s)):
            yield _gauge(f"commitlog_commit_group_{name}", doc, value)


class JobInfo(Collector):
    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)

    def collect(self) -> Iterator[Any]:
        yield InfoMetricFamily("commitlog_job", "The job: its command, store, broker group and commitlog-ingest's version", value=self.labels)


class JobMetrics:
    """The metrics of one job, in a registry of its own."""

    def __init__(self, command: str, store: str, broker_group: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = Counter("commitlog_stored_records", "Messages committed to the store", ["topic"], registry=r)
        self.bytes = Counter("commitlog_stored_bytes", "Commit-log bytes of the messages committed", ["topic"],
                             registry=r)
        self.dead_letters = Counter("commitlog_dead_letters", "Records committed to the dead-letter file, by kind "
                                    "of reason", ["reason"], registry=r)
        self.batches = Counter("commitlog_batches", "Batches committed", registry=r)
        self.phases = Histogram("commitlog_batch_phase_seconds", "Time of each phase of a batch: collect (Spark "
                                "reads, encodes and hands it over), append, index, flush, commit", ["phase"],
                                buckets=PHASE_BUCKETS, registry=r)
        self.lag = Gauge("commitlog_kafka_lag_records", "Offsets between the last batch's end and the latest "
                         "offset, per Kafka partition (replay: to the end of its range)", ["topic", "partition"],
                         registry=r)
        for phase in PHASES:
            self.phases.labels(phase)     # every phase is there from the start, at zero
        r.register(JobInfo({"command": command, "store": store, "broker_group": broker_group or "",
                            "version": version()}))
        self.latency = LatencyCollector(time.time)
        r.register(self.latency)
        self._lock = threading.Lock()

    def watch_commit_group(self, committer: GroupCommitter) -> None:
        """Report what --commit-group mirrors, and how its commits go, at each scrape."""
        self.registry.register(CommitGroupCollector(committer))

    def watch_store(self, usage: Callable[[], StoreUsage], opened: OpenReport) -> None:
        """Report the store's figures at each scrape (once the writer has opened it)."""
        self.registry.register(StoreCollector(usage, opened))

    def batch(self, stats: BatchStats) -> None:
        """Count one committed batch."""
        for topic, n in stats.topic_records.items():
            self.records.labels(topic).inc(n)
        for topic, n in stats.topic_bytes.items():
            self.bytes.labels(topic).inc(n)
        self.count_dead_letters(stats.dead_reasons)
        self.batches.inc()
        for phase, ms in zip(PHASES, (stats.collect_ms, stats.append_ms, stats.index_ms, stats.flush_ms,
                                      stats.commit_ms)):
            self.phases.labels(phase).observe(max(ms, 0.0) / 1000)
        if stats.born_ms is not None and len(stats.born_ms):
            self.latency.observe(stats.latency_s(), int(stats.born_ms.max()))

    def count_dead_letters(self, reasons: Mapping[str, int]) -> None:
        """Count dead letters by their reason codes (store.DeadLetterReason: a batch's, or a replay's
        file rows with no place)."""
        for code, n in reasons.items():
            self.dead_letters.labels(code).inc(n)

    def kafka_lag(self, behind: Mapping[tuple[str, int], int]) -> None:
        """Set the lag of each partition given; a partition no longer read keeps its last value until
        the job ends (Prometheus marks it stale then)."""
        with self._lock:
            for (topic, partition), n in behind.items():
                self.lag.labels(topic, str(partition)).set(n)
        self.latency.behind(any(n > 0 for n in behind.values()))


class MetricsServer:
    """``JobMetrics`` served over HTTP (``/metrics``) on a thread, until ``stop``."""

    def __init__(self, metrics: JobMetrics, host: str, port: int) -> None:
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=metrics.registry)
        except OSError as exc:
            raise MetricsPortError(exc.errno, f"--metrics-host {host} --metrics-port {port}: cannot serve "
                                              f"metrics there ({exc.strerror or exc}); give a free port, or "
                                              f"leave --metrics-port out") from None
        self.host = host
        self.port = int(self._server.server_port)
        log.info("Prometheus metrics on http://%s:%d/metrics", host if ":" not in host else f"[{host}]", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def observe_batches(df: Any) -> Any:
    """``df`` with its batches' record, byte and dead-letter counts observed into Spark's progress
    (``observedMetrics["commitlog"]``). For the packed batches of our source; a DataFrame of Kafka
    columns (Spark's own source) gets its row count only, as records are encoded after it."""
    from pyspark.sql import functions as F

    from sink.handover.packed import COUNT_COLUMNS

    if all(c in df.columns for c in COUNT_COLUMNS):
        return df.observe(OBSERVED, *(F.coalesce(F.sum(c), F.lit(0)).alias(c) for c in COUNT_COLUMNS))
    return df.observe(OBSERVED, F.count(F.lit(1)).alias("records"))
