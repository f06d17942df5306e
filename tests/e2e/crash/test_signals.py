"""SIGINT and SIGTERM, sent to `commitlog run` / `commitlog replay` or to their whole process group
(what a terminal's Ctrl-C, `timeout`, systemd and Kubernetes do), stop after the current batch,
close the store cleanly and exit 0 without a traceback; a second signal stops at once; nothing
committed is lost or written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic
from tests.helpers.job_processes import Producer, job_command, logged
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.crash, pytest.mark.integration, pytest.mark.slow(minutes=3.6)]


def signalled(cmd: list[str], out: Path, *signals: tuple[int, bool], timeout_s: float = 120) -> tuple[int, str]:
    """Start ``cmd`` as the leader of its own group, wait for its first batch, send each (signal,
    to the group?) 50 ms apart; its exit code and its log. Whatever is left running is killed."""
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, start_new_session=True)
    try:
        wait_until(lambda: logged(out, " rec/s", proc), 240, "the first batch's line", interval_s=0.2,
                   error=lambda m: AssertionError(f"{m}\n{out.read_text(errors='replace')[-3000:]}"))
        for i, (sig, to_group) in enumerate(signals):
            if i:
                time.sleep(0.05)
            send(proc, sig, to_group)
        code = proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, out.read_text(errors="replace")


def send(proc: subprocess.Popen, sig: int, to_group: bool) -> None:
    if to_group:
        os.killpg(proc.pid, sig)       # the test started it as the leader of its own group
    else:
        proc.send_signal(sig)


@pytest.mark.timeout(900)
def test_run_stops_cleanly_on_each_signal_sent_either_way(bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("signals")
    create_topics(bootstrap_servers, [topic])
    producer = Producer(bootstrap_servers, topic)
    producer.start()
    try:
        for i, (sig, to_group) in enumerate([(signal.SIGINT, True), (signal.SIGTERM, True),
                                             (signal.SIGINT, False), (signal.SIGTERM, False)]):
            code, text = signalled(job_command(bootstrap_servers, topic, tmp_path), tmp_path / f"run-{i}.log",
                                   (sig, to_group))
            what = f"{signal.Signals(sig).name} to the {'group' if to_group else 'process'}"
            assert code == 0, f"{what}: exit {code}\n{text[-3000:]}"
            assert "Traceback" not in text and "Exception" not in text, f"{what}:\n{text[-5000:]}"
            assert "stopping after the current batch" in text and "closed cleanly" in text, text[-2000:]
    finally:
        producer.stop_event.set()
        producer.join(timeout=60)
    assert producer.error is None, producer.error
    final = subprocess.run(job_command(bootstrap_servers, topic, tmp_path, trigger="available-now"),
                           capture_output=True, text=True, timeout=600, start_new_session=True)
    assert final.returncode == 0, final.stderr[-3000:]
    found = store_by_coordinates(str(tmp_path / "store"))
    assert sorted(found) == sorted((s.topic, s.partition, s.offset) for s in producer.sent)
    assert all(len(v) == 1 for v in found.values())


@pytest.mark.timeout(600)
def test_a_second_signal_stops_at_once_and_loses_nothing_committed(bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("signals2")
    create_topics(bootstrap_servers, [topic])
    sent = produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), b"v" * 50, []) for i in range(3000)])
    cmd = job_command(bootstrap_servers, topic, tmp_path)
    cmd[cmd.index("--max-offsets-per-trigger") + 1] = "200"
    code, text = signalled(cmd, tmp_path / "run.log", (signal.SIGTERM, True), (signal.SIGTERM, True), timeout_s=60)
    assert code in (0, 128 + signal.SIGTERM), text[-3000:]
    assert "Traceback" not in text, text[-5000:]
    final = subprocess.run(job_command(bootstrap_servers, topic, tmp_path, trigger="available-now"),
                           capture_output=True, text=True, timeout=600, start_new_session=True)
    assert final.returncode == 0, final.stderr[-3000:]
    found = store_by_coordinates(str(tmp_path / "store"))
    assert sorted(found) == sorted((s.topic, s.partition, s.offset) for s in sent)
    assert all(len(v) == 1 for v in found.values())


@pytest.mark.timeout(600)
def test_replay_stops_cleanly_on_each_signal_and_resumes(bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("signals-replay")
    create_topics(bootstrap_servers, [topic])
    sent = produce(bootstrap_servers, [(topic, i % 2, None, b"r" * 100, []) for i in range(20_000)])
    cmd = [sys.executable, "-m", "ingest.cli", "replay", "--bootstrap-servers", bootstrap_servers, "--topics", topic,
           "--store", str(tmp_path / "store"), "--segment-size", "1m", "--max-offsets-per-trigger", "500",
           "--master", "local[1]", "--shuffle-partitions", "1"]
    for i, (sig, to_group) in enumerate([(signal.SIGINT, True), (signal.SIGTERM, False)]):
        code, text = signalled(cmd, tmp_path / f"replay-{i}.log", (sig, to_group))
        assert "Traceback" not in text, text[-5000:]
        assert code in (0, 3), f"exit {code}\n{text[-3000:]}"   # 3: stopped before the end, resumable
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    found = store_by_coordinates(str(tmp_path / "store"))
    assert len(found) == len(sent) and all(len(v) == 1 for v in found.values())
