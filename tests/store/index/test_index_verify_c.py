"""verify's C look at a healthy index (store/index/_index_check.c) changes nothing but the time it
takes: on healthy and damaged stores alike, index_problems gives the same problems with it as with
the numpy checks alone (tests/oracles/index_check.py's NumpyAlone in place of the C module), whether
the index covers the store or may lag behind it; a healthy index is
told without the numpy checks; one whose keys RocketMQ put in another order, or whose records hold
text the C key finder leaves to Python, is told healthy through them."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from store import MessageStore, StoreConfig
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.scan.walk import walk
from store.index import check
from store.index.build import record_keys
from store.index.check import item_columns, structure_faults, time_diffs
from store.index.file import IndexFile
from store.index.lookup import open_index
from store.index.service import IndexConfig, IndexService
from store.index.settings import IndexSettings, write_index_settings
from store.read.view import mapped, open_view
from store.tools import verify_index
from store.tools.reindex import reindex
from store.tools.verify_index import index_problems
from tests.helpers.index_stores import (
    HEADER,
    ITEMS,
    SLOT_TABLE,
    SLOTS,
    golden_index_stores,
    item_at,
    overwrite,
    small_index_store,
)
from tests.oracles import index_check

pytestmark = pytest.mark.unit


def numpy_alone(check_of: Callable[[], object]) -> object:
    """``check_of()`` with verify's numpy checks running on everything: nothing is told healthy in C."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(check, "_index_check", index_check.NumpyAlone)
        return check_of()

Damage = Callable[[Path, list[int]], None]
T0 = 1_700_000_000_000


def index_file_of(root: Path) -> Path:
    return sorted((root / "index").iterdir())[0]


def set_item(root: Path, i: int, field: str, value: int) -> None:
    """Item ``i`` (0-based) of the first IndexFile: one field rewritten in place."""
    at, width = {"key_hash": (0, 4), "phy": (4, 8), "time_diff": (12, 4)}[field]
    path = index_file_of(root)
    data = bytearray(path.read_bytes())
    start = HEADER + SLOT_TABLE + 20 * i + at
    data[start:start + width] = value.to_bytes(width, "big", signed=True)
    path.write_bytes(bytes(data))


def header_bytes(root: Path, _: list[int]) -> None:
    overwrite(index_file_of(root), 0, HEADER, 1)


def slot_bytes(root: Path, _: list[int]) -> None:
    overwrite(index_file_of(root), HEADER, SLOT_TABLE, 2)


def item_bytes(root: Path, _: list[int]) -> None:
    overwrite(index_file_of(root), HEADER + SLOT_TABLE + 20 * 30, 20 * 5, 7)


def key_missing(root: Path, offsets: list[int]) -> None:
    f = IndexFile(index_file_of(root), SLOTS, ITEMS)
    f.truncate_before(offsets[-1], lambda phy: 1_700_000_000_000 + 2 * 3_600_000)
    f.flush()
    f.close()


def other_hash(root: Path, _: list[int]) -> None:
    key_hash, _phy = item_at(index_file_of(root), 30)
    set_item(root, 30, "key_hash", (key_hash + 1) % (1 << 31))


def hash_of_the_next_key(root: Path, _: list[int]) -> None:
    path = index_file_of(root)
    i = next(i for i in range(1, 77) if item_at(path, i)[1] == item_at(path, i + 1)[1]
             and item_at(path, i)[0] != item_at(path, i + 1)[0])
    set_item(root, i, "key_hash", item_at(path, i + 1)[0])


def items_swapped(root: Path, _: list[int]) -> None:
    path = index_file_of(root)
    i = next(i for i in range(40, 77) if item_at(path, i)[1] != item_at(path, i + 1)[1])
    data = bytearray(path.read_bytes())
    a = HEADER + SLOT_TABLE + 20 * i
    data[a:a + 40] = data[a + 20:a + 40] + data[a:a + 20]
    path.write_bytes(bytes(data))


def wrong_time(root: Path, _: list[int]) -> None:
    set_item(root, 50, "time_diff", 12345)


def inside_a_record(root: Path, _: list[int]) -> None:
    set_item(root, 40, "phy", item_at(index_file_of(root), 40)[1] + 1)


def total_size(root: Path, offsets: list[int]) -> None:
    segment = root / "commitlog" / "0".zfill(20)
    data = bytearray(segment.read_bytes())
    data[offsets[12]:offsets[12] + 4] = (5).to_bytes(4, "big")
    segment.write_bytes(bytes(data))


