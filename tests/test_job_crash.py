"""The streaming job killed with SIGKILL at random moments while a producer keeps writing: after every
restart, and at the end, each produced record is in the store exactly once and verify is clean."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.kafka_helpers import Sent, create_topics, produce, store_by_coordinates, unique_topic

pytestmark = [pytest.mark.crash, pytest.mark.integration]

KILLS = 20
CRASH_POINTS = ["after-append:1", "after-flush:1", "after-commit:2", "after-append:3", "after-flush:2"]


class Producer(threading.Thread):
    """Keeps producing small batches until stopped; remembers everything it sent."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.sent: list[Sent] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        try:
            while not self.stop_event.is_set():
                batch = [(self.topic, (i + j) % 4, f"k{i + j}".encode(), f"v{i + j}".encode() * 3,
                          [("TAGS", b"t")]) for j in range(150)]
                self.sent += produce(self.bootstrap, batch)
                i += len(batch)
                time.sleep(0.15)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def job_command(bootstrap: str, topic: str, tmp: Path, trigger: str = "300ms") -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(tmp / "store"), "--checkpoint", str(tmp / "checkpoint"), "--segment-size", "256k",
            "--consume-queue-units", "500", "--max-offsets-per-trigger", "400", "--trigger", trigger,
            "--master", "local[1]", "--shuffle-partitions", "1", "--flush", "sync"]


def test_job_survives_sigkill_at_random_moments(bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("crash")
    create_topics(bootstrap_servers, [topic])
    producer = Producer(bootstrap_servers, topic)
    producer.start()
    rng = random.Random(20261121)
    log = open(tmp_path / "job.log", "ab")
    try:
        for kill in range(KILLS):
            env = dict(os.environ)
            if kill % 2 == 0:
                env["COMMITLOG_CRASH_AT"] = CRASH_POINTS[(kill // 2) % len(CRASH_POINTS)]
            proc = subprocess.Popen(job_command(bootstrap_servers, topic, tmp_path), env=env,
                                    stdout=log, stderr=log, start_new_session=True)
            try:
                proc.wait(timeout=rng.uniform(6.0, 12.0))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            else:
                if "COMMITLOG_CRASH_AT" not in env:
                    pytest.fail(f"run {kill} exited by itself with {proc.returncode}; see {tmp_path / 'job.log'}")
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # the JVM and Python workers of that run too
            except ProcessLookupError:
                pass
    finally:
        producer.stop_event.set()
        producer.join(timeout=60)
    assert producer.error is None, producer.error

    # One last clean run takes in everything produced, then stops by itself.
    final = subprocess.run(job_command(bootstrap_servers, topic, tmp_path, trigger="available-now"),
                           stdout=log, stderr=log, timeout=300, start_new_session=True)
    assert final.returncode == 0, f"final run failed; see {tmp_path / 'job.log'}"
    verify = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(tmp_path / "store")],
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    found = store_by_coordinates(str(tmp_path / "store"))
    dupes = [k for k, v in found.items() if len(v) > 1]
    missing = [(s.topic, s.partition, s.offset) for s in producer.sent
               if (s.topic, s.partition, s.offset) not in found]
    assert not dupes, f"{len(dupes)} duplicated, e.g. {dupes[:5]}"
    assert not missing, f"{len(missing)} of {len(producer.sent)} missing, e.g. {missing[:5]}"
    assert len(found) == len(producer.sent)
