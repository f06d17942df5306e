"""Bringing Spark's checkpoint back to the store (sink.spark_checkpoint), on a checkpoint laid out as
Spark writes it: metadata, offsets/<batch>, commits/<batch>, each with a Hadoop .crc beside it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sink.spark_checkpoint import (
    CheckpointRewindError,
    Rewind,
    check_checkpoint_dir,
    checkpoint_query_id,
    local_checkpoint_path,
    rewind_to_store,
)
from sink.handover.trust import UntrustedPathError
from sink.state import SinkState

pytestmark = pytest.mark.unit

QUERY = "a96acc22-3453-4d5a-a78e-45abae28f47b"


def checkpoint(root: Path, offsets: int, commits: int, query: str = QUERY) -> Path:
    """A checkpoint with offsets/0..offsets-1 and commits/0..commits-1."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": query}))
    for kind, count in (("offsets", offsets), ("commits", commits)):
        for batch in range(count):
            (root / kind / str(batch)).write_text("v1\n{}\n")
            (root / kind / f".{batch}.crc").write_bytes(b"crc")
    return root


def batches(root: Path, kind: str) -> list[str]:
    return sorted((p.name for p in (root / kind).iterdir()), key=lambda n: (n.startswith("."), n))


def test_commits_ahead_of_the_store_are_removed_so_spark_runs_the_first_of_them_again(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=5, commits=4)     # Spark: batch 3 done, batch 4 planned
    rewind = rewind_to_store(str(root), SinkState(batch_id=2, query_id=QUERY))
    assert rewind == Rewind(rerun=3, commits=[3], offsets=[4])
    assert batches(root, "commits") == ["0", "1", "2", ".0.crc", ".1.crc", ".2.crc"]
    assert batches(root, "offsets") == ["0", "1", "2", "3", ".0.crc", ".1.crc", ".2.crc", ".3.crc"]
    assert rewind_to_store(str(root), SinkState(batch_id=2, query_id=QUERY)) is None, "not idempotent"


def test_a_rewind_cut_short_is_finished_by_the_next_one(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=5, commits=5)
    for name in ("4", ".4.crc"):                                 # offsets went first, then the stop came
        (root / "offsets" / name).unlink()
    assert rewind_to_store(f"file:{root}", SinkState(batch_id=1, query_id=QUERY)) == Rewind(2, [2, 3, 4], [3])
    assert batches(root, "offsets")[:4] == ["0", "1", "2", ".0.crc"]


@pytest.mark.parametrize("state", [SinkState(batch_id=3, query_id=QUERY), SinkState(batch_id=5, query_id=QUERY)])
def test_nothing_is_touched_when_the_store_has_every_batch_spark_recorded(tmp_path: Path, state: SinkState) -> None:
    root = checkpoint(tmp_path / "ck", offsets=5, commits=4)
    assert rewind_to_store(str(root), state) is None
    assert len(batches(root, "commits")) == 8 and len(batches(root, "offsets")) == 10


@pytest.mark.parametrize("state", [SinkState(), SinkState(batch_id=7, query_id="an earlier query")])
def test_a_store_with_nothing_of_this_query_has_spark_run_its_first_batch_again(tmp_path: Path,
                                                                               state: SinkState) -> None:
    # The job stopped while the query's first batch was in the writer: Spark had recorded it, the
    # store still holds nothing (or only an earlier query's batches, before a lost checkpoint).
    root = checkpoint(tmp_path / "ck", offsets=2, commits=1)
    assert rewind_to_store(str(root), state) == Rewind(rerun=0, commits=[0], offsets=[1])
    assert batches(root, "commits") == [] and batches(root, "offsets") == ["0", ".0.crc"]


def test_a_new_checkpoint_is_left_alone(tmp_path: Path) -> None:
    assert rewind_to_store(str(tmp_path / "not-yet-created"), SinkState()) is None


def test_a_checkpoint_without_the_batch_to_run_again_is_refused_with_what_to_do(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=5, commits=5)
    (root / "offsets" / "2").unlink()                            # purged by Spark's retention
    with pytest.raises(CheckpointRewindError, match="new, empty --checkpoint"):
        rewind_to_store(str(root), SinkState(batch_id=1, query_id=QUERY))
    assert len(batches(root, "commits")) == 10, "a refused rewind removed something"


def test_only_local_checkpoints_are_read(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=1, commits=1)
    assert local_checkpoint_path(f"file://{root}") == root
    assert local_checkpoint_path("s3a://bucket/ck") is None and local_checkpoint_path(None) is None
    assert checkpoint_query_id(str(root)) == QUERY
    assert checkpoint_query_id(str(tmp_path / "none")) is None


# ------------------------------------------------------------ a checkpoint no one else can change

def test_a_new_checkpoint_is_made_private_before_spark_can_be_beaten_to_it(tmp_path: Path) -> None:
    check_checkpoint_dir(str(tmp_path / "shared" / "ck"))
    assert stat.S_IMODE(os.stat(tmp_path / "shared" / "ck").st_mode) == 0o700
    root = checkpoint(tmp_path / "used", offsets=2, commits=2)
    check_checkpoint_dir(f"file:{root}")          # as Spark leaves it (0755 under the usual umask)
    (tmp_path / "link").symlink_to(root)
    check_checkpoint_dir(str(tmp_path / "link"))  # a link the user names is followed once, to a checked directory
    check_checkpoint_dir("s3a://bucket/ck")       # not on this machine: not ours to check


def test_a_checkpoint_everyone_can_write_is_refused(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=2, commits=2)
    os.chmod(root, 0o1777)
    with pytest.raises(UntrustedPathError, match=r"--checkpoint .*/ck is writable by every user \(mode 1777\)"):
        check_checkpoint_dir(str(root))
    os.chmod(root, 0o755)
    os.chmod(root / "offsets", 0o777)
    with pytest.raises(UntrustedPathError, match="Spark's offsets in it is writable by every user"):
        check_checkpoint_dir(str(root))


def test_a_link_among_sparks_entries_is_refused(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "ck", offsets=2, commits=2)
    (tmp_path / "theirs").mkdir()
    os.rename(root / "offsets", tmp_path / "theirs" / "offsets")
    (root / "offsets").symlink_to(tmp_path / "theirs" / "offsets")
    with pytest.raises(UntrustedPathError, match="Spark's offsets in it is a symbolic link"):
        check_checkpoint_dir(str(root))


def test_run_refuses_a_shared_checkpoint_in_one_line_before_spark_starts(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    os.chmod(tmp_path / "ck", 0o777)
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", "127.0.0.1:9",
                           "--subscribe", "t", "--store", str(tmp_path / "store"), "--checkpoint", str(tmp_path / "ck"),
                           "--skip-preflight"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--checkpoint" in done.stderr and "writable by every user" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