def physical_offset(root: Path, offsets: list[int]) -> None:
    """A record's PHYSICALOFFSET wrong: an index that may lag takes the records items point at only
    where they say they are."""
    segment = root / "commitlog" / "0".zfill(20)
    data = bytearray(segment.read_bytes())
    data[offsets[5] + 28:offsets[5] + 36] = (offsets[5] + 8).to_bytes(8, "big")
    segment.write_bytes(bytes(data))


def extra_item(root: Path, offsets: list[int]) -> None:
    """One item more, for the last message, with a hash none of its keys has: the file stays sound."""
    f = IndexFile(index_file_of(root), SLOTS, ITEMS)
    f.put(np.array([12345], np.int32), np.array([offsets[-1]]), np.array([T0 + 2 * 3_600_000]))
    f.flush()
    f.close()


def index_removed(root: Path, _: list[int]) -> None:
    shutil.rmtree(root / "index")


DAMAGES: dict[str, Damage] = {f.__name__: f for f in (
    header_bytes, slot_bytes, item_bytes, key_missing, other_hash, hash_of_the_next_key, items_swapped, wrong_time,
    inside_a_record, total_size, physical_offset, extra_item, index_removed)}

# what index_problems does not hold against the index: a PHYSICALOFFSET on the walk (the segment
# check's), keys an index that may lag lacks
UNSEEN = {("physical_offset", True), ("key_missing", False), ("index_removed", False)}


def both_ways(root: Path, data_end: int | None = None) -> list[tuple[int, str, str]]:
    """index_problems with the C checks and with numpy alone: the same, problem for problem."""
    src = open_view(root)
    end = src.committed_end() if data_end is None else data_end
    fast, fast_items = index_problems(src, end)
    slow, slow_items = numpy_alone(lambda: index_problems(src, end))
    assert [(p.offset, p.kind, p.detail) for p in fast] == [(p.offset, p.kind, p.detail) for p in slow]
    assert fast_items == slow_items
    return [(p.offset, p.kind, p.detail) for p in fast]


