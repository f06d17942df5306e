"""Power cuts of the job's own files (issue 56, part 2; the store's files are tests/e2e/crash/test_crash_states.py):
Spark's checkpoint and the spool are never fsynced, so at the store's last sync point a power cut may
leave any entry Spark wrote since (``offsets/N``, ``commits/N``) empty, cut short, absent, or still
under its temporary name (its rename undone), and the spool directory with a task's file empty, cut
short or whole, or no directory at all. Each sampled state (seeded) is recovered by running the job
again: it completes, every record is stored exactly once, ``verify`` is clean, no spool file is left.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sink.handover.spool import store_tag
from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.crash, pytest.mark.slow(minutes=2)]

ROOT = Path(__file__).resolve().parents[3]
SEED = 56
STATES = 6
FATES = ("whole", "empty", "torn", "absent", "rename undone")
SPOOL_FATES = ("no directory", "empty file", "torn file", "whole file")


def run_cmd(bootstrap: str, topic: str, where: Path) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(where / "store"), "--checkpoint", str(where / "checkpoint"), "--trigger", "available-now",
            "--master", "local[1]", "--shuffle-partitions", "1", "--max-offsets-per-trigger", "100",
            "--segment-size", "64k"]


def cut(path: Path, fate: str, rng: random.Random) -> None:
    """What a power cut left of ``path``, a file written and renamed but never synced."""
    data = path.read_bytes()
    if fate == "empty":
        path.write_bytes(b"")
    elif fate == "torn":
        path.write_bytes(data[:rng.randrange(1, len(data))])
    elif fate == "absent":
        path.unlink()
    elif fate == "rename undone":
        path.rename(path.with_name(f".{path.name}.{uuid.uuid4()}.tmp"))


def power_cut(base: Path, where: Path, rng: random.Random) -> str:
    """A copy of ``base`` as a power cut after the store's last sync could leave it; what was done."""
    shutil.copytree(base, where)
    checkpoint = where / "checkpoint"
    last = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    notes = []
    for rel in (f"offsets/{last}", f"commits/{last}", f"commits/{last - 1}"):
        fate = rng.choice(FATES)
        cut(checkpoint / rel, fate, rng)
        notes.append(f"{rel} {fate}")
    spool = where / "store" / "spool"
    fate = rng.choice(SPOOL_FATES)
    if fate != "no directory":
        spool.mkdir(mode=0o700)
        data = (ROOT / "README.md").read_bytes()[:20000]
        name = spool / f"{store_tag(str(where / 'store'))}.{uuid.uuid4().hex}.arrow"
        name.write_bytes(b"" if fate == "empty file" else data[:rng.randrange(1, len(data))] if fate == "torn file"
                         else data)
        name.chmod(0o600)
    notes.append(f"spool {fate}")
    return "; ".join(notes)


@pytest.mark.timeout(900)
def test_the_job_resumes_exactly_once_from_every_sampled_power_cut_of_its_checkpoint_and_spool(
        bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("power-cut")
    create_topics(bootstrap_servers, [topic], partitions=1)
    sent = produce(bootstrap_servers, [(topic, 0, b"k%d" % i, b"v%d" % i * 30, []) for i in range(300)])
    base = tmp_path / "base"
    first = subprocess.run(run_cmd(bootstrap_servers, topic, base), capture_output=True, text=True, timeout=600,
                           cwd=ROOT, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len([p for p in (base / "checkpoint" / "commits").iterdir() if p.name.isdigit()]) >= 3
    sent += produce(bootstrap_servers, [(topic, 0, b"k%d" % i, b"v%d" % i * 30, []) for i in range(300, 400)])
    want = sorted((s.topic, s.partition, s.offset) for s in sent)
    rng = random.Random(SEED)
    problems, seen = [], []
    for n in range(STATES):
        where = tmp_path / f"state-{n}"
        how = power_cut(base, where, rng)
        again = subprocess.run(run_cmd(bootstrap_servers, topic, where), capture_output=True, text=True,
                               timeout=600, cwd=ROOT, check=False)
        said = again.stdout + again.stderr
        found = store_by_coordinates(str(where / "store"))
        checked = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(where / "store")],
                                 capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        left = list((where / "store" / "spool").glob("*.arrow")) if (where / "store" / "spool").exists() else []
        wrong = [w for w, bad in (
            (f"exit {again.returncode}: {said.strip()[-800:]}", again.returncode != 0 or "Traceback" in said),
            (f"{len(found)} records, {len(want)} expected", sorted(found) != want),
            ("a record stored twice", any(len(v) != 1 for v in found.values())),
            (f"verify: {checked.stdout[-500:]}", checked.returncode != 0),
            (f"spool files left: {left}", bool(left))) if bad]
        seen.append(f"state {n}: {how}: {'; '.join(wrong) or 'resumed exactly once'}")
        if wrong:
            problems.append(seen[-1])
        else:
            shutil.rmtree(where)
    print(f"\n{STATES} power-cut states of the job's checkpoint and spool:\n" + "\n".join(seen))
    assert not problems, "\n".join(problems)
