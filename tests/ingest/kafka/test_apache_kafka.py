"""Against Apache Kafka itself (KRaft, one node, from the jars `make jvm` resolves): what Tansu cannot
show. Aborted transactions and the last stable offset, a compacted topic's holes, offsets deleted by
retention while the job is stopped, partitions and topics that appear while it runs. (The broker
restarted under the job and the job killed under live production: tests/e2e/crash/test_apache_kafka_lifecycle.py.)

The module starts an Apache Kafka of its own (the session's broker may be another one): topics here
are configured for compaction and retention."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions

from ingest.devtools.broker import Broker
from ingest.config import JobConfig
from ingest.job import run_stream
from tests.helpers.brokers.apache_kafka import (
    alter_topic,
    job_command,
    job_config,
    module_kafka,
    new_topic,
    readable,
    stored,
)
from tests.helpers.brokers.kafka_records import Sent, produce, store_by_coordinates, unique_topic
from tests.helpers.jobs import assert_exactly_once, assert_queues_contiguous_in_partition_order
from tests.helpers.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.8)]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_kafka(tmp_path_factory, __name__)


class TransactionalProducer:
    def __init__(self, bootstrap: str) -> None:
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                                  "transactional.id": unique_topic("tx")})
        self.producer.init_transactions(30)

    def send(self, topic: str, partitions: range, n: int, tag: str) -> list[tuple[str, int, int]]:
        sent: list[tuple[str, int, int]] = []
        for i in range(n):
            self.producer.produce(topic, key=f"{tag}-{i}".encode(), value=f"{tag}-{i}".encode(),
                                  partition=partitions[i % len(partitions)],
                                  on_delivery=lambda err, msg: sent.append((msg.topic(), msg.partition(), msg.offset())))
        self.producer.flush(30)
        return sent

    def transaction(self, topic: str, partitions: range, n: int, tag: str, commit: bool) -> list[tuple[str, int, int]]:
        self.producer.begin_transaction()
        sent = self.send(topic, partitions, n, tag)
        (self.producer.commit_transaction if commit else self.producer.abort_transaction)(30)
        return sent


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_aborted_transactions_are_stored_only_under_read_uncommitted(
        kafka: Broker, spark: object, tmp_path: Path, isolation: str) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "tx", 3)
    tx = TransactionalProducer(bootstrap)
    committed, aborted = [], []
    for t in range(6):
        (committed if t % 2 == 0 else aborted).extend(
            tx.transaction(topic, range(3), 40, f"t{t}", commit=t % 2 == 0))
    assert len(committed) == len(aborted) == 120

    cfg = job_config(bootstrap, [topic], tmp_path, kafka_option={"isolation.level": isolation})
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)

    expected = set(committed) | (set(aborted) if isolation == "read_uncommitted" else set())
    found = store_by_coordinates(cfg.store)
    assert not [k for k, v in found.items() if len(v) > 1], "a record stored twice"
    assert set(found) == expected, (f"missing {sorted(expected - set(found))[:5]}, "
                                    f"not expected {sorted(set(found) - expected)[:5]}")
    assert_queues_contiguous_in_partition_order(found)


def process_tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants (the job, its JVM, Spark's
    Python workers), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += children.get(p, [])
    return total


def test_an_open_transaction_holds_the_job_at_the_last_stable_offset_without_a_busy_loop(
        kafka: Broker, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "lso", 2)
    tx = TransactionalProducer(bootstrap)
    before = tx.transaction(topic, range(2), 100, "before", commit=True)
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(job_command(bootstrap, tmp_path, "--subscribe", topic, "--trigger", "300ms",
                                           "--kafka-option", "isolation.level=read_committed"),
                               stdout=out, stderr=out, start_new_session=True)
    try:
        wait_until(lambda: stored(tmp_path / "store") >= set(before), 900, "the committed records", interval_s=0.5)

        def idle_cpu_s(seconds: float) -> float:
            start = process_tree_cpu_s(job.pid)
            time.sleep(seconds)
            return process_tree_cpu_s(job.pid) - start

        baseline = idle_cpu_s(6.0)                      # nothing new: what idling costs
        tx.producer.begin_transaction()
        held = tx.send(topic, range(1), 50, "open")     # partition 0 only, not committed yet
        plain = produce(bootstrap, [(topic, 1, b"k", b"plain", [])] * 30)
        beside = {(s.topic, s.partition, s.offset) for s in plain}
        # partition 1 goes on while partition 0 waits at its last stable offset
        wait_until(lambda: stored(tmp_path / "store") >= beside, 120, "the other partition's records", interval_s=0.5)
        holding = idle_cpu_s(6.0)
        now = stored(tmp_path / "store")
        assert not now & set(held), "a record of the open transaction was stored before its commit"
        assert job.poll() is None, f"the job exited while a transaction was open: {log.read_text()[-3000:]}"
        assert holding <= 2 * baseline + 1.0, (f"holding at the LSO cost {holding:.1f} CPU s in 6 s, "
                                               f"idling {baseline:.1f}: a busy loop")

        tx.producer.commit_transaction(30)
        wait_until(lambda: stored(tmp_path / "store") >= set(held), 120, "the transaction's records after its commit", interval_s=0.5)
    finally:
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()
    found = store_by_coordinates(str(tmp_path / "store"))
    assert set(found) == set(before) | set(held) | beside
    assert all(len(v) == 1 for v in found.values())


def test_a_compacted_topic_is_stored_once_with_its_holes_and_contiguous_queue_offsets(
        kafka: Broker, spark: object, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    # small segments that roll every 100 ms, cleaned as soon as anything is dirty
    topic = new_topic(bootstrap, "compact", 2, cleanup_policy="compact", segment_ms="100",
                      min_cleanable_dirty_ratio="0.01", min_compaction_lag_ms="0", delete_retention_ms="100")
    produced = 0
    for rnd in range(12):
        produce(bootstrap, [(topic, i % 2, f"key-{i % 10}".encode(), f"round-{rnd}-{i}".encode(), [])
                            for i in range(40)])
        produced += 40
        time.sleep(0.15)
    last = (0, 0)

    def compacted_and_settled() -> bool:
        nonlocal last
        now = readable(bootstrap, topic, 2)
        settled = len(now) < produced and last == (len(now), max(o for _, _, o in now))
        last = (len(now), max(o for _, _, o in now))
        return settled

    wait_until(compacted_and_settled, 120, "the log cleaner to compact the topic", interval_s=2.0)
    survivors = readable(bootstrap, topic, 2)
    assert len(survivors) < produced / 2, "the cleaner left too little out to show holes"

    cfg = job_config(bootstrap, [topic], tmp_path)
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)

    found = store_by_coordinates(cfg.store)
    assert all(len(v) == 1 for v in found.values()), "a record stored twice"
    assert set(found) == survivors
    assert_queues_contiguous_in_partition_order(found)


def test_offsets_deleted_by_retention_while_stopped_fail_in_one_line_or_are_counted(
        kafka: Broker, spark: object, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "retention", 1, segment_ms="200")
    first = produce(bootstrap, [(topic, 0, None, b"first-%d" % i, []) for i in range(100)])
    cfg = job_config(bootstrap, [topic], tmp_path)
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)
    assert len(store_by_coordinates(cfg.store)) == 100

    produce(bootstrap, [(topic, 0, None, b"lost-%d" % i, []) for i in range(100)])   # 100..199
    # 200 rolls into a new segment: Kafka's segment.ms counts from the segment's first record's timestamp
    # to the new record's, and this one is stamped 30 min ahead (Kafka takes up to 1 h), so it rolls
    # whatever the wall clock did; it outlives retention.ms=100 (a segment whose newest record breaches it
    # goes, the active one too: Kafka rolls it first)
    kept = produce_at(bootstrap, topic, b"kept", int(time.time() * 1000) + 1_800_000)
    alter_topic(bootstrap, topic, retention_ms="100")
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    wait_until(lambda: consumer.beginning_offsets([tp])[tp] == 200, 60, "retention to delete offsets 0..199", interval_s=0.5)
    consumer.close()

    strict = subprocess.run(job_command(bootstrap, tmp_path, "--subscribe", topic, "--trigger", "available-now",
                                        "--fail-on-data-loss", "true"),
                            capture_output=True, text=True, timeout=300)
    assert strict.returncode == 2, strict.stderr[-3000:]
    lines = [ln for ln in strict.stderr.splitlines() if "error" in ln.lower()]     # the job's INFO log aside
    assert len(lines) == 1 and lines[0].startswith("commitlog run: error: "), strict.stderr[-3000:]
    assert f"{topic}-0" in lines[0] and "100" in lines[0] and "199" in lines[0], lines[0]
    assert "Traceback" not in strict.stderr and "at org.apache" not in strict.stderr

    lenient = subprocess.run(job_command(bootstrap, tmp_path, "--subscribe", topic, "--trigger", "available-now",
                                         "--fail-on-data-loss", "false"),
                             capture_output=True, text=True, timeout=300)
    assert lenient.returncode == 0, lenient.stderr[-3000:]
    assert "100 offsets" in lenient.stderr and f"{topic}-0" in lenient.stderr, lenient.stderr[-3000:]
    found = store_by_coordinates(cfg.store)
    assert set(found) == {(s.topic, s.partition, s.offset) for s in first + kept}
    assert all(len(v) == 1 for v in found.values())


def produce_at(bootstrap: str, topic: str, value: bytes, timestamp_ms: int) -> list[Sent]:
    """One record to partition 0 with the given timestamp (the helper stamps records now)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    meta = producer.send(topic, value=value, partition=0, timestamp_ms=timestamp_ms).get(timeout=30)
    producer.close()
    return [Sent(topic, 0, meta.offset, None, value, (), meta.timestamp)]


