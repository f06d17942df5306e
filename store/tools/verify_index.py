"""verify's look at index/, all of it: every IndexFile against itself (store.index.check: the
header against its items, every hash slot against the chain it heads, every prevIndex), every item
against the committed message record it points at (one of its keys has the item's hash; its
timeDiff is that record's store time), and, when config/messageIndex.json says the index covers
the store, every key of every committed message against the items (RocketMQ's own index, with no
such file, may lag behind its commit log, so it is not held to it). A store whose messageIndex.json
says the index is on but has no index/ is missing it. Keys found per segment with the append's C
key finder, not record by record.

A healthy index is told in one C pass per segment (store.index.check records_match: the walk, each
record's keys and the items, read where the files hold them (store.tools.index_items), side by
side); when anything differs, the numpy checks below find and word the problems, so the report is
the same either way (tests run the numpy checks on healthy stores too: tests/oracles/index_check.py)."""

from __future__ import annotations

import numpy as np

from store.errors import IndexFileError
from store.format.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_LENGTH
from store.format.layout import be_ints
from store.scan.walk import walk
from store.index.build import record_keys
from store.index.check import records_match, time_diffs
from store.index.lookup import open_index
from store.index.settings import read_index_settings
from store.read.view import SegmentFile, StoreView, mapped
from store.tools.index_items import CheckedItems, file_items
from store.tools.queues import Problem
from store.tools.verify_behind import hand_back_pages

MAX_REPORTED = 20          # bad items reported one by one per kind; the rest are counted
_PAIR = 1 << 32            # (offset, key hash) pairs as one int64: offset * _PAIR + hash


def index_problems(src: StoreView, data_end: int, hand_back: bool = False) -> tuple[list[Problem], int]:
    """(problems, items checked). ``data_end``: the end of the valid data, which may lie past the
    commit point (store.read.past_commit): items pointing at records up to it are checked against
    them, items past it are problems; keys are held to the items only up to the commit point (a
    broker indexes its records behind its appends). Items below the first segment (retention
    keeps a file until all of it is old) are not checked. ``hand_back``: each segment's pages go
    back to the kernel once it is checked (store.tools.verify_behind, hand_back)."""
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
    items = CheckedItems.none()
    unindexed: list[np.ndarray] = []       # offsets of messages with a key no item holds
    try:
        if service is not None:
            items = file_items(service, low, data_end, out.add)
        for seg in src.segments:
            end = min(seg.size, limit - seg.base_offset)
            pointed = items.count_within(seg.base_offset, seg.end_offset)
            if end <= 0 and not pointed:
                continue
            with mapped(seg) as mv:
                arr = np.frombuffer(mv, dtype=np.uint8)
                if not _all_match(arr, seg, end, items, pointed, covers_all):
                    in_seg = np.flatnonzero((items.phy >= seg.base_offset) & (items.phy < seg.end_offset))
                    unindexed.append(_check_segment(arr, mv, seg, max(end, 0), items, in_seg, covers_all, out))
                del arr
            if hand_back:
                hand_back_pages(seg.path, 0, seg.size)
    finally:
        items.release()         # views of the files' mappings: they go before the files are closed
        if service is not None:
            service.close()
    lost = np.concatenate(unindexed) if unindexed else np.zeros(0, np.int64)
    lost = lost[lost < limit]       # keys of records past the commit point, pointed at by an item
    if service is None and len(lost):
        out.add("indexMissing", int(lost[0]), f"config/messageIndex.json says the index is on, but there is no "
                                              f"index/: {len(lost):,} keys of committed messages are not indexed; "
                                              f"`commitlog reindex {src.root}` builds it")
    elif len(lost):
        for at in lost.tolist():
            out.add("indexKeyMissing", at, "this message has a key (its UNIQ_KEY or a KEYS token) that no index "
                                           f"item holds; `commitlog reindex {src.root}` rebuilds index/")
    return out.problems, items.count


def _all_match(arr: np.ndarray, seg: SegmentFile, end: int, items: CheckedItems, pointed: int,
               covers_all: bool) -> bool:
    """The C pass over a segment of a sound index: True when _check_segment would find nothing."""
    if items.runs is None or not 0 < end <= len(arr):
        return False
    if not pointed and not covers_all:
        return True         # no item to check, no key held to one
    runs = [(r.items, r.begin, r.first) for r in items.within(seg.base_offset, seg.end_offset)]
    return records_match(arr, end, seg.base_offset, covers_all, runs)


