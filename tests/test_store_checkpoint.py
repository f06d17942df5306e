"""The checkpoint file (FORMAT §13), commitpoint.json, and the lock file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import CommitPoint, CommitPointError
from store.log.checkpoint import StoreCheckpoint, read_checkpoint, write_checkpoint
from store.log.commit_point import read_commit_point, write_commit_point

pytestmark = pytest.mark.unit


def test_the_checkpoint_reads_rocketmqs_file(golden_dir: Path) -> None:
    want = json.loads((golden_dir / "store_multiseg" / "manifest.json").read_text())["checkpoint"]
    cp = read_checkpoint(golden_dir / "store_multiseg" / "checkpoint")
    assert cp == StoreCheckpoint(want["physicMsgTimestamp@0"], want["logicsMsgTimestamp@8"],
                                 want["indexMsgTimestamp@16"], want["masterFlushedOffset@24"],
                                 want["confirmPhyOffset@32"])


def test_the_checkpoint_is_written_as_rocketmq_lays_it_out(tmp_path: Path, golden_dir: Path) -> None:
    golden = golden_dir / "store_multiseg" / "checkpoint"
    write_checkpoint(tmp_path / "checkpoint", read_checkpoint(golden))
    assert (tmp_path / "checkpoint").read_bytes() == golden.read_bytes()
    assert read_checkpoint(tmp_path / "missing") is None


def test_the_commit_point_round_trips_and_is_replaced_atomically(tmp_path: Path) -> None:
    assert read_commit_point(tmp_path) is None
    cp = CommitPoint(4242, {("T", 0): 7, ("%RETRY%g", 3): 1}, {"batchId": 9, "kafka": {"t-0": 100}}, 123, 4000)
    write_commit_point(tmp_path, cp)
    assert read_commit_point(tmp_path) == cp
    assert [p.name for p in tmp_path.iterdir()] == ["commitpoint.json"]     # no tmp left behind


def test_a_damaged_commit_point_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "commitpoint.json").write_text('{"offset": ')
    with pytest.raises(CommitPointError, match="commitpoint.json.*RocketMQ store"):
        read_commit_point(tmp_path)