def no_numpy_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the numpy checks of items and records fails the test."""
    def refuse(*_: object) -> None:
        raise AssertionError("the numpy checks ran on a healthy index")

    monkeypatch.setattr(verify_index, "_check_segment", refuse)
    monkeypatch.setattr(check, "_item_faults", refuse)


def lagging(root: Path, config: IndexConfig = IndexConfig(True, SLOTS, ITEMS)) -> None:
    """messageIndex.json says the index may miss messages: only what items point at is checked."""
    write_index_settings(root, IndexSettings(config.max_hash_slot_num, config.max_index_num, complete=False))


@pytest.mark.parametrize("covers_all", [True, False])
def test_a_healthy_index_is_told_in_c_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            covers_all: bool) -> None:
    offsets = small_index_store(tmp_path / "s")
    if not covers_all:
        lagging(tmp_path / "s")
    assert both_ways(tmp_path / "s") == []
    no_numpy_checks(monkeypatch)
    problems, items = index_problems(open_view(tmp_path / "s"), offsets[-1] + 1_000)
    assert problems == [] and items == 78


@pytest.mark.parametrize("covers_all", [True, False])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damage_is_reported_the_same_both_ways(tmp_path: Path, damage: str, covers_all: bool) -> None:
    offsets = small_index_store(tmp_path / "s")
    DAMAGES[damage](tmp_path / "s", offsets)
    if not covers_all:
        lagging(tmp_path / "s")
    problems = both_ways(tmp_path / "s")
    assert bool(problems) != ((damage, covers_all) in UNSEEN), problems
    both_ways(tmp_path / "s", data_end=offsets[12])      # the data found to end early: items past it


def test_the_damage_is_seen_by_the_fast_path_too(tmp_path: Path) -> None:
    """records_match itself says no to each damage of the records or the items that the chains do
    not show (a wrong time, an item inside a record, a key with another hash, one missing, one more)."""
    for name in ("wrong_time", "inside_a_record", "other_hash", "key_missing", "extra_item"):
        root = tmp_path / name
        offsets = small_index_store(root)
        assert _segment_matches(root)
        DAMAGES[name](root, offsets)
        assert not _segment_matches(root), name


def _segment_matches(root: Path, strict: bool = True) -> bool:
    src = open_view(root)
    service = open_index(root)
    assert service is not None
    seg = src.segments[0]
    runs: list[tuple[np.ndarray, int, bool]] = []
    try:
        runs = [(f.items(), f.read_header().begin_timestamp, True) for f in service.files]
        with mapped(seg) as mv:
            arr = np.frombuffer(mv, dtype=np.uint8)
            try:
                return check.records_match(arr, src.committed_offset - seg.base_offset, seg.base_offset, strict, runs)
            finally:
                del arr
    finally:
        del runs
        service.close()


@pytest.mark.parametrize("damage", ["slot_bytes", "item_bytes", "items_swapped", "other_hash", "hash_of_the_next_key"])
def test_chains_hold_only_where_numpy_finds_nothing(tmp_path: Path, damage: str) -> None:
    offsets = small_index_store(tmp_path / "s")
    f = IndexFile(index_file_of(tmp_path / "s"), SLOTS, ITEMS, read_only=True)
    assert structure_faults(f) == numpy_alone(lambda: structure_faults(f)) == []
    assert index_check.chains_hold(f.items(), f.slots(), SLOTS) and check._index_check.chains_hold(f.items(), f.slots(), SLOTS)
    f.close()
    DAMAGES[damage](tmp_path / "s", offsets)
    f = IndexFile(index_file_of(tmp_path / "s"), SLOTS, ITEMS, read_only=True)
    try:
        assert structure_faults(f) == numpy_alone(lambda: structure_faults(f)) != []
        assert not index_check.chains_hold(f.items(), f.slots(), SLOTS)
        assert not check._index_check.chains_hold(f.items(), f.slots(), SLOTS)
    finally:
        f.close()


def keyed_store(root: Path, config: IndexConfig, count: int = 90, segment_size: int = 4096) -> list[int]:
    """Small segments and small IndexFiles: a segment's items in two files, a record's keys too."""
    offsets: list[int] = []
    with MessageStore.open(root, StoreConfig(segment_size=segment_size, index=config)) as store:
        for b in range(3):
            msgs = [Message("T1", f"body-{b}-{i}".encode(),
                            properties=f"KEYS\x01k{b}-{i} shared x{i % 3}\x02UNIQ_KEY\x01U{b}-{i:029d}\x02")
                    for i in range(count // 3)]
            batch = encode_messages(msgs, CodecConfig())
            offsets += store.append_encoded(batch, store_timestamp=T0 + b * 3_600_000).physical_offsets.tolist()
            store.commit()
    return offsets


def rewritten(root: Path, config: IndexConfig, order: Callable[[np.ndarray], np.ndarray]) -> None:
    """index/ put again from the records' keys, each record's keys in the order ``order`` gives
    (of their places within the record), as another writer might."""
    src = open_view(root)
    shutil.rmtree(root / "index")
    service = IndexService(root / "index", config)
    try:
        for seg in src.segments:
            end = min(seg.size, src.committed_offset - seg.base_offset)
            with mapped(seg) as mv:
                arr = np.frombuffer(mv, dtype=np.uint8)
                starts, _, _ = walk(arr, 0, end, end)
                keys = record_keys(arr, starts, seg.base_offset)
                del arr
            first = np.flatnonzero(np.r_[True, keys.record[1:] != keys.record[:-1]])
            runs = np.diff(np.r_[first, len(keys)])
            take = np.concatenate([s + order(np.arange(n)) for s, n in zip(first, runs)]) if len(keys) else []
            service.put_hashes(keys.key_hash[take], keys.phy_offset[take], keys.store_timestamp[take])
        service.flush()
    finally:
        service.close()


def test_many_segments_and_files_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = IndexConfig(True, 16, 50)
    offsets = keyed_store(tmp_path / "s", config)
    src = open_view(tmp_path / "s")
    assert len(src.segments) > 3 and len(list((tmp_path / "s" / "index").iterdir())) > 3
    assert both_ways(tmp_path / "s") == []
    assert both_ways(tmp_path / "s", data_end=offsets[40]) != []      # items past the data's end
    with monkeypatch.context() as m:
        no_numpy_checks(m)
        assert index_problems(open_view(tmp_path / "s"), src.committed_offset)[0] == []
    # a key of a record in the middle of a middle file: its timeDiff
    path = sorted((tmp_path / "s" / "index").iterdir())[2]
    data = bytearray(path.read_bytes())
    at = 40 + 4 * 16 + 20 * 20 + 12
    data[at:at + 4] = (99).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    assert "indexTime" in {kind for _, kind, _ in both_ways(tmp_path / "s")}


@pytest.mark.parametrize("damage", ["slots", "items", "order"])
def test_one_unsound_file_among_sound_ones_both_ways(tmp_path: Path, damage: str) -> None:
    """A fault in one IndexFile: the items of all of them as columns, the sound files' run by run."""
    config = IndexConfig(True, 16, 50)
    offsets = keyed_store(tmp_path / "s", config)
    files = sorted((tmp_path / "s" / "index").iterdir())
    slots_at, items_at = 40, 40 + 4 * 16
    if damage == "order":      # a file whose items start before the one before ends
        files[3].write_bytes(files[3].read_bytes()[:16] + (offsets[0]).to_bytes(8, "big") + files[3].read_bytes()[24:])
    else:
        at, length = (slots_at, 4 * 16) if damage == "slots" else (items_at + 20 * 10, 40)
        overwrite(files[2], at, length, 3)
    problems = both_ways(tmp_path / "s")
    assert problems
    assert both_ways(tmp_path / "s", data_end=offsets[50]) != problems


