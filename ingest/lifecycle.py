"""One job's life, the same for ``commitlog run`` and ``commitlog replay``: its settings checked once,
before anything starts, then the metrics, the store's writer, the spool and the Spark session it owns,
closed in one order whatever ends the job (done, a stop signal, a failure).

The order of the close is what makes a stop clean: the metrics server first (a scrape no longer
sees a store going away), then the command's own (the query stopped, the batches in progress
committed or abandoned: ``closing``), the writer (the store's last commit and its lock), the spool
(its files swept), the command's last lines (``closed``), and Spark last.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from ingest.broker_groups import BrokerGroupError, check_store_group
from ingest import version
from ingest.config import JobConfig
from ingest.job_settings import store_config
from ingest.kafka.commit_group import GroupCommitter
from ingest.metrics import JobMetrics, MetricsServer
from ingest.redaction import spark_conf as redaction_conf
from sink import BatchStats, CommitLogWriter
from sink.handover.spool import Spool
from sink.handover.spool_task import auto_dir
from sink.handover.trust import check_existing_dir
from sink.spark_checkpoint import check_checkpoint_dir

log = logging.getLogger("commitlog.run")


def check_settings(cfg: JobConfig, command: str, reach_brokers: bool = False) -> None:
    """Every check of the settings against the machine, in one place, before Spark starts: the spool
    directory and the checkpoint's (refused whatever --skip-preflight says: another user could change
    them, sink.handover.trust), the broker group the store was written as, and unless
    --skip-preflight the store's path, the checkpoint's and, when asked, the brokers. The checkpoint
    is ``run``'s only (a replay keeps none)."""
    from ingest.preflight import check_checkpoint_path, check_store_path, check_topics_reachable

    streaming = command == "run"
    check_spool_setting(cfg)
    check_store_group(cfg.store, cfg.group)
    if not cfg.skip_preflight:
        check_store_path(cfg.store)
        if streaming:
            check_checkpoint_path(cfg.checkpoint)
        if reach_brokers:
            check_topics_reachable(cfg, warn_missing=streaming)
    if streaming:
        check_checkpoint_dir(cfg.checkpoint or None)


def check_spool_setting(cfg: JobConfig) -> None:
    """The spool directory the job would use, if it exists, is one it may use (sink.handover.trust);
    raises UntrustedPathError. The automatic one is checked whatever the master: it is inside the
    store, where no one else should have put anything."""
    if cfg.spool_dir == "off" or cfg.source != "kafka-python":
        return
    if cfg.spool_dir == "auto":
        check_existing_dir(auto_dir(cfg.store), "spool directory", private=True)
    else:
        check_existing_dir(os.path.realpath(cfg.spool_dir), "--spool-dir", private=False)


def spool_directory(cfg: JobConfig, spark: Any) -> str | None:
    """Where our source's read tasks leave their batches for the driver (sink.handover.spool), or
    None: through Spark. ``auto`` spools only when the executors are on this machine (local mode),
    in ``<store>/spool``, which the store's lock keeps to one job."""
    if cfg.spool_dir == "off" or cfg.source != "kafka-python":
        return None
    if cfg.spool_dir != "auto":
        return os.path.realpath(cfg.spool_dir)
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    return auto_dir(cfg.store)


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
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
            # the Python workers' TCP sockets acknowledge at once: no ~40 ms delayed-ACK stall a
            # task (README "Latency"). Not spark.python.unix.domain.socket.enabled, which avoids it
            # too: there a worker whose executor closes it at stop fails its last flush at once and
            # the driver's planner runners (always forked from pyspark.daemon, whatever this says)
            # print that traceback to our stderr; over TCP the write is taken quietly.
            "spark.python.daemon.module": "ingest.python_daemon"}
    conf.update(redaction_conf(cfg.spark_conf))
    conf.update(cfg.spark_conf)
    return build_session(master=cfg.master, app_name="commitlog-run", extra_conf=conf)


