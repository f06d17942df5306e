"""verify's look at index/: every item of every IndexFile must point at a committed message
record whose keys (UNIQ_KEY, KEYS tokens) include one with the item's hash, and each chain must
run backwards. The key check runs inside each segment's parallel piece, a window at a time while
its records are in cache (PieceIndex, called by store.tools.verify_segment); this module's
index_problems checks the chains, the items past the commit point and any item no piece covered."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.errors import IndexFileError
from store.format.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_LENGTH
from store.format.fields import be_ints
from store.index.build import record_keys
from store.index.lookup import open_index
from store.log.source import Source, mapped
from store.tools.queues import Problem

MAX_REPORTED = 20          # bad items reported one by one per kind; the rest are counted
INDEX_KINDS = ("indexChain", "indexPastCommit", "indexItem", "indexKey", "index")


@dataclass(frozen=True)
class PieceIndex:
    """What a piece of verify needs to check the index items of its records (it opens index/
    itself, in its own process): the store, and the items it leaves to index_problems (below
    ``low``: older than the first segment; at or past ``limit``: past the commit point)."""

    root: Path
    low: int
    limit: int
    unsorted: frozenset[str] = frozenset()     # files whose offsets do not ascend: index_problems' own

    @contextmanager
    def checker(self) -> Iterator[ItemChecker | None]:
        try:
            service = open_index(self.root)
        except IndexFileError:
            service = None                        # index_problems reports it
        if service is None:
            yield None
            return
        try:
            checker = ItemChecker(self, [f.items() for f in service.files if f.path.name not in self.unsorted])
            yield checker
            checker.items = []                    # views of the mappings: gone before the files close
        finally:
            service.close()


class ItemChecker:
    def __init__(self, piece: PieceIndex, items: list[np.ndarray]) -> None:
        self.piece = piece
        self.items = items

    def check(self, arr: np.ndarray, base: int, lo: int, hi: int, out: Problems) -> int:
        """The items whose phyOffset is in [lo, hi) (global; the records there lie in ``arr``, the
        segment from offset ``base``), against the records they point at. Returns how many."""
        lo, hi = max(lo, self.piece.low), min(hi, self.piece.limit)
        if lo >= hi:
            return 0
        phys, hashes = [], []
        for items in self.items:
            phy = items["phy_offset"]       # ascending in a file: bisect reads a few of them
            a, b = bisect.bisect_left(phy, lo), bisect.bisect_left(phy, hi)
            if b > a:
                phys.append(phy[a:b].astype(np.int64))
                hashes.append(items["key_hash"][a:b].astype(np.int64))
        if not phys:
            return 0
        phy, key_hash = np.concatenate(phys), np.concatenate(hashes)
        check_items(arr, base, phy, key_hash, out)
        return len(phy)


def index_problems(src: Source, data_end: int, covered: list[tuple[int, int]] | None = None
                   ) -> tuple[list[Problem], int]:
    """(problems, items checked) of what the pieces did not check: every chain, the items past
    the commit point, and the keys of items outside ``covered`` (the [start, end) offset ranges
    whose items the pieces checked). Items below the first segment (retention keeps a file until
    all of it is old) are not checked."""
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
    out = Problems()
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
            if covered and bool((np.diff(phy) >= 0).all()):
                for a, b in covered:
                    keep &= (phy < a) | (phy >= b)
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
            check_items(arr, seg.base_offset, phy[in_seg], key_hash[in_seg], out)
            del arr
    return out.problems, len(phy)


def piece_index(src: Source) -> PieceIndex | None:
    """What the pieces get to check the keys of their items (None: index_problems checks them all,
    as it does for a store without a commit point)."""
    if src.root is None or src.committed_offset is None:
        return None
    try:
        service = open_index(src.root)
    except IndexFileError:
        return None
    if service is None:
        return None
    try:
        unsorted = frozenset(f.path.name for f in service.files
                             if not bool((np.diff(f.items()["phy_offset"].astype(np.int64)) >= 0).all()))
    finally:
        service.close()
    low = src.segments[0].base_offset if src.segments else 0
    return PieceIndex(Path(src.root), low, src.committed_offset, unsorted)


def check_items(arr: np.ndarray, base: int, phy: np.ndarray, key_hash: np.ndarray, out: Problems) -> None:
    """Items (phyOffset, keyHash) of the segment ``arr`` (from offset ``base``) against the records
    they point at: a message record must start there, and one of its keys must hash to the item's."""
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
    keys = record_keys(arr, starts[good])
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


class Problems:
    """Index problems, MAX_REPORTED of each kind one by one, then one line saying there are more."""

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


def capped(problems: list[Problem]) -> list[Problem]:
    """The index problems of several pieces, as one Problems would have kept them (in offset order)."""
    out = Problems()
    # a piece's "more" line comes after MAX_REPORTED of its own: here too it is past the cap
    for p in sorted(problems, key=lambda p: (p.offset, p.detail.startswith("more "))):
        out.add(p.kind, p.offset, p.detail)
    return out.problems
