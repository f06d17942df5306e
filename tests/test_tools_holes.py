"""The tools never skip in silence: a missing segment, or one of the wrong size, is reported by
dump, stat and the readers with its offset, and they exit 1 (verify too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import MessageStore, StoreConfig, StoreReader
from store.errors import StoreError
from store.format.codec import Message
from tests.test_commands import run

pytestmark = pytest.mark.unit
SEG = 1 << 16


def four_segments(root: Path) -> list[Path]:
    with MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=False)) as store:
        while store.max_offset < 3 * SEG + 1000:
            store.append([Message("T", bytes(900), queue_id=i % 2) for i in range(20)])
        store.commit()
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) == 4
    return segs


def test_a_clean_store_reads_clean(tmp_path: Path) -> None:
    four_segments(tmp_path)
    assert run("dump", str(tmp_path))[0] == 0
    assert run("stat", str(tmp_path))[0] == 0


def test_a_missing_middle_segment_is_reported_where_it_is(tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    segs[1].unlink()
    rc, out, err = run("dump", str(tmp_path))
    assert rc == 1 and "missingSegment" in err and str(SEG) in err
    assert f"{SEG:>20} ERROR missingSegment" in out
    rc, out, err = run("dump", str(tmp_path), "--json")
    assert rc == 1 and '"kind":"missingSegment"' in out
    rc, out, err = run("stat", str(tmp_path))
    assert rc == 1 and f"PROBLEM at {SEG}: missingSegment" in out
    assert run("verify", str(tmp_path))[0] == 1
    with pytest.raises(StoreError, match="a segment is missing"):
        StoreReader.open(tmp_path)


def test_a_middle_segment_of_the_wrong_size_is_reported(tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    with open(segs[1], "r+b") as f:
        f.truncate(SEG // 2)
    rc, out, err = run("dump", str(tmp_path))
    assert rc == 1 and "segmentSize" in err
    assert f"{SEG:>20} ERROR segmentSize" in out and f"{SEG + SEG // 2}..{2 * SEG} cannot be read" in out
    rc, out, _ = run("stat", str(tmp_path), "--json")
    assert rc == 1 and '"kind": "segmentSize"' in out
    assert run("verify", str(tmp_path))[0] == 1


def test_the_reader_stops_at_damage_below_the_commit_point_with_its_offset(tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    with StoreReader.open(tmp_path) as reader:
        offsets = [off for off, _m in reader.iter_messages()]
    victim = offsets[len(offsets) // 2]
    seg = segs[victim // SEG]
    data = bytearray(seg.read_bytes())
    data[victim % SEG + 4:victim % SEG + 8] = bytes(4)          # its MAGICCODE
    seg.write_bytes(bytes(data))
    with StoreReader.open(tmp_path) as reader, pytest.raises(StoreError, match=f"offset {victim}"):
        list(reader.iter_messages())
    rc, out, err = run("dump", str(tmp_path))
    assert rc == 1 and f"{victim:>20} ERROR magic" in out