def open_commit_group(cfg: JobConfig) -> GroupCommitter | None:
    """The --commit-group committer (ingest.kafka.commit_group), checked against the group's live
    members; None without the setting. Raises CommitGroupError."""
    if not cfg.commit_group:
        return None
    from ingest.reader_options import kafka_reader_options
    from ingest.kafka.options import kafka_client_params

    return GroupCommitter(kafka_client_params(kafka_reader_options(cfg, "earliest")), cfg.commit_group)


def _named_compaction_topics(cfg: JobConfig) -> list[str]:
    """The topics --topic-cleanup-policy makes compaction topics, whatever the brokers say."""
    from ingest.kafka.topic_configs import COMPACTION

    return sorted(t for t, policy in cfg.topic_cleanup_policy.items() if policy == COMPACTION)


def compacted_topics(cfg: JobConfig) -> list[str]:
    """The Kafka topics of the job whose cleanup.policy compacts (asked of the brokers now; a topic
    a pattern finds later is not asked), less those --topic-cleanup-policy names. A replay of files
    asks no broker."""
    from ingest.kafka.topic_configs import COMPACTION, cleanup_policies

    if not cfg.bootstrap_servers or cfg.bootstrap_servers.startswith("(unused"):
        return _named_compaction_topics(cfg)
    from ingest.reader_options import kafka_reader_options
    from ingest.kafka.options import kafka_client_params

    params = kafka_client_params(kafka_reader_options(cfg, "earliest"))
    if cfg.subscribe_pattern:
        policies = cleanup_policies(params, pattern=cfg.subscribe_pattern)
    else:
        import json

        named = sorted(json.loads(cfg.assign)) if cfg.assign else \
            [t.strip() for t in (cfg.subscribe or "").split(",") if t.strip() and t.strip() != "*"]
        policies = cleanup_policies(params, [t for t in named if t not in cfg.topic_cleanup_policy])
    policies.update(cfg.topic_cleanup_policy)
    return sorted(t for t, policy in policies.items() if policy == COMPACTION)


def compaction_targets(cfg: JobConfig) -> list[str]:
    """The RocketMQ topics to store as compaction topics: the job's compacted Kafka topics (and
    those --topic-cleanup-policy makes so), as --topic-map names them, said in one line. A failed
    question to the brokers is a warning: the store goes on with the compaction topics it has."""
    from ingest.kafka.topic_configs import TopicConfigError

    try:
        found = compacted_topics(cfg)
    except TopicConfigError as exc:   # the store keeps the compaction topics it has; those named still count
        log.warning("%s", exc)
        found = _named_compaction_topics(cfg)
    targets = sorted({cfg.topic_map.get(t, t) for t in found})
    if found:
        log.info("Kafka topics %s are compacted (cleanup.policy compact): stored as RocketMQ compaction topics "
                 "(cleanup.policy COMPACTION, a compaction log per queue; --topic-cleanup-policy T=delete for an "
                 "ordinary topic)", ", ".join(found))
    return targets


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


