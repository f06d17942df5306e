"""Recovery on open: clean close, crash with a torn tail or garbage, corruption of committed
data, segment files of the wrong size, RocketMQ stores without a commit point."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from store import CommittedDataCorruptError, MessageStore, SegmentSizeError, StoreConfig, StoreReader
from tests.helpers.stores import SEG, committed_store, crash, flip, msgs, open_store, seg_path

pytestmark = pytest.mark.unit


def bodies(s: MessageStore) -> list[bytes]:
    return [m.body.tobytes() for _, m in s.iter_messages()]


def poke(root: Path, offset: int, data: bytes) -> None:
    with open(seg_path(root, offset), "r+b") as f:
        f.seek(offset % SEG)
        f.write(data)


def test_clean_close_reopens_at_the_commit_point_without_rescanning(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    s.close()
    # Damage in an early segment is not looked at by a normal recovery: it trusts the
    # commit point and checks only the tail (open cost does not grow with the store).
    poke(root, offs[3] + 100, b"\xff")
    with open_store(root) as s2:
        assert s2.committed_offset == s2.max_offset == s.committed_offset
        assert s2.last_commit.metadata == {"n": 900}


@pytest.mark.parametrize("tail", ["torn-record", "garbage", "valid-uncommitted-records"])
def test_a_crash_keeps_everything_up_to_the_commit_point_and_nothing_after(tmp_path: Path, tail: str) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    end = s.committed_offset
    r = s.append(msgs(400, 900))              # rolls into new segments, never committed
    s.flush()
    last_uncommitted = s.max_offset
    crash(s)
    if tail == "torn-record":
        rec = seg_path(root, offs[5]).read_bytes()[offs[5] % SEG:][:60]
        poke(root, last_uncommitted, rec)     # a record header and half a body
    elif tail == "garbage":
        poke(root, last_uncommitted, bytes(range(1, 256)) * 8)
    with open_store(root) as s2:
        assert s2.committed_offset == s2.max_offset == end
        assert bodies(s2) == [m.body for m in msgs(900)]
        assert not seg_path(root, int(r.physical_offsets[-1])).exists() or \
            int(r.physical_offsets[-1]) // SEG == end // SEG
        stale = seg_path(root, end).read_bytes()[end % SEG:]
        assert stale == bytes(len(stale))      # nothing left that a scan could take for data
        assert s2.next_queue_offsets() == {("R", 0): 300, ("R", 1): 300, ("R", 2): 300}
        assert s2.append(msgs(1, 900)).queue_offsets.tolist() == [300]


def test_broken_framing_in_committed_data_refuses_to_open_until_truncation_is_asked(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    crash(s)
    victim = offs[-20]                         # committed, in the newest segment
    flip(root, victim + 4)                     # its MAGICCODE: the records after it cannot be found
    with pytest.raises(CommittedDataCorruptError) as e:
        open_store(root)
    assert e.value.offset == victim and e.value.segment == seg_path(root, victim).name
    assert str(victim) in str(e.value) and "truncate_on_corruption" in str(e.value)
    with open_store(root, truncate_on_corruption=True) as s2:
        assert s2.committed_offset == s2.max_offset == victim
        assert bodies(s2) == [m.body for m in msgs(len(offs) - 20)]
        assert json.loads((root / "commitpoint.json").read_text())["offset"] == victim
        n_before = len(offs) - 20
        assert sum(s2.next_queue_offsets().values()) == n_before


def test_a_damaged_body_below_the_commit_point_is_kept_and_costs_nothing_after_it(tmp_path: Path) -> None:
    """Damage inside committed data whose framing holds: reported, kept, passed over. After a
    clean close it goes unnoticed (a CRC pass is verify's job), the writer appends on, and the
    recovery after a later crash keeps every record, the damaged one and all after it."""
    root = tmp_path / "s"
    s, offs = committed_store(root)
    s.close()
    victim = offs[100]                         # an older, closed segment
    flip(root, victim + 95)                    # a body byte: BODYCRC fails, the framing holds
    with open_store(root) as s2:
        r = s2.append(msgs(300, 900))
        s2.commit()
        end = s2.committed_offset
        crash(s2)
    with open_store(root) as s3:
        assert s3.committed_offset == s3.max_offset == end
        got = bodies(s3)
        want = [m.body for m in msgs(1200)]
        assert len(got) == 1200 and got[:100] == want[:100] and got[101:] == want[101:]
        assert got[100] != want[100]
        assert sum(s3.next_queue_offsets().values()) == 1200
        assert int(r.physical_offsets[-1]) < end
    from tests.helpers.cli import run

    rc, out, _ = run("verify", str(root), "--json")
    assert rc == 1 and [(p["offset"], p["kind"]) for p in json.loads(out)["problems"]] == [(victim, "crc")]


def test_a_clean_open_finds_a_segment_whose_first_record_is_broken(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    s.close()
    flip(root, SEG + 4)                        # the second segment's first MAGICCODE
    with pytest.raises(CommittedDataCorruptError) as e:
        open_store(root)
    assert e.value.offset == SEG


def test_a_segment_of_the_wrong_size_is_named(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, _ = committed_store(root, 50)
    s.close()
    (root / "commitlog" / str(SEG).zfill(20)).write_bytes(b"\0" * 1000)
    with pytest.raises(SegmentSizeError, match=str(SEG).zfill(20) + ".*1000 bytes"):
        open_store(root)


def test_a_zero_length_last_segment_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, _ = committed_store(root, 50)
    s.close()
    extra = root / "commitlog" / str(5 * SEG).zfill(20)
    extra.touch()
    with open_store(root) as s2:
        assert len(bodies(s2)) == 50
    assert not extra.exists()


def test_a_rocketmq_store_without_commit_point_counts_its_valid_prefix_as_committed(
        tmp_path: Path, golden_dir: Path) -> None:
    root = tmp_path / "rmq"
    shutil.copytree(golden_dir / "store_multiseg", root)
    manifest = json.loads((root / "manifest.json").read_text())
    expected = [json.loads(line) for line in (golden_dir / "store_multiseg.decoded.jsonl").read_text().splitlines()]
    messages = [o for o in expected if o.get("type") == "message"]
    with StoreReader.open(root) as reader:
        n_reader = sum(1 for _ in reader.iter_messages())
    with MessageStore.open(root, StoreConfig(segment_size=4096, preallocate=False, consume_queue_units=10)) as s:
        got = list(s.iter_messages())
        assert len(got) == len(messages) == n_reader
        assert [o for o, _ in got] == [m["offset"] for m in messages]
        assert s.committed_offset == s.max_offset
        assert (root / "commitpoint.json").exists()
        for (t, q), nxt in s.next_queue_offsets().items():
            assert nxt == sum(1 for m in messages if m["topic"] == t and m["queueId"] == q
                              and m["sysFlagBits"]["transaction"] in ("NOT", "COMMIT"))
        assert s.max_offset == manifest["commitLogEndOffset"]


def test_a_rocketmq_store_with_a_bad_crc_ends_at_the_bad_record(tmp_path: Path, golden_dir: Path) -> None:
    root = tmp_path / "rmq"
    shutil.copytree(golden_dir / "store_multiseg", root)
    shutil.copy(golden_dir / "corrupt_crc" / "commitlog" / "00000000000000000000",
                root / "commitlog" / "00000000000000000000")
    (root / "abort").touch()                    # as after a crash: re-validate from the checkpoint
    (root / "checkpoint").unlink()              # no checkpoint: from the first segment
    bad = json.loads((golden_dir / "corrupt_crc" / "CHANGES.json").read_text())["changes"][0]["offset"]
    records = [json.loads(line) for line in (golden_dir / "store_multiseg.decoded.jsonl").read_text().splitlines()]
    hit = next(r for r in records if r.get("type") == "message" and r["offset"] <= bad < r["offset"] + r["totalSize"])
    with MessageStore.open(root, StoreConfig(segment_size=4096, preallocate=False, consume_queue_units=10)) as s:
        assert s.max_offset == s.committed_offset == hit["offset"]      # the damaged record starts the cut
        assert len(list(s.iter_messages())) == sum(
            1 for r in records if r.get("type") == "message" and r["offset"] < hit["offset"])
        assert struct.unpack(">i", seg_path(root, 0).read_bytes()[s.max_offset:s.max_offset + 4])[0] == 0


def test_consume_queues_lost_behind_the_commit_point_are_rebuilt_from_the_commit_log(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    s.close()
    shutil.rmtree(root / "consumequeue" / "R" / "1")
    with open_store(root) as s2:
        assert s2.queue_range("R", 1) == (0, 300)
        assert [m.body.tobytes() for m in s2.get_by_queue("R", 1, 299, 5)] == [msgs(1, 898)[0].body]
        assert s2.append(msgs(1, 900)).queue_offsets.tolist() == [300]
