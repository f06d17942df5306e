"""The tools never skip in silence: a missing segment, or one of the wrong size, is reported by
dump, stat and the readers with its offset, and they exit 1 (verify too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import MessageStore, StoreConfig, StoreReader
from store.errors import StoreError
from store.format.codec import Message
from tests.helpers.cli import run
from tests.helpers.stores import SEG, four_segments

pytestmark = pytest.mark.unit


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


def _keyed_segments(root: Path, count: int) -> list[Path]:
    with MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=False)) as store:
        while store.max_offset < (count - 1) * SEG + 1000:
            store.append([Message("T", bytes(900), properties=f"KEYS\x01k{store.max_offset + i}\x02")
                          for i in range(20)])
        store.commit()
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) == count
    return segs


def test_a_first_segment_cut_mid_file_is_named_by_get_and_by_the_writer(tmp_path: Path) -> None:
    segs = _keyed_segments(tmp_path, 2)
    cut = 40_000        # as `truncate -s 400000` on a segment of 1 GiB: not a multiple of 4096
    with open(segs[0], "r+b") as f:
        f.truncate(cut)
    said = (f"segment {segs[0]} is {cut} bytes, the store's segments are {SEG}: it is damaged (cut short?); "
            f"restore it from a backup, or move it away")
    rc, out, err = run("get", str(tmp_path), "--topic", "T", "--key", f"k{SEG + 100}")
    assert (rc, out, err.strip()) == (2, "", f"commitlog get: {said}")
    with pytest.raises(StoreError) as refused:
        MessageStore.open(tmp_path, StoreConfig(segment_size=1 << 30))
    assert str(refused.value) == said
    rc, out, err = run("run", "--skip-preflight", "--bootstrap-servers", "127.0.0.1:9", "--subscribe", "T",
                       "--store", str(tmp_path), "--checkpoint", str(tmp_path / "spark"))
    assert rc == 2 and err.splitlines()[-1] == f"commitlog run: error: {said}"


def test_a_lone_segment_cut_mid_file_is_named_by_run_not_blamed_on_segment_size(tmp_path: Path) -> None:
    segs = _keyed_segments(tmp_path, 1)
    with open(segs[0], "r+b") as f:
        f.truncate(40_000)
    rc, out, err = run("run", "--skip-preflight", "--bootstrap-servers", "127.0.0.1:9", "--subscribe", "T",
                       "--store", str(tmp_path), "--checkpoint", str(tmp_path / "spark"))
    assert rc == 2 and "--segment-size 40000" not in err
    assert err.splitlines()[-1] == (
        f"commitlog run: error: segment {segs[0]} is 40000 bytes, expected 1073741824 (--segment-size; a segment "
        f"is a multiple of 4096): it is damaged (cut short?); restore it from a backup, or move it away")
