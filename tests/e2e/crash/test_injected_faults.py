"""Faults injected into the writer's real system calls (``strace -e inject``), end to end: the
command says one line naming what failed and exits 2, the batch in flight is not committed, the
store is left to be recovered from the disk (``abort`` stays), and the next run stores every record
exactly once."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.brokers.kafka_records import store_by_coordinates
from tests.helpers.programs import require_program

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.9)]   # replay 0.7, run 1.2

ROOT = Path(__file__).resolve().parents[3]


def export(directory: Path, offsets: range) -> None:
    """orders-0.jsonl, offsets appended (a replay from files, so no broker is needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"key": base64.b64encode(b"k%d" % o).decode(), "value": base64.b64encode(b"v%d" % o).decode(),
             "topic": "orders", "partition": 0, "offset": o, "timestamp": "2026-11-22T10:00:00.000Z",
             "timestampType": 0, "headers": []} for o in offsets]
    with open(directory / "orders-0.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def replay(store: Path, files: Path, *wrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrap, sys.executable, "-m", "ingest.cli", "replay", "--from-files", str(files),
                           "--format", "jsonl", "--store", str(store), "--segment-size", "1m",
                           "--consume-queue-units", "2000", "--message-index", "false"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)


@pytest.mark.timeout(600)
def test_replay_whose_consume_queue_fsync_fails_says_one_line_and_never_retries_the_sync(tmp_path: Path) -> None:
    require_program("strace", "to make fsync fail")
    store, files = tmp_path / "store", tmp_path / "export"
    export(files, range(100))
    first = replay(store, files)
    assert first.returncode == 0, first.stderr[-3000:]
    queue_file = store / "consumequeue" / "orders" / "0" / "00000000000000000000"
    export(files, range(100, 300))
    # every fsync of the consume-queue file fails: the batch's flush, and any retry at close
    inject = ["strace", "-f", "-qq", "-o", str(tmp_path / "strace.log"), "-P", str(queue_file),
              "-e", "trace=fsync", "-e", "inject=fsync:error=EIO:when=1+"]
    failed = replay(store, files, *inject)
    said = failed.stdout + failed.stderr
    assert failed.returncode == 2, said[-5000:]
    assert "Traceback" not in said, said[-5000:]
    assert [ln for ln in said.splitlines() if ln.startswith("commitlog replay: error: ")] == [
        f"commitlog replay: error: flushing the consume queues or the index of {store} failed: fsync on "
        f"{queue_file} in flush(): Input/output error; the store refuses writes until reopened"]
    fsyncs = [ln for ln in (tmp_path / "strace.log").read_text().splitlines() if "fsync(" in ln]
    assert len(fsyncs) == 1 and "EIO (Input/output error) (INJECTED)" in fsyncs[0], fsyncs
    assert (store / "abort").exists()           # the next open recovers from the disk, not from memory
    assert len(store_by_coordinates(str(store))) == 100

    again = replay(store, files)
    assert again.returncode == 0, again.stderr[-3000:]
    found = store_by_coordinates(str(store))
    assert sorted(found) == [("orders", 0, o) for o in range(300)] and all(len(v) == 1 for v in found.values())


@pytest.mark.timeout(900)
def test_run_whose_consume_queue_fsync_fails_says_one_line_and_never_retries_the_sync(
        bootstrap_servers: str, tmp_path: Path) -> None:
    from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

    require_program("strace", "to make fsync fail")
    topic = unique_topic("fsync")
    create_topics(bootstrap_servers, [topic], partitions=1)
    sent = produce(bootstrap_servers, [(topic, 0, b"k%d" % i, b"v%d" % i, []) for i in range(100)])
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap_servers, "--subscribe", topic,
           "--store", str(store), "--checkpoint", str(tmp_path / "checkpoint"), "--segment-size", "1m",
           "--consume-queue-units", "2000", "--message-index", "false", "--trigger", "available-now",
           "--master", "local[1]", "--shuffle-partitions", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    (queue_file,) = (store / "consumequeue" / topic).glob("*/00000000000000000000")
    sent += produce(bootstrap_servers, [(topic, 0, b"k%d" % i, b"v%d" % i, []) for i in range(100, 300)])
    inject = ["strace", "-f", "-qq", "-o", str(tmp_path / "strace.log"), "-P", str(queue_file),
              "-e", "trace=fsync", "-e", "inject=fsync:error=EIO:when=1+"]
    failed = subprocess.run(inject + cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    said = failed.stdout + failed.stderr
    assert failed.returncode == 2, said[-5000:]
    assert "Traceback" not in said, said[-5000:]
    errors = [ln for ln in said.splitlines() if ln.startswith("commitlog run: error: ")]
    assert len(errors) == 1 and errors[0].endswith(
        f"flushing the consume queues or the index of {store} failed: fsync on {queue_file} in flush(): "
        f"Input/output error; the store refuses writes until reopened"), said[-5000:]
    fsyncs = [ln for ln in (tmp_path / "strace.log").read_text().splitlines() if "fsync(" in ln]
    assert len(fsyncs) == 1 and "(INJECTED)" in fsyncs[0], fsyncs
    assert (store / "abort").exists()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    found = store_by_coordinates(str(store))
    assert sorted(found) == sorted((s.topic, s.partition, s.offset) for s in sent)
    assert all(len(v) == 1 for v in found.values())