@pytest.mark.parametrize("order", ["reversed", "rotated"])
def test_keys_put_in_another_order_verify_through_numpy(tmp_path: Path, order: str) -> None:
    """An index whose items hold each record's keys in another order than ours (KEYS tokens before
    UNIQ_KEY, say): the C pass says no, the numpy checks find every key held."""
    config = IndexConfig(True, 16, 50)
    keyed_store(tmp_path / "s", config)
    rewritten(tmp_path / "s", config, (lambda p: p[::-1]) if order == "reversed" else (lambda p: np.roll(p, 1)))
    assert not _segments_all_match(tmp_path / "s")
    assert both_ways(tmp_path / "s") == []
    lagging(tmp_path / "s", config)
    assert both_ways(tmp_path / "s") == []


def _segments_all_match(root: Path) -> bool:
    """Whether the C pass alone would have told index_problems all is well."""
    seen: list[bool] = []
    real = check.records_match

    def spy(*args: object) -> bool:
        seen.append(real(*args))
        return seen[-1]

    verify_index.records_match = spy            # type: ignore[assignment]
    try:
        index_problems(open_view(root), open_view(root).committed_offset)
    finally:
        verify_index.records_match = real       # type: ignore[assignment]
    return bool(seen) and all(seen)


def test_keys_left_to_python_verify_through_numpy(tmp_path: Path) -> None:
    """A KEYS token that is not well-formed UTF-8 (Java reads it with a replacement): the C key
    finder leaves the record to Python, and the index reindex builds from it is healthy."""
    offsets = small_index_store(tmp_path / "s")
    segment = tmp_path / "s" / "commitlog" / "0".zfill(20)
    data = bytearray(segment.read_bytes())
    record = bytes(data[offsets[3]:offsets[4]])
    at = offsets[3] + record.index(b"KEYS\x01") + 5
    data[at] = 0xFF
    segment.write_bytes(bytes(data))
    reindex(tmp_path / "s", IndexConfig(True, SLOTS, ITEMS))
    assert not _segments_all_match(tmp_path / "s")
    assert both_ways(tmp_path / "s") == []


def test_rocketmqs_own_index_files_both_ways(golden_dir: Path, tmp_path: Path) -> None:
    for case, _, store in golden_index_stores(golden_dir, tmp_path):
        assert both_ways(store) == [], case


def test_item_columns_both_ways(tmp_path: Path) -> None:
    offsets = small_index_store(tmp_path / "s")
    f = IndexFile(index_file_of(tmp_path / "s"), SLOTS, ITEMS, read_only=True)
    try:
        items = f.items()
        for low, limit in ((0, offsets[-1] + 1), (offsets[3], offsets[20]), (offsets[-1] + 1, 1 << 62)):
            fast = item_columns(items, low, limit)
            slow = index_check.item_columns(items, low, limit)
            assert [c.tolist() for c in fast[:3]] == [c.tolist() for c in slow[:3]]
            assert [c.dtype for c in fast[:3]] == [c.dtype for c in slow[:3]]
            assert fast[3] == slow[3] == int(np.count_nonzero((fast[0] < low) | (fast[0] >= limit)))
        assert item_columns(items, offsets[3], offsets[20])[3] > 0
        del items
    finally:
        f.close()


def test_time_diffs_as_putkey_computes_them() -> None:
    """The in-place time_diffs against the plain formula, wrapping differences included."""
    edge = np.array([-2**63, -2**63 + 5, -1001, -1, 0, 1, 999, 1000, 1001, 2**40, 1_700_000_000_000,
                     1_700_000_000_000 + 2**31 * 1000 + 5_000, 2**63 - 1], dtype=np.int64)
    ts, begin = (a.ravel() for a in np.meshgrid(edge, edge))
    with np.errstate(over="ignore"):
        plain = np.where(begin > 0, np.minimum(np.where(ts >= begin, (ts - begin) // 1000, 0), 0x7FFFFFFF), 0)
    assert time_diffs(ts, begin).tolist() == plain.tolist()
    assert time_diffs(np.array([1_700_000_003_999]), np.array([1_700_000_000_000])).tolist() == [3]
