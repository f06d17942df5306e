"""The streaming job as a process under a steady producer: its command line, a producer thread, a
log line to wait for, and the crash-and-restart check the crash tests share."""

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
from kafka.errors import KafkaError

from tests.helpers.brokers.kafka_records import Sent, create_topics, produce, store_by_coordinates, unique_topic
from tests.helpers.waiting import wait_until

# A steady ~120 records/s: always new data for the next batch (a crash point waits for one), and a
# backlog the final run catches up with even on a loaded machine.
PRODUCE_BATCH, PRODUCE_PAUSE_S = 60, 0.5
CRASH_POINTS = ["after-append:1", "after-flush:1", "after-commit:2", "after-append:3", "after-flush:2"]


class Producer(threading.Thread):
    """Keeps producing small batches until stopped; remembers everything it sent. With
    ``outages=True`` a batch the broker did not take (it is restarting) is sent again later: what
    Kafka holds is then read back from it, not taken from ``sent``."""

    def __init__(self, bootstrap: str, topic: str, outages: bool = False) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.outages = bootstrap, topic, outages
        self.sent: list[Sent] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        try:
            while not self.stop_event.is_set():
                batch = [(self.topic, (i + j) % 4, f"k{i + j}".encode(), f"v{i + j}".encode() * 3,
                          [("TAGS", b"t")]) for j in range(PRODUCE_BATCH)]
                try:
                    self.sent += produce(self.bootstrap, batch)
                except KafkaError:
                    if not self.outages:
                        raise
                    time.sleep(1.0)
                    continue
                i += len(batch)
                time.sleep(PRODUCE_PAUSE_S)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def job_command(bootstrap: str, topic: str, tmp: Path, trigger: str = "300ms",
                source: str = "kafka-python") -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(tmp / "store"), "--checkpoint", str(tmp / "checkpoint"), "--segment-size", "256k",
            "--consume-queue-units", "500", "--max-offsets-per-trigger", "1500", "--trigger", trigger,
            "--master", "local[1]", "--shuffle-partitions", "1", "--flush", "sync", "--source", source]


def logged(path: Path, text: str, proc: subprocess.Popen) -> bool:
    """Whether the process logged ``text`` to ``path``; one that exited first fails the wait at once."""
    if text in path.read_text(errors="replace"):
        return True
    assert proc.poll() is None, f"the process exited with {proc.returncode} before logging {text!r}: {path}"
    return False


def crash_and_check(bootstrap_servers: str, tmp_path: Path, kills: int, source: str, first_point: int = 0) -> None:
    """``kills`` runs of the job under a steady producer, every other one dying at a crash point of
    the protocol, the others SIGKILLed at a random moment; then a clean run, verify, and every
    produced record in the store exactly once."""
    topic = unique_topic("crash")
    create_topics(bootstrap_servers, [topic])
    producer = Producer(bootstrap_servers, topic)
    producer.start()
    rng = random.Random(20261121)
    log = tmp_path / "job.log"
    point_kills = 0
    try:
        for kill in range(kills):
            env = dict(os.environ)
            if kill % 2 == 0:
                env["COMMITLOG_CRASH_AT"] = CRASH_POINTS[(first_point + kill // 2) % len(CRASH_POINTS)]
            run_log = tmp_path / f"run-{kill}.log"
            with open(run_log, "wb") as out:
                proc = subprocess.Popen(job_command(bootstrap_servers, topic, tmp_path, source=source), env=env,
                                        stdout=out, stderr=out, start_new_session=True)
            try:
                if "COMMITLOG_CRASH_AT" in env:
                    # dies by its own hand at the named step of the protocol
                    proc.wait(timeout=240)
                    point_kills += proc.returncode == -signal.SIGKILL
                else:
                    # a random moment once batches are flowing: during Spark work, append, flush or commit
                    wait_until(lambda: logged(run_log, "batch ", proc), 240, f"run {kill}'s first batch: {run_log}",
                               interval_s=0.2)
                    time.sleep(rng.uniform(0.0, 3.0))
                    assert proc.poll() is None, f"run {kill} exited by itself with {proc.returncode}: {run_log}"
            except subprocess.TimeoutExpired:
                pytest.fail(f"run {kill} did not reach {env['COMMITLOG_CRASH_AT']}: {run_log}")
            finally:
                try:
                    # the run (its JVM leads a session of its own and exits when the run's end
                    # closes its stdin, ingest/spark_session.py)
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            with open(log, "ab") as all_runs:
                all_runs.write(run_log.read_bytes())
    finally:
        producer.stop_event.set()
        producer.join(timeout=60)
    assert producer.error is None, producer.error
    assert point_kills == (kills + 1) // 2, f"only {point_kills} runs died at their crash point"

    # One last clean run takes in everything produced, then stops by itself.
    with open(log, "ab") as out:
        final = subprocess.run(job_command(bootstrap_servers, topic, tmp_path, trigger="available-now",
                                           source=source),
                               stdout=out, stderr=out, timeout=600, start_new_session=True)
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
