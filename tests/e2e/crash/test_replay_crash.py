"""``commitlog replay`` killed with SIGKILL again and again (at protocol points and at random moments),
started again each time with the same arguments: at the end every record is in the store exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from store.log.commit_point import read_commit_point
from tests.helpers.replays import kafka_coordinates, new_topic, produce, store_messages
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.crash, pytest.mark.integration, pytest.mark.slow(minutes=1.6)]

# enough batches that a kill up to 1.5 s after a commit still lands inside the replay: a batch of
# 1,000 takes ~0.1 s here, so each random kill uses up at most ~16 of the 60
RECORDS, PARTITIONS, BATCH = 60_000, 3, 1_000
# (crash point inside the sink, or None: an outside SIGKILL at a random moment after a commit)
KILLS = [None, "after-flush:2", None, "after-append:1"]


def replay_command(bootstrap: str, topic: str, store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "replay", "--bootstrap-servers", bootstrap, "--topics", topic,
            "--store", str(store), "--master", "local[2]", "--shuffle-partitions", "2", "--segment-size", "1m",
            "--consume-queue-units", "10000", "--max-offsets-per-trigger", str(BATCH), "--flush", "sync",
            "--progress", "log", *extra]


def committed_records(store: Path) -> int:
    point = read_commit_point(store) if (store / "commitpoint.json").exists() else None
    return int(point.metadata.get("sink", {}).get("records", 0)) if point else 0


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # the driver, its JVM and the Python workers
    except ProcessLookupError:
        pass
    proc.wait()


def test_replay_killed_repeatedly_ends_with_every_record_exactly_once(bootstrap_servers: str,
                                                                       tmp_path: Path) -> None:
    topic = new_topic(bootstrap_servers, PARTITIONS, "replay-crash")
    produce(bootstrap_servers, topic, RECORDS, PARTITIONS)
    store = tmp_path / "store"
    rng = random.Random(20261121)
    log = open(tmp_path / "replay.log", "ab")
    cmd = replay_command(bootstrap_servers, topic, store, "--no-verify")
    progress = [0]
    for crash_at in KILLS:
        env = dict(os.environ)
        if crash_at:
            env["COMMITLOG_CRASH_AT"] = crash_at
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            if crash_at:
                proc.wait(timeout=240)
                assert proc.returncode == -signal.SIGKILL, f"run did not die at {crash_at}; see {tmp_path}/replay.log"
            else:
                wait_until(lambda: committed_records(store) > progress[-1] or proc.poll() is not None, 240,
                           f"a commit; see {tmp_path}/replay.log")
                time.sleep(rng.uniform(0.0, 1.5))   # anywhere in the next batch(es)
                assert proc.poll() is None, f"the replay finished before it could be killed; see {tmp_path}/replay.log"
        finally:
            kill_group(proc)
        progress.append(committed_records(store))
    assert progress[-1] < RECORDS, f"the kills came too late to interrupt anything: {progress}"
    assert progress == sorted(progress) and progress[-1] > 0, progress

    final = subprocess.run(replay_command(bootstrap_servers, topic, store), stdout=log, stderr=log,
                           timeout=300, start_new_session=True)
    assert final.returncode == 0, f"final run failed ({final.returncode}); see {tmp_path}/replay.log"
    text = (tmp_path / "replay.log").read_text(errors="replace")
    assert "already in the store" in text and "verify: OK" in text

    coords = kafka_coordinates(store_messages(store))
    dupes = [c for c, n in Counter(coords).items() if n > 1]
    assert not dupes, f"{len(dupes)} records twice, e.g. {dupes[:5]}"
    assert sorted(coords) == sorted((topic, i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS))
    assert not list((store / "replay").glob("plan-*.json")), "a completed replay leaves no plan behind"
