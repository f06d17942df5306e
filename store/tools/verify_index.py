"""verify's look at index/: every item of every IndexFile must point at a committed message
record whose keys (UNIQ_KEY, KEYS tokens) include one with the item's hash, and each chain must
run backwards; found per segment with the append's key finder, not record by record."""

from __future__ import annotations

import numpy as np

from store.errors import IndexFileError
from store.format.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_LENGTH
from store.format.fields import be_ints, record_fields
from store.index.batch_keys import batch_keys
from store.index.lookup import open_index
from store.log.source import Source, mapped
from store.tools.queues import Problem

MAX_REPORTED = 20          # bad items reported one by one per kind; the rest are counted


def index_problems(src: Source, data_end: int) -> tuple[list[Problem], int]:
    """(problems, items checked). Items below the first segment (retention keeps a file until all
    of it is old) are not checked."""
    if src.root is None:
        return [], 0
    try:
        service = open_index(src.root)
    except IndexFileError as e:
        return [Problem(0, "index", str(e))], 0
    if service is None:
        return [], 0
    limit = src.committed_offset if src.committed_offset is not None else data_end
    low = src.segments[0].base_offset if src.segments else 0
    out = _Problems()
    phys, hashes = [], []
    try:
        for f in service.files:
            items = f.items()
            n = len(items)
            number = np.arange(1, n + 1)
            prev = items["prev_index"].astype(np.int64)
            phy = items["phy_offset"].astype(np.int64)
            for i in np.flatnonzero((prev < 0) | (prev >= number)).tolist():
                out.add("indexChain", int(phy[i]),
                        f"{f.path.name} item {i + 1}: prevIndex {prev[i]} does not point back")
            for i in np.flatnonzero(phy >= limit).tolist():
                out.add("indexPastCommit", int(phy[i]), f"{f.path.name} item {i + 1} points past the committed "
                                                        f"end {limit}")
            keep = (phy >= low) & (phy < limit)
            phys.append(phy[keep])
            hashes.append(items["key_hash"].astype(np.int64)[keep])
            del items              # a view of the mapping: it must go before the file is closed
    finally:
        service.close()
    if not phys:
        return out.problems, 0
    phy, key_hash = np.concatenate(phys), np.concatenate(hashes)
    for seg in src.segments:
        in_seg = np.flatnonzero((phy >= seg.base_offset) & (phy < seg.end_offset))
        if not len(in_seg):
            continue
        with mapped(seg) as mv:
            arr = np.frombuffer(mv, dtype=np.uint8)
            _check_segment(arr, seg.base_offset, phy[in_seg], key_hash[in_seg], out)
            del arr
    return out.problems, len(phy)


def _check_segment(arr: np.ndarray, base: int, phy: np.ndarray, key_hash: np.ndarray, out: _Problems) -> None:
    starts, owner = np.unique(phy - base, return_inverse=True)
    fits = starts + MIN_RECORD_LENGTH <= len(arr)
    ok = fits.copy()
    at = np.where(fits, starts, 0)
    magic = be_ints(arr, at + 4, 4) & 0xFFFFFFFF
    sizes = be_ints(arr, at, 4)
    ok &= np.isin(magic, [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]) & (sizes >= MIN_RECORD_LENGTH)
    ok &= at + sizes <= len(arr)
    ok &= be_ints(arr, at + 28, 8) == starts + base
    for r in np.flatnonzero(~ok).tolist():
        out.add("indexItem", int(starts[r] + base), "an index item points here, but no message record starts here")
    good = np.flatnonzero(ok)
    fields = record_fields(arr, starts[good], sizes[good])
    keys = batch_keys(arr, fields)
    row_of = np.full(len(starts), -1, dtype=np.int64)
    row_of[good] = np.arange(len(good))
    # an item is right when its record has a key with its hash: compare (record, hash) pairs, by
    # sorting and searching (numpy's hashing unique/isin cost several times more on millions)
    have = np.sort(keys.record * (1 << 32) + (keys.key_hash.astype(np.int64) & 0xFFFFFFFF))
    rows = row_of[owner]
    pairs = rows * (1 << 32) + (key_hash & 0xFFFFFFFF)
    found = np.zeros(len(pairs), dtype=bool)
    if len(have):
        found = have[np.minimum(np.searchsorted(have, pairs), len(have) - 1)] == pairs
    wrong = np.flatnonzero((rows >= 0) & ~found)
    for i in wrong.tolist():
        out.add("indexKey", int(phy[i]), f"an index item with keyHash {int(key_hash[i])} points at this message, "
                                         f"but none of its keys hashes to it")


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
