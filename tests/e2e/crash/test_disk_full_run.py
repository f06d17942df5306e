"""`commitlog run` on a disk that fills up under it, with the index on and off: one line naming the
file that found no room, exit 2, the store closed cleanly at its last commit; once the space is back
the next run takes in the rest, every record exactly once. So too when a read task's spool file is the
first write to meet the full disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic
from tests.helpers.faults.small_fs import fill, small_filesystem

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3.6)]   # 1.7 + the spool case's 1.9

RECORDS = 4000


def run_command(bootstrap: str, topic: str, store: Path, checkpoint: Path, index: bool) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(store), "--checkpoint", str(checkpoint), "--segment-size", "256k",
            "--consume-queue-units", "2000", "--max-hash-slot-num", "500", "--max-index-num", "2000",
            "--message-index", "true" if index else "false", "--max-offsets-per-trigger", "500",
            "--trigger", "available-now", "--master", "local[1]", "--shuffle-partitions", "1"]



def resumes_exactly_once(cmd: list[str], env: dict, store: Path, sent: list) -> None:
    """With room on the disk again, the same command stores every record once and verify is clean."""
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, start_new_session=True)
    assert again.returncode == 0, (again.stdout + again.stderr)[-5000:]
    found = store_by_coordinates(str(store))
    assert sorted(found) == sorted((s.topic, s.partition, s.offset) for s in sent)
    assert all(len(v) == 1 for v in found.values())
    verify = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(store)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr

@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", [True, False], ids=["index-on", "index-off"])
def test_run_on_a_disk_that_fills_up_says_so_in_one_line_and_the_next_run_resumes_exactly_once(
        bootstrap_servers: str, tmp_path: Path, index: bool) -> None:
    topic = unique_topic("full")
    create_topics(bootstrap_servers, [topic])
    sent = produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), os.urandom(300).hex().encode(), [])
                                       for i in range(RECORDS)])
    env = dict(os.environ, COMMITLOG_ALLOW_EPHEMERAL_STORE="1")
    with small_filesystem(tmp_path / "fs", "8m") as fs:
        store, filler = fs / "store", fs / "filler"
        cmd = run_command(bootstrap_servers, topic, store, tmp_path / "checkpoint", index)
        fill(filler, leave=2 << 20)        # room for about half of what the topic holds
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, start_new_session=True)
        out = first.stdout + first.stderr
        assert first.returncode == 2, f"exit {first.returncode}\n{out[-5000:]}"
        said = [ln for ln in out.splitlines() if "error" in ln.lower() or "No space left" in ln]
        # the job's one line to the user, and the sink's one log record of the batch it did not commit
        errors = [ln for ln in said if ln.startswith("commitlog run: error: ")]
        logged = [ln for ln in said if " ERROR commitlog.batch: batch " in ln and "not committed" in ln]
        assert len(errors) == 1 and len(logged) == 1 and len(said) == 2, out[-5000:]
        assert "No space left on device" in errors[0] and "cannot reserve" in errors[0], errors
        assert "Traceback" not in out and "\tat " not in out and "Exception" not in out, out[-5000:]
        assert "closed cleanly" in out and not (store / "abort").exists(), out[-3000:]
        held = store_by_coordinates(str(store))
        assert 0 < len(held) < RECORDS and all(len(v) == 1 for v in held.values())

        filler.unlink()
        resumes_exactly_once(cmd, env, store, sent)


@pytest.mark.timeout(900)
def test_run_whose_spool_meets_the_full_disk_first_says_so_in_one_line_naming_the_file_and_the_call(
        bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("spoolfull")
    create_topics(bootstrap_servers, [topic])
    value = lambda i: os.urandom(300).hex().encode()  # noqa: E731
    sent = produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), value(i), []) for i in range(500)])
    env = dict(os.environ, COMMITLOG_ALLOW_EPHEMERAL_STORE="1")
    with small_filesystem(tmp_path / "fs", "8m") as fs:
        store, filler = fs / "store", fs / "filler"
        # Spark's checkpoint elsewhere, and room left for the lock file's pid: the store's files are
        # made (the next segment ahead too), so the first write of the next run that needs more is a
        # read task's spool file
        cmd = run_command(bootstrap_servers, topic, store, tmp_path / "checkpoint", index=True)
        first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, start_new_session=True)
        assert first.returncode == 0, (first.stdout + first.stderr)[-5000:]
        sent += produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), value(i), []) for i in range(500, 1000)])
        fill(filler, leave=64 << 10)
        full = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, start_new_session=True)
        out = full.stdout + full.stderr
        assert full.returncode == 2, f"exit {full.returncode}\n{out[-5000:]}"
        errors = [ln for ln in out.splitlines() if ln.startswith("commitlog run: error: ")]
        assert len(errors) == 1, out[-5000:]
        assert f"spool file {store / 'spool'}/" in errors[0] and ": write() failed on " in errors[0], out[-5000:]
        assert "[Errno 28] No space left on device: the batch is not written" in errors[0], errors
        assert "Traceback" not in out and "\tat " not in out and "Exception" not in out, out[-5000:]
        assert "closed cleanly" in out and not (store / "abort").exists(), out[-3000:]

        filler.unlink()
        resumes_exactly_once(cmd, env, store, sent)
