"""The items verify checks against the commit log (store.tools.verify_index): every IndexFile checked
against itself first (store.index.check), then its items within the checked range. While every file
is sound (no fault: its items ascend, and each file starts where the one before ends) they stay as
the files hold them, runs of each mapping, which the C pass reads as they are; numpy columns, side
by side, are made only when the numpy checks ask for them."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from store.index.check import item_columns, order_faults, settled, structure_faults
from store.index.file import IndexFile
from store.index.service import IndexService

Report = Callable[[str, int, str], None]      # (kind, offset, detail)
_INT64_MAX = (1 << 63) - 1


@dataclass
class ItemRun:
    """Items of one sound IndexFile, as it holds them (a view of its mapping)."""

    items: np.ndarray           # IndexFile.items()[a:b]
    begin: int                  # the file's beginTimestamp
    first: bool                 # items[0] is the file's first item (its timeDiff is from the file before)

    def within(self, lo: int, hi: int) -> ItemRun | None:
        """The run's items with a phyOffset in [lo, hi) (they ascend), None if none."""
        phy = self.items["phy_offset"]
        if not len(phy) or phy[-1] < lo or phy[0] >= hi:
            return None         # a store of many segments and files: most runs are elsewhere
        a, b = bisect_left(phy, lo), bisect_left(phy, hi)
        return ItemRun(self.items[a:b], self.begin, self.first and a == 0) if b > a else None

    def columns(self) -> tuple[np.ndarray, ...]:
        phy, key_hash, time_diff, _ = item_columns(self.items, 0, _INT64_MAX)
        first = np.zeros(len(phy), dtype=bool)
        first[:1] = self.first
        return phy, key_hash, time_diff, np.full(len(phy), self.begin, dtype=np.int64), first


class CheckedItems:
    """The items of every file within the checked range, in file order: ``runs`` while every file is
    sound (None otherwise), and as columns (phy int64, key_hash and time_diff int32, begin: each
    item's file's beginTimestamp, first: the first item of its file) once asked for."""

    def __init__(self, runs: list[ItemRun] | None, columns: tuple[np.ndarray, ...] | None = None) -> None:
        self.runs = runs
        self._columns = columns
        self.count = sum(len(r.items) for r in runs) if runs is not None else len(columns[0]) if columns else 0

    @classmethod
    def none(cls) -> CheckedItems:
        return cls(None, _joined([]))

    def within(self, lo: int, hi: int) -> list[ItemRun]:
        """The runs of the items with a phyOffset in [lo, hi) (only while every file is sound)."""
        assert self.runs is not None
        found = (r.within(lo, hi) for r in self.runs)
        return [r for r in found if r is not None]

    def count_within(self, lo: int, hi: int) -> int:
        if self.runs is not None:
            return sum(len(r.items) for r in self.within(lo, hi))
        return int(np.count_nonzero((self.phy >= lo) & (self.phy < hi)))

    def _column(self, k: int) -> np.ndarray:
        if self._columns is None:
            assert self.runs is not None
            self._columns = _joined([r.columns() for r in self.runs])
        return self._columns[k]

    @property
    def phy(self) -> np.ndarray:
        return self._column(0)

    @property
    def key_hash(self) -> np.ndarray:
        return self._column(1)

    @property
    def time_diff(self) -> np.ndarray:
        return self._column(2)

    @property
    def begin(self) -> np.ndarray:
        return self._column(3)

    @property
    def first(self) -> np.ndarray:
        return self._column(4)

    def release(self) -> None:
        """Drop the views of the files' mappings: they must go before the files are closed."""
        self.runs = None


def file_items(service: IndexService, low: int, limit: int, report: Report) -> CheckedItems:
    """Each file's faults (store.index.check structure_faults, settled for the newest one), items
    pointing past ``limit`` (the end of the valid data), and the files' order reported; the items in
    [low, limit)."""
    parts: list[ItemRun | tuple[np.ndarray, ...]] = []
    files = service.files
    try:
        for i, f in enumerate(files):
            faults = settled(f, structure_faults, live=i == len(files) - 1)
            for fault in faults:
                report(fault.kind, fault.offset, str(fault))
            part = _file_part(f, low, limit, report, sound=not faults)
            if part is not None:
                parts.append(part)
    except BaseException:
        parts.clear()           # views of the mappings, which are closed next
        raise
    in_order = True
    for fault in order_faults([(f.path.name, f.read_header()) for f in files]):
        report(fault.kind, fault.offset, str(fault))
        in_order = False
    runs = [p for p in parts if isinstance(p, ItemRun)]
    if in_order and len(runs) == len(parts):
        return CheckedItems(runs)
    if not parts:
        return CheckedItems.none()
    return CheckedItems(None, _joined([p.columns() if isinstance(p, ItemRun) else p for p in parts]))


def _file_part(f: IndexFile, low: int, limit: int, report: Report,
               sound: bool) -> ItemRun | tuple[np.ndarray, ...] | None:
    """The file's items in [low, limit), each one past ``limit`` reported: a run of its mapping when
    the file is ``sound`` (its items ascend), else columns. None: its items cannot be told."""
    h = f.read_header()
    if not 1 <= h.index_count <= f.max_index_num:
        return None
    items = f.items()
    if sound:
        phy = items["phy_offset"]
        a, b = bisect_left(phy, low), bisect_left(phy, limit)
        _report_past(report, f, phy, range(b, len(items)), limit)
        return ItemRun(items[a:b], h.begin_timestamp, a == 0)
    phy, key_hash, time_diff, outside = item_columns(items, low, limit)
    del items              # a view of the mapping: it must go before the file is closed
    first = np.zeros(len(phy), dtype=bool)
    first[:1] = True
    if outside:            # retention, or a crash, cut some
        _report_past(report, f, phy, np.flatnonzero(phy >= limit).tolist(), limit)
        keep = (phy >= low) & (phy < limit)
        phy, key_hash, time_diff, first = phy[keep], key_hash[keep], time_diff[keep], first[keep]
    return phy, key_hash, time_diff, np.full(len(phy), h.begin_timestamp, dtype=np.int64), first


def _report_past(report: Report, f: IndexFile, phy: np.ndarray, past: Iterable[int], limit: int) -> None:
    for j in past:
        report("indexPastCommit", int(phy[j]), f"{f.path.name} item {j + 1} points past the end of the valid "
                                               f"data {limit}")


def _joined(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    if not parts:
        return (np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64),
                np.zeros(0, bool))
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(5))
