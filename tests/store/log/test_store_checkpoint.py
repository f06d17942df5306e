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


def test_index_msg_timestamp_covers_every_index_item_even_before_the_commit(tmp_path: Path) -> None:
    # A broker opening the store after a crash destroys each index file that ends past indexMsgTimestamp
    # (IndexService.load): it must cover the items of appends the writer had not committed when killed.
    from store import MessageStore, StoreConfig
    from store.format import Message
    from store.index.file import IndexFile
    from store.index.service import IndexConfig

    cfg = StoreConfig(segment_size=1 << 20, index=IndexConfig(True, 64, 50))
    store = MessageStore.open(tmp_path, cfg)

    def index_end() -> int:
        last = sorted((tmp_path / "index").iterdir())[-1]
        f = IndexFile(last, 64, 50, read_only=True)
        try:
            return f.read_header().end_timestamp
        finally:
            f.close()

    try:
        for batch in range(4):          # 30 keys a batch: the files roll over
            store.append([Message("T", b"x", properties=f"UNIQ_KEY\x01U{batch}-{i}\x02KEYS\x01k{i}\x02")
                          for i in range(15)])
            store.settle_index()        # the keys go in behind the append; the checkpoint was raised first
            on_disk = read_checkpoint(tmp_path / "checkpoint")
            assert on_disk is not None and on_disk.index_msg_timestamp >= index_end() > 0
            if batch % 2:
                store.commit()
    finally:
        store.abandon()                 # as a killed writer leaves it
    assert read_checkpoint(tmp_path / "checkpoint").index_msg_timestamp >= index_end()


def test_a_checkpoint_cut_to_nothing_is_a_verify_problem_and_the_next_open_says_it_rebuilt_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from ingest.cli import main
    from store import Message, MessageStore, StoreConfig

    def verify() -> tuple[int, str]:
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            rc = main(["verify", str(root)])
        return rc, out.getvalue()

    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024)) as s:
        s.append([Message("T", b"x" * 100) for _ in range(10)])
        end = s.commit().offset
    (root / "checkpoint").write_bytes(b"")
    rc, out = verify()
    assert rc == 1 and "OK" not in out
    assert f"the checkpoint {root / 'checkpoint'} is 0 bytes, not 4096 as RocketMQ's StoreCheckpoint: its fields " \
           f"are lost (the next writer's open rebuilds it)" in out
    with caplog.at_level("WARNING", logger="store.message_store"):
        with MessageStore.open(root, StoreConfig(segment_size=64 * 1024)) as s:
            assert s.committed_offset == end
    assert [r.getMessage() for r in caplog.records if r.name == "store.message_store"] == [
        f"the checkpoint {root / 'checkpoint'} is 0 bytes, not 4096 as RocketMQ's StoreCheckpoint: its fields were "
        f"lost; recovered without it (as RocketMQ does without a checkpoint) and rebuilt it at offset {end}"]
    assert read_checkpoint(root / "checkpoint").confirm_phy_offset == end
    rc, out = verify()
    assert rc == 0 and f"{root} (store): OK" in out
