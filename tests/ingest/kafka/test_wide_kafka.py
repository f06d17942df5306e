"""`commitlog run` over 2,000 partitions (100 topics x 20) of one Apache Kafka node (issue 64): every
record stored once, the store's disk in proportion to what it holds, and a disk that fills up during
the run still ends in one line.

The store lives on a small tmpfs: a store that reserved a whole consume-queue file per queue (6 MB at
RocketMQ's 300,000 units, 12 GB over these queues) cannot be made there at all, so the disk rule is
checked by the run itself as well as by ``du``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from ingest.devtools.broker import Broker
from tests.helpers.brokers.apache_kafka import module_kafka
from tests.helpers.brokers.kafka_records import Sent, produce, store_by_coordinates, unique_topic
from store import read_commit_point
from store.usage import disk_bytes
from tests.helpers.faults.small_fs import fill, small_filesystem

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2.5)]

TOPICS, PARTITIONS, RECORDS = 100, 20, 20_000
SEGMENT = 8 << 20
# Issue 64, item 1: a store takes its data plus at most the commit-log segment (and the next one,
# made ahead), a fixed reserve per written queue and the index in use. The reserve per queue is
# bounded here at 16 KiB (4 pages; a queue of 10 units holds 200 bytes of them).
QUEUE_RESERVE = 16 << 10
SMALL_FILES = 1 << 20          # config/, checkpoint, commitpoint.json, lock, dead letters


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_kafka(tmp_path_factory, __name__)


@pytest.fixture(scope="module")
def prefix() -> str:
    """The topics' common prefix: the job subscribes to ``<prefix>-.*``."""
    return unique_topic("wide")


@pytest.fixture(scope="module")
def sent(kafka: Broker, prefix: str) -> list[Sent]:
    """RECORDS records of 100 bytes, round-robin over the 2,000 partitions (10 each)."""
    names = [f"{prefix}-{i:03d}" for i in range(TOPICS)]
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    try:
        for i in range(0, TOPICS, 50):
            admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names[i:i + 50]], timeout_ms=120_000)
    finally:
        admin.close()
    width = TOPICS * PARTITIONS
    return produce(kafka.bootstrap_servers, [(names[(i % width) // PARTITIONS], i % PARTITIONS, b"k%d" % i,
                                              os.urandom(50).hex().encode(), []) for i in range(RECORDS)])


def run_command(bootstrap: str, prefix: str, store: Path, checkpoint: Path) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap,
            "--subscribe-pattern", f"{prefix}-.*", "--starting-offsets", "earliest", "--trigger", "available-now",
            "--store", str(store), "--checkpoint", str(checkpoint), "--segment-size", "8m",
            "--max-hash-slot-num", "5000", "--max-index-num", "20000", "--max-offsets-per-trigger", "10000",
            "--master", "local[1]", "--shuffle-partitions", "1"]


def stored_once_per_partition(store: Path, sent: list[Sent]) -> None:
    found = store_by_coordinates(str(store))
    assert all(len(v) == 1 for v in found.values()), [k for k, v in found.items() if len(v) > 1][:5]
    assert set(found) == {(s.topic, s.partition, s.offset) for s in sent}
    held = Counter((t, p) for t, p, _ in found)
    produced = Counter((s.topic, s.partition) for s in sent)
    assert held == produced and len(held) == TOPICS * PARTITIONS
    verify = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(store)],
                            capture_output=True, text=True, timeout=600)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]


def assert_disk_in_proportion(store: Path) -> None:
    index = disk_bytes(store / "index") if (store / "index").exists() else 0
    data = read_commit_point(store).offset          # the commit log's bytes of records
    bound = data + 2 * SEGMENT + TOPICS * PARTITIONS * QUEUE_RESERVE + index + SMALL_FILES
    used = disk_bytes(store)
    assert used <= bound, (f"the store takes {used} bytes on disk for {TOPICS * PARTITIONS} queues of "
                           f"{PARTITIONS // 2} units; the bound is {bound} (commit log {disk_bytes(store / 'commitlog')}, "
                           f"consume queues {disk_bytes(store / 'consumequeue')}, index {index})")


# One test, not two: each run over 2,000 partitions is a minute or more of the suite, and the run
# that resumes after the full disk is as good a witness of the disk rule as a first clean run.
@pytest.mark.timeout(1200)
def test_two_thousand_partitions_through_a_full_disk_are_stored_once_each_on_a_disk_in_proportion(
        kafka: Broker, prefix: str, sent: list[Sent], tmp_path: Path) -> None:
    env = dict(os.environ, COMMITLOG_ALLOW_EPHEMERAL_STORE="1")
    with small_filesystem(tmp_path / "fs", "64m") as fs:
        store, filler = fs / "store", fs / "filler"
        cmd = run_command(kafka.bootstrap_servers, prefix, store, tmp_path / "checkpoint")
        # room for the commit-log segment and the one made ahead, and less than the queues take
        fill(filler, leave=2 * SEGMENT + 2 * QUEUE_RESERVE * 100)
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, start_new_session=True)
        out = first.stdout + first.stderr
        assert first.returncode == 2, f"exit {first.returncode}\n{out[-5000:]}"
        errors = [ln for ln in out.splitlines() if ln.startswith("commitlog run: error: ")]
        assert len(errors) == 1 and "No space left on device" in errors[0], out[-5000:]
        assert "Traceback" not in out and "\tat " not in out, out[-5000:]
        assert not (store / "abort").exists(), out[-3000:]

        filler.unlink()
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, start_new_session=True)
        assert again.returncode == 0, (again.stdout + again.stderr)[-5000:]
        stored_once_per_partition(store, sent)
        assert_disk_in_proportion(store)