def _check_segment(arr: np.ndarray, mv: memoryview, seg: SegmentFile, end: int, items: CheckedItems, in_seg: np.ndarray,
                   covers_all: bool, out: _Problems) -> np.ndarray:
    """The items pointing into ``seg`` against the records there; with ``covers_all``, every key of
    the records in [0, end) against the items: the offsets of the keys no item holds. Each record's
    keys are found once, by the append's C key finder (store.index.build), with its STORETIMESTAMP."""
    base = seg.base_offset
    phy, key_hash = items.phy[in_seg], items.key_hash[in_seg]
    starts, owner = _distinct(phy - base)
    walked = _walked_messages(arr, mv, end) if covers_all and end > 0 else np.zeros(0, np.int64)
    on_walk = np.ones(len(starts), dtype=bool) if np.array_equal(starts, walked) else _lookup(starts, walked)[0]
    ok = on_walk.copy()
    ok[~on_walk] = _record_starts(arr, starts[~on_walk], base)    # past a break the walk stopped at
    for r in np.flatnonzero(~ok).tolist():
        out.add("indexItem", int(starts[r] + base), "an index item points here, but no message record starts here")
    off_walk = starts[ok & ~on_walk]        # without covers_all nothing is walked: every record pointed at
    records = np.concatenate([walked, off_walk]) if len(off_walk) else walked
    keys = record_keys(arr, records, base)
    # (offset, hash) pairs, the keys' and the items': both come nearly in order (records in offset
    # order, items in append order), which the stable sort (a merge sort) runs through quickly
    key_pairs = _pairs(keys.phy_offset, keys.key_hash)
    order = np.argsort(key_pairs, kind="stable")
    key_pairs = key_pairs[order]
    key_ts = keys.store_timestamp[order]
    item_pairs = _pairs(phy, key_hash)
    item_order = np.argsort(item_pairs, kind="stable")
    items_sorted = item_pairs[item_order]
    whole = np.array_equal(items_sorted, key_pairs)    # a healthy index: one item per key, nothing else
    if whole:
        found = np.ones(len(item_pairs), dtype=bool)
        at = np.empty(len(item_pairs), dtype=np.int64)
        at[item_order] = np.arange(len(item_pairs))
    else:
        found, at = _lookup(item_pairs, key_pairs)
    pointed = ok[owner]
    for i in np.flatnonzero(pointed & ~found).tolist():
        out.add("indexKey", int(phy[i]), f"an index item with keyHash {int(key_hash[i])} points at this message, "
                                         f"but none of its keys hashes to it")
    _check_times(key_ts[at[found]], found, items, in_seg, out)
    if not covers_all or end <= 0 or whole:
        return np.zeros(0, np.int64)
    held, _ = _lookup(key_pairs, items_sorted)
    return np.sort(key_pairs[~held] // _PAIR)


def _pairs(phy: np.ndarray, key_hash: np.ndarray) -> np.ndarray:
    """(offset, key hash) as one int64 each, ordered by offset, then by the hash's 32 bits."""
    out = np.left_shift(np.asarray(phy, dtype=np.int64), 32)
    out |= np.asarray(key_hash).astype(np.uint32)
    return out


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True), without its sort when ``values`` ascend already
    (a healthy index's items do, file after file)."""
    if not len(values) or not bool((values[1:] >= values[:-1]).all()):
        return np.unique(values, return_inverse=True)
    new = np.empty(len(values), dtype=bool)
    new[0] = True
    np.not_equal(values[1:], values[:-1], out=new[1:])
    return values[new], np.cumsum(new) - 1


def _walked_messages(arr: np.ndarray, mv: memoryview, end: int) -> np.ndarray:
    """The message records of [0, end) of the segment, walked along TOTALSIZE from its start."""
    walked, _, _ = walk(arr, 0, end, end)
    magic = be_ints(arr, walked + 4, 4) & 0xFFFFFFFF
    return walked[(magic == MESSAGE_MAGIC_CODE) | (magic == MESSAGE_MAGIC_CODE_V2)]


def _record_starts(arr: np.ndarray, starts: np.ndarray, base: int) -> np.ndarray:
    """Which of ``starts`` (positions in the segment) hold a whole message record that says it is there."""
    fits = starts + MIN_RECORD_LENGTH <= len(arr)
    at = np.where(fits, starts, 0)
    magic = be_ints(arr, at + 4, 4) & 0xFFFFFFFF
    sizes = be_ints(arr, at, 4)
    ok = fits & np.isin(magic, [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]) & (sizes >= MIN_RECORD_LENGTH)
    ok &= at + sizes <= len(arr)
    return ok & (be_ints(arr, at + 28, 8) == starts + base)


def _check_times(store_ts: np.ndarray, found: np.ndarray, items: CheckedItems, in_seg: np.ndarray,
                 out: _Problems) -> None:
    """Each item's timeDiff is its record's store time (``store_ts``, one per ``found`` item) less
    its file's begin timestamp (the first item of a file is measured from the file before, which
    retention may have deleted: not checked)."""
    which = in_seg[found]
    check = ~items.first[which]
    which, store_ts = which[check], store_ts[check]
    want = time_diffs(store_ts, items.begin[which])
    bad = np.flatnonzero(want != items.time_diff[which])
    for i in bad.tolist():
        out.add("indexTime", int(items.phy[which[i]]), f"an index item of this message has timeDiff "
                                                       f"{int(items.time_diff[which[i]])}, but the message was stored "
                                                       f"{int(want[i])} s after its file's begin timestamp")


def _lookup(values: np.ndarray, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which ``values`` are in ``pool`` (sorted), and where."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool), np.zeros(len(values), dtype=np.int64)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    return pool[at] == values, at


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
