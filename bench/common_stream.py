"""What the Kafka and Spark benchmarks (pipeline.py, replay.py) share: the embedded brokers,
pre-filling topics, per-batch progress from Spark's listener, and sampling the driver's memory.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

VALUE_BYTES = 100


@contextmanager
def tansu(log_dir: Path) -> Iterator[Any]:
    """The embedded Tansu broker (in memory), stopped afterwards."""
    from ingest.devtools.broker.tansu import start_tansu

    b = start_tansu(log_dir=log_dir)
    try:
        yield b
    finally:
        b.stop()


@contextmanager
def embedded_broker(kind: str, log_dir: Path) -> Iterator[Any]:
    """One of our embedded brokers (``kafka``: Apache Kafka from its jars, on disk; ``tansu``: in
    memory), stopped afterwards."""
    from ingest.devtools.broker import start_embedded

    b = start_embedded(kind, log_dir=log_dir)
    try:
        yield b
    finally:
        b.stop()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create ``topic`` unless it is there."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-admin")
    try:
        try:
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        except TopicAlreadyExistsError:
            pass
    finally:
        admin.close()


def prefill_topic(bootstrap: str, topic: str, partitions: int, n: int, value_size: int = VALUE_BYTES,
                  seed: int = common.SEED) -> float:
    """Create ``topic`` and produce ``n`` random ``value_size``-byte records round-robin over its
    partitions with a kafka-python producer in big batches. Returns the seconds it took."""
    from kafka import KafkaProducer

    create_topic(bootstrap, topic, partitions)
    values = np.random.default_rng(seed).integers(0, 256, size=(n, value_size), dtype=np.uint8)
    keys = [b"key-%d" % i for i in range(64)]
    t0 = time.perf_counter()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20)
    try:
        for i in range(n):
            producer.send(topic, value=values[i].tobytes(), key=keys[i & 63], partition=i % partitions)
        producer.flush(timeout=600)
    finally:
        producer.close()
    return time.perf_counter() - t0


# --- per-batch progress ---------------------------------------------------------------------
@dataclass
class BatchProgress:
    batch_id: int
    rows: int
    duration_ms: float
    start: float          # epoch seconds of the trigger start


def _epoch(ts: str) -> float:
    return _dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass
class RunProgress:
    batches: list[BatchProgress] = field(default_factory=list)

    @property
    def data_batches(self) -> list[BatchProgress]:
        return [b for b in self.batches if b.rows > 0]

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches)

    def sustained_rate(self) -> float:
        """Rows over the span from the first data batch's start to the last one's end."""
        d = self.data_batches
        if not d:
            return 0.0
        span = max(b.start + b.duration_ms / 1e3 for b in d) - min(b.start for b in d)
        return self.rows / span if span > 0 else float("nan")

    def latency_ms(self, q: float) -> float:
        return common.percentile([b.duration_ms for b in self.data_batches], q)


def progress_listener(spark: Any) -> tuple[Any, list[Any]]:
    """Register a StreamingQueryListener collecting every query progress; returns (listener, list)."""
    from pyspark.sql.streaming import StreamingQueryListener

    events: list[Any] = []

    class Collector(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            events.append((str(p.runId), BatchProgress(int(p.batchId), int(p.numInputRows),
                                                       float(p.durationMs.get("triggerExecution", 0)),
                                                       _epoch(p.timestamp))))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Collector()
    spark.streams.addListener(listener)
    return listener, events


def collect(events: list[Any], since: int, expected_rows: int, timeout_s: float = 10.0,
            records: Mapping[int, int] | None = None, committed: Mapping[int, float] | None = None
            ) -> RunProgress:
    """The progress events after index ``since``; waits briefly for late ones (the listener bus is
    asynchronous) until they account for ``expected_rows``. ``records`` (batch id -> records the
    sink wrote) replaces Spark's numInputRows, which counts the job's packed rows (sink.handover.packed),
    not records. ``committed`` (batch id -> epoch seconds of the store's commit) ends each batch
    there instead: the sink commits a batch after Spark has recorded it (sink.foreach_batch)."""
    def current() -> list[BatchProgress]:
        got = [b for _, b in events[since:]]
        if records is not None:
            got = [dataclasses.replace(b, rows=records.get(b.batch_id, 0)) for b in got]
        if committed is not None:
            got = [dataclasses.replace(b, duration_ms=max(b.duration_ms, (committed[b.batch_id] - b.start) * 1e3))
                   if b.batch_id in committed else b for b in got]
        return got

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(b.rows for b in current()) >= expected_rows:
            break
        time.sleep(0.1)
    return RunProgress(sorted(current(), key=lambda b: (b.start, b.batch_id)))


# --- driver memory ---------------------------------------------------------------------------
class RssSampler:
    """Samples VmRSS of this process and of its JVM child (the Spark driver) every ``interval_s``."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, int, int]] = []   # (t, python rss, python anon, jvm rss)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.jvm_pid = jvm_child()

    def __enter__(self) -> "RssSampler":
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            jvm = common.rss_bytes(self.jvm_pid) if self.jvm_pid else 0
            self.samples.append((time.monotonic() - t0, common.rss_bytes(), common.rss_bytes(kind="RssAnon"), jvm))
            self._stop.wait(self.interval_s)

    @property
    def python_peak(self) -> int:
        return max((s[1] for s in self.samples), default=0)

    @property
    def python_anon_peak(self) -> int:
        return max((s[2] for s in self.samples), default=0)

    @property
    def jvm_peak(self) -> int:
        return max((s[3] for s in self.samples), default=0)


def jvm_child() -> int | None:
    """The pid of the Spark driver JVM this Python process launched (a java child), if any."""
    for pid in common.child_pids():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def spark_session(cores: int = 2, driver_memory: str | None = None) -> Any:
    """A SparkSession configured as ``commitlog run`` configures its own (ingest.lifecycle.spark_session);
    ``driver_memory`` as `--spark-conf spark.driver.memory=...` would set it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from ingest.config import JobConfig
    from ingest.lifecycle import spark_session as job_session

    conf = {"spark.driver.memory": driver_memory} if driver_memory else {}
    return job_session(JobConfig(master=f"local[{cores}]", spark_conf=conf))


if __name__ == "__main__":  # `make bench-quick` runs every bench/*.py: this one is only a library
    print("bench/common_stream.py: shared helpers of pipeline.py and replay.py; nothing to measure",
          file=sys.stderr)