class JobThread(threading.Thread):
    """run_stream in the background on the shared SparkSession, counting its batches."""

    def __init__(self, cfg: JobConfig, spark: object) -> None:
        super().__init__(daemon=True)
        self.cfg, self.spark = cfg, spark
        self.stop_event = threading.Event()
        self.batches = 0
        self.error: BaseException | None = None

    def on_batch(self, *_args: object, **_kwargs: object) -> None:
        self.batches += 1

    def run(self) -> None:
        try:
            run_stream(self.cfg, stop=self.stop_event, spark=self.spark, on_batch=self.on_batch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def finish(self) -> None:
        self.stop_event.set()
        self.join(timeout=120)
        assert not self.is_alive(), "the job did not stop"
        assert self.error is None, self.error


def test_partitions_added_while_running_are_read_within_a_few_batches(
        kafka: Broker, spark: object, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "grow", 2)
    first = produce(bootstrap, [(topic, i % 2, None, b"v%d" % i, []) for i in range(100)])
    job = JobThread(job_config(bootstrap, [topic], tmp_path), spark)
    job.start()
    try:
        wait_until(lambda: len(stored(tmp_path / "store")) == 100, 600, "the first records", interval_s=0.5)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_partitions({topic: NewPartitions(total_count=4)})
        admin.close()
        grown = produce(bootstrap, [(topic, 2 + i % 2, None, b"new%d" % i, []) for i in range(100)])
        batches_then = job.batches
        wait_until(lambda: len(stored(tmp_path / "store")) == 200, 180, "the new partitions' records", interval_s=0.5)
        assert job.batches - batches_then <= 4, f"{job.batches - batches_then} batches to reach new partitions"
    finally:
        job.finish()
    assert_exactly_once(str(tmp_path / "store"), first + grown)


def test_a_subscribe_pattern_picks_up_a_topic_created_later(kafka: Broker, spark: object, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic("pat")
    one = new_topic(bootstrap, prefix, 2)
    first = produce(bootstrap, [(one, i % 2, None, b"v%d" % i, []) for i in range(50)])
    job = JobThread(job_config(bootstrap, None, tmp_path, subscribe_pattern=f"{prefix}-.*"), spark)
    job.start()
    try:
        wait_until(lambda: len(stored(tmp_path / "store")) == 50, 600, "the first topic's records", interval_s=0.5)
        two = new_topic(bootstrap, prefix, 3)
        later = produce(bootstrap, [(two, i % 3, None, b"w%d" % i, []) for i in range(60)])
        wait_until(lambda: len(stored(tmp_path / "store")) == 110, 180, "the later topic's records", interval_s=0.5)
    finally:
        job.finish()
    assert_exactly_once(str(tmp_path / "store"), first + later)
