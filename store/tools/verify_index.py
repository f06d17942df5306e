"""verify's look at index/, all of it: every IndexFile against itself (store.index.check: the
header against its items, every hash slot against the chain it heads, every prevIndex), every item
against the committed message record it points at (one of its keys has the item's hash; its
timeDiff is that record's store time), and, when config/messageIndex.json says the index covers
the store, every key of every committed message against the items (RocketMQ's own index, with no
such file, may lag behind its commit log, so it is not held to it). A store whose messageIndex.json
says the index is on but has no index/ is missing it. Found per segment with the append's key
finder, not record by record."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.errors import IndexFileError
from store.format.constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_LENGTH,
    POS_STORETIMESTAMP_V4,
)
from store.format.fields import RecordFields, be_ints, record_fields
from store.format.walk import walk
from store.index.batch_keys import BatchKeys, batch_keys
from store.index.check import order_faults, settled, structure_faults, time_diffs
from store.index.lookup import open_index
from store.index.service import IndexService
from store.index.settings import read_index_settings
from store.log.source import SegmentFile, Source, mapped
from store.tools.queues import Problem

MAX_REPORTED = 20          # bad items reported one by one per kind; the rest are counted
_PAIR = 1 << 32            # (record, key hash) pairs as one int64: record * _PAIR + hash


@dataclass
class _Items:
    """The items of every file within the checked range, side by side."""

    phy: np.ndarray
    key_hash: np.ndarray
    time_diff: np.ndarray
    begin: np.ndarray           # the begin timestamp of each item's file
    first: np.ndarray           # the first item of its file (its timeDiff is from the file before)

    @classmethod
    def none(cls) -> _Items:
        return cls(*(np.zeros(0, np.int64) for _ in range(4)), np.zeros(0, bool))


def index_problems(src: Source, data_end: int) -> tuple[list[Problem], int]:
    """(problems, items checked). Items below the first segment (retention keeps a file until all
    of it is old) are not checked."""
    if src.root is None:
        return [], 0
    out = _Problems()
    try:
        settings = read_index_settings(src.root)
        service = open_index(src.root)
    except IndexFileError as e:
        return [Problem(0, "index", str(e))], 0
    covers_all = settings is not None and settings.complete
    if service is None and not covers_all:
        return [], 0
    limit = min(src.committed_offset if src.committed_offset is not None else data_end, data_end)
    low = src.segments[0].base_offset if src.segments else 0
    items = _Items.none()
    if service is not None:
        try:
            items = _file_items(service, low, limit, out)
        finally:
            service.close()
    unindexed: list[np.ndarray] = []       # offsets of messages with a key no item holds
    for seg in src.segments:
        end = min(seg.size, limit - seg.base_offset)
        in_seg = np.flatnonzero((items.phy >= seg.base_offset) & (items.phy < seg.end_offset))
        if end <= 0 and not len(in_seg):
            continue
        with mapped(seg) as mv:
            arr = np.frombuffer(mv, dtype=np.uint8)
            unindexed.append(_check_segment(arr, mv, seg, max(end, 0), items, in_seg, covers_all, out))
            del arr
    lost = np.concatenate(unindexed) if unindexed else np.zeros(0, np.int64)
    if service is None and len(lost):
        out.add("indexMissing", int(lost[0]), f"config/messageIndex.json says the index is on, but there is no "
                                              f"index/: {len(lost):,} keys of committed messages are not indexed; "
                                              f"`commitlog reindex {src.root}` builds it")
    elif len(lost):
        for at in lost.tolist():
            out.add("indexKeyMissing", at, "this message has a key (its UNIQ_KEY or a KEYS token) that no index "
                                           f"item holds; `commitlog reindex {src.root}` rebuilds index/")
    return out.problems, len(items.phy)


def _file_items(service: IndexService, low: int, limit: int, out: _Problems) -> _Items:
    parts: list[tuple[np.ndarray, ...]] = []
    files = service.files
    for i, f in enumerate(files):
        for fault in settled(f, structure_faults, live=i == len(files) - 1):
            out.add(fault.kind, fault.offset, str(fault))
        h = f.read_header()
        if not 1 <= h.index_count <= f.max_index_num:
            continue
        items = f.items()
        phy = items["phy_offset"].astype(np.int64)
        for j in np.flatnonzero(phy >= limit).tolist():
            out.add("indexPastCommit", int(phy[j]), f"{f.path.name} item {j + 1} points past the committed "
                                                    f"end {limit}")
        keep = (phy >= low) & (phy < limit)
        first = np.zeros(len(phy), dtype=bool)
        first[:1] = True
        parts.append((phy[keep], items["key_hash"].astype(np.int64)[keep], items["time_diff"].astype(np.int64)[keep],
                      np.full(int(keep.sum()), h.begin_timestamp, dtype=np.int64), first[keep]))
        del items              # a view of the mapping: it must go before the file is closed
    for fault in order_faults([(f.path.name, f.read_header()) for f in files]):
        out.add(fault.kind, fault.offset, str(fault))
    if not parts:
        return _Items.none()
    return _Items(*(np.concatenate([p[k] for p in parts]) for k in range(5)))


def _check_segment(arr: np.ndarray, mv: memoryview, seg: SegmentFile, end: int, items: _Items, in_seg: np.ndarray,
                   covers_all: bool, out: _Problems) -> np.ndarray:
    """The items pointing into ``seg`` against the records there; with ``covers_all``, every key of
    the records in [0, end) against the items: the offsets of the keys no item holds."""
    base = seg.base_offset
    phy, key_hash = items.phy[in_seg], items.key_hash[in_seg]
    starts, owner = np.unique(phy - base, return_inverse=True)
    ok = _record_starts(arr, starts, base)
    for r in np.flatnonzero(~ok).tolist():
        out.add("indexItem", int(starts[r] + base), "an index item points here, but no message record starts here")
    good = starts[ok]
    fields = record_fields(arr, good, be_ints(arr, good, 4))
    keys = batch_keys(arr, fields)
    row_of = np.full(len(starts), -1, dtype=np.int64)
    row_of[ok] = np.arange(len(good))
    # an item is right when its record has a key with its hash: compare (record, hash) pairs, by
    # sorting and searching (numpy's hashing unique/isin cost several times more on millions)
    rows = row_of[owner]
    found = _among(rows * _PAIR + (key_hash & 0xFFFFFFFF),
                   np.sort(keys.record.astype(np.int64) * _PAIR + (keys.key_hash.astype(np.int64) & 0xFFFFFFFF)))
    for i in np.flatnonzero((rows >= 0) & ~found).tolist():
        out.add("indexKey", int(phy[i]), f"an index item with keyHash {int(key_hash[i])} points at this message, "
                                         f"but none of its keys hashes to it")
    _check_times(arr, fields, rows, items, in_seg, out)
    if not covers_all or end <= 0:
        return np.zeros(0, np.int64)
    return _unindexed_keys(arr, mv, base, end, good, fields, keys, phy, key_hash)


def _record_starts(arr: np.ndarray, starts: np.ndarray, base: int) -> np.ndarray:
    """Which of ``starts`` (positions in the segment) hold a whole message record that says it is there."""
    fits = starts + MIN_RECORD_LENGTH <= len(arr)
    at = np.where(fits, starts, 0)
    magic = be_ints(arr, at + 4, 4) & 0xFFFFFFFF
    sizes = be_ints(arr, at, 4)
    ok = fits & np.isin(magic, [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]) & (sizes >= MIN_RECORD_LENGTH)
    ok &= at + sizes <= len(arr)
    return ok & (be_ints(arr, at + 28, 8) == starts + base)


def _store_timestamps(arr: np.ndarray, fields: RecordFields) -> np.ndarray:
    born6 = (fields.sys_flag & BORNHOST_V6_FLAG) != 0
    return be_ints(arr, fields.starts + POS_STORETIMESTAMP_V4 + born6 * 12, 8)


def _check_times(arr: np.ndarray, fields: RecordFields, rows: np.ndarray, items: _Items, in_seg: np.ndarray,
                 out: _Problems) -> None:
    """Each item's timeDiff is its record's store time less its file's begin timestamp (the first
    item of a file is measured from the file before, which retention may have deleted: not checked)."""
    check = (rows >= 0) & ~items.first[in_seg]
    if not check.any():
        return
    ts = _store_timestamps(arr, fields)[rows[check]]
    want = time_diffs(ts, items.begin[in_seg][check])
    got = items.time_diff[in_seg][check]
    phy = items.phy[in_seg][check]
    for i in np.flatnonzero(want != got).tolist():
        out.add("indexTime", int(phy[i]), f"an index item of this message has timeDiff {int(got[i])}, but the "
                                          f"message was stored {int(want[i])} s after its file's begin timestamp")


def _unindexed_keys(arr: np.ndarray, mv: memoryview, base: int, end: int, pointed: np.ndarray,
                    pointed_fields: RecordFields, pointed_keys: BatchKeys, phy: np.ndarray,
                    key_hash: np.ndarray) -> np.ndarray:
    """The offsets of the keys of message records in [0, end) of the segment that no item holds:
    of the records the items point at (their keys are known) and of the others (walked to here)."""
    walked, _, _ = walk(arr, mv, 0, end, end)
    magic = be_ints(arr, walked + 4, 4) & 0xFFFFFFFF
    walked = walked[np.isin(magic, [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2])]
    others = walked[~_among(walked, pointed)]             # np.unique made ``pointed`` sorted
    other_fields = record_fields(arr, others, be_ints(arr, others, 4))
    other_keys = batch_keys(arr, other_fields)
    have = np.sort(phy * _PAIR + (key_hash & 0xFFFFFFFF))
    lost = []
    for fields, keys in ((pointed_fields, pointed_keys), (other_fields, other_keys)):
        at = fields.starts[keys.record] + base
        pairs = at * _PAIR + (keys.key_hash.astype(np.int64) & 0xFFFFFFFF)
        lost.append(at[~_among(pairs, have)])
    return np.sort(np.concatenate(lost))


def _among(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Which ``values`` are in ``pool`` (sorted)."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    return pool[np.minimum(np.searchsorted(pool, values), len(pool) - 1)] == values


class _Problems:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self._count: dict[str, int] = {}

    def add(self, kind: str, offset: int, detail: str) -> None:
        n = self._count.get(kind, 0) + 1
        self._count[kind] = n
        if n <= MAX_REPORTED:
            self.problems.append(Problem(offset, kind, detail))
        elif n == MAX_REPORTED + 1:
            self.problems.append(Problem(offset, kind, f"more {kind} problems from here on (not listed)"))