class JobLifecycle:
    """One run or replay: settings checked when made; metrics started on entry (a port that cannot
    be served is a usage error, before anything else starts); the writer, the spool and the Spark
    session opened when the command asks; all of it closed on exit in the module's order.
    ``spark``: an existing session (tests), used and left running; else one is built when asked
    and stopped at the end."""

    def __init__(self, cfg: JobConfig, command: str, spark: Any | None = None, reach_brokers: bool = False) -> None:
        check_settings(cfg, command, reach_brokers)
        self.cfg, self.command = cfg, command
        self.spark = spark
        self._own_spark = spark is None
        self._starting: Future[Any] | None = None
        self.metrics = JobMetrics(command, os.path.abspath(cfg.store), cfg.broker_group)
        self.server: MetricsServer | None = None
        self.writer: CommitLogWriter | None = None
        self.spool: Spool | None = None
        self._closing: list[Callable[[], None]] = []
        self._closed: list[Callable[[], None]] = []
        # last of the checks: a group a live consumer is a member of is refused before anything starts
        self.committer = open_commit_group(cfg)
        if self.committer is not None:
            self.metrics.watch_commit_group(self.committer)

    def __enter__(self) -> JobLifecycle:
        if self.cfg.metrics_port is not None:
            self.server = MetricsServer(self.metrics, self.cfg.metrics_host, self.cfg.metrics_port)
        return self

    def start_session(self) -> None:
        """Start building the job's Spark session on a thread of its own, so that the command can do
        what needs no Spark meanwhile (a replay's plan from the brokers); ``session`` then waits for
        it. A command that fails before it asks for the session does not wait for Spark: the JVM goes
        with our process, when its stdin pipe from us closes."""
        if self.spark is not None or self._starting is not None:
            return
        starting: Future[Any] = Future()

        def build() -> None:
            try:
                starting.set_result(spark_session(self.cfg))
            except Exception as exc:      # raised by ``session``, in the command's thread
                starting.set_exception(exc)

        self._starting = starting
        threading.Thread(target=build, name="spark-start", daemon=True).start()

    def session(self) -> Any:
        """The job's Spark session, built on first use (or by ``start_session``)."""
        if self.spark is None:
            starting, self._starting = self._starting, None
            self.spark = starting.result() if starting is not None else spark_session(self.cfg)
        return self.spark

    def open_writer(self) -> CommitLogWriter:
        """The store's writer (its lock held from here on), watched by the metrics. The broker group
        is checked again under the lock: a job of another group may have committed since
        check_settings read the commit point."""
        cfg = self.cfg
        writer = CommitLogWriter(cfg.store, store_config(cfg, compaction_targets(cfg)), truncate_on_corruption=cfg.truncate_on_corruption,
                                 broker_group=cfg.broker_group)
        try:
            check_store_group(cfg.store, cfg.group, writer.state)
        except BrokerGroupError:
            writer.close()
            raise
        self.writer = writer
        self.metrics.watch_store(self.writer.store.usage, self.writer.store.open_report)
        return self.writer

    def batch_committed(self, stats: BatchStats) -> None:
        """After each batch the store committed (the writer's thread): count it, and mirror the
        store's Kafka offsets to --commit-group (never waits for Kafka)."""
        self.metrics.batch(stats)
        if self.committer is not None and self.writer is not None:
            from sink.state import parse_tp_key

            self.committer.offer({parse_tp_key(k): v for k, v in self.writer.state.kafka_offsets.items()})

    def open_spool(self) -> Spool | None:
        """The spool the job's tasks write to, checked and opened; after ``open_writer``: the store's
        lock keeps its directory to this job. None: batches come through Spark."""
        assert self.writer is not None, "open the writer first: its lock guards the spool directory"
        cfg = self.cfg
        directory = spool_directory(cfg, self.session())
        if directory is not None:
            self.spool = Spool.for_store(cfg.store) if cfg.spool_dir == "auto" else Spool.given(directory, cfg.store)
        # the job's first line, after the last of its start-up refusals: a refusal stays one line
        log.info("commitlog %s %s: store %s", version(), self.command, os.path.abspath(cfg.store))
        return self.spool

    def closing(self, call: Callable[[], None]) -> None:
        """``call`` at exit after the metrics server stops, before the writer closes."""
        self._closing.append(call)

    def closed(self, call: Callable[[], None]) -> None:
        """``call`` at exit after the writer and the spool close, before Spark stops."""
        self._closed.append(call)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.server is not None:
            self.server.stop()
        for call in self._closing:
            call()
        if self.writer is not None:
            self.writer.close()
        if self.committer is not None:
            self.committer.close()      # the last batch's offsets, committed or warned about
        if self.spool is not None:
            self.spool.close()
        for call in self._closed:
            call()
        if self._own_spark and self.spark is not None:
            self.spark.stop()
