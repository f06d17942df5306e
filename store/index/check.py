"""An IndexFile checked against itself (../shared/golden/INDEX_FORMAT_NOTES.md): the header against
the items it counts, every hash slot against the chain it heads, every item's prevIndex against the
item before it in its slot. Cheap checks (header_faults: the header and the slot table, no sort) are
what a lookup runs before it answers; verify runs them all (structure_faults).

A writer may be putting keys while these read: it writes items, then slots, then the header, so
the newest file can look wrong for an instant. A fault of the newest file counts only if the file
still shows it once its header stays the same between two reads (settled).

A healthy index is told in C (_index_check.c, built by setup.py: chains_hold, records_match), which
only says whether all holds; whatever does not hold is found and worded by the numpy checks here
and in store.tools.verify_index (a production path: the C does not word faults). Tests hold the C
to the numpy oracles of tests/oracles/index_check.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from store.format.constants import INDEX_INVALID_INDEX
from store.index import _index_check
from store.index.file import IndexFile, IndexHeader
from store.index.service import IndexService

_INT_MAX = 0x7FFFFFFF
LISTED = 3                   # faults of one kind described one by one per file; the rest are counted
_SETTLE_TRIES, _SETTLE_PAUSE_S = 5, 0.02


@dataclass(frozen=True)
class IndexFault:
    kind: str                # indexHeader | indexSlot | indexChain | indexItem
    file: str
    offset: int              # the commit-log offset it concerns (0: none in particular)
    detail: str

    def __str__(self) -> str:
        return f"{self.file}: {self.detail}"


def time_diffs(store_timestamps: np.ndarray, begin_timestamps: np.ndarray) -> np.ndarray:
    """IndexFile.putKey's timeDiff: whole seconds since the file's begin timestamp (0 while it has
    none), truncated as Java's long division, clamped to [0, Integer.MAX_VALUE]."""
    ts = np.asarray(store_timestamps, dtype=np.int64)
    begin = np.asarray(begin_timestamps, dtype=np.int64)
    # in place, one array: verify takes it over millions of items
    diff = np.empty(np.broadcast(ts, begin).shape, dtype=np.int64)
    np.subtract(ts, begin, out=diff)
    diff[(ts < begin) | (begin <= 0)] = 0           # before zeroing, a difference may have wrapped
    diff //= 1000
    return np.minimum(diff, _INT_MAX, out=diff)


def header_faults(f: IndexFile) -> list[IndexFault]:
    """The header against the items and the slot table: the item count in range, the begin and end
    phyOffset those of the first and last item, the end timestamp that of the last item's timeDiff,
    hashSlotCount the slots in use, and no slot pointing outside the items."""
    h = f.read_header()
    out = _Faults(f.path.name)
    count = h.index_count
    if not 1 <= count <= f.max_index_num:
        out.add("indexHeader", 0, f"indexCount {count} is outside 1..maxIndexNum {f.max_index_num}")
        return out.faults
    slots = f.slots()
    outside = np.flatnonzero((slots < INDEX_INVALID_INDEX) | (slots >= count))
    for s in outside[:LISTED].tolist():
        out.add("indexSlot", 0, f"hash slot {s} holds item {int(slots[s])}, but the file has items 1..{count - 1}")
    out.more("indexSlot", len(outside), "hash slots point outside the items")
    used = int(np.count_nonzero(slots))
    if used != h.hash_slot_count:
        out.add("indexHeader", 0, f"hashSlotCount {h.hash_slot_count}, but {used} hash slots are in use")
    if count == 1:
        return out.faults
    items = f.items()
    first, last = items[0], items[-1]
    if int(first["phy_offset"]) != h.begin_phy_offset:
        out.add("indexHeader", int(first["phy_offset"]), f"beginPhyOffset {h.begin_phy_offset}, but the first "
                                                         f"item's phyOffset is {int(first['phy_offset'])}")
    if int(last["phy_offset"]) != h.end_phy_offset:
        out.add("indexHeader", int(last["phy_offset"]), f"endPhyOffset {h.end_phy_offset}, but the last "
                                                        f"item's phyOffset is {int(last['phy_offset'])}")
    if count > 2:      # the first item's timeDiff is measured from the file before
        want = int(time_diffs(np.array([h.end_timestamp]), np.array([h.begin_timestamp]))[0])
        if int(last["time_diff"]) != want:
            out.add("indexHeader", int(last["phy_offset"]),
                    f"beginTimestamp {h.begin_timestamp} and endTimestamp {h.end_timestamp} make the last item's "
                    f"timeDiff {want}, but it is {int(last['time_diff'])}")
    del items, first, last       # views of the mapping
    return out.faults


def structure_faults(f: IndexFile) -> list[IndexFault]:
    """header_faults, then every slot against the newest item of its chain, every item's prevIndex
    against the item before it in its slot (0 for the first), key hashes non-negative and phyOffsets
    in commit-log order."""
    out = _Faults(f.path.name, header_faults(f))
    if any(x.kind == "indexHeader" and "indexCount" in x.detail for x in out.faults):
        return out.faults       # the items cannot be told from the rest
    items = f.items()
    if _index_check.chains_hold(items, f.slots(), f.max_hash_slot_num):
        return out.faults       # all of the below holds: nothing to add
    _item_faults(f, items, out)
    return out.faults


def _item_faults(f: IndexFile, items: np.ndarray, out: _Faults) -> None:
    """What the C pass found does not hold, found and worded: each fault of the items and slots."""
    n = len(items)
    hashes = items["key_hash"].astype(np.int64)
    phy = items["phy_offset"].astype(np.int64)
    prev = items["prev_index"].astype(np.int64)
    del items
    numbers = np.arange(1, n + 1, dtype=np.int64)
    negative = np.flatnonzero(hashes < 0)
    for i in negative[:LISTED].tolist():
        out.add("indexItem", int(phy[i]), f"item {i + 1}: keyHash {hashes[i]} is negative")
    out.more("indexItem", len(negative), "items have a negative keyHash")
    back = np.flatnonzero(np.diff(phy) < 0) + 1
    for i in back[:LISTED].tolist():
        out.add("indexItem", int(phy[i]), f"item {i + 1}: phyOffset {phy[i]} is below item {i}'s {phy[i - 1]}")
    out.more("indexItem", len(back), "items go back in the commit log")
    slot_of = hashes % f.max_hash_slot_num
    slots = f.slots().astype(np.int64)
    # each item's prevIndex and each slot against what they should be
    order = np.argsort(slot_of, kind="stable")            # by slot, each slot's items in put order
    in_slot = slot_of[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = in_slot[1:] != in_slot[:-1]
    want_prev = np.empty(n, dtype=np.int64)
    want_prev[order] = np.where(starts, INDEX_INVALID_INDEX, np.concatenate([[0], numbers[order][:-1]]))
    wrong = np.flatnonzero(want_prev != prev)
    for i in wrong[:LISTED].tolist():
        out.add("indexChain", int(phy[i]), f"item {i + 1}: prevIndex {prev[i]}, but the item before it in hash "
                                           f"slot {slot_of[i]} is {want_prev[i]}")
    out.more("indexChain", len(wrong), "items have a wrong prevIndex")
    ends = np.ones(n, dtype=bool)
    ends[:-1] = in_slot[1:] != in_slot[:-1]
    want_slots = np.zeros(f.max_hash_slot_num, dtype=np.int64)
    want_slots[in_slot[ends]] = numbers[order][ends]
    wrong = np.flatnonzero(want_slots != slots)
    for s in wrong[:LISTED].tolist():
        out.add("indexSlot", 0, f"hash slot {s} holds item {slots[s]}, but the newest item of its chain is "
                                f"{want_slots[s]}")
    out.more("indexSlot", len(wrong), "hash slots do not head their chain")


def item_columns(items: np.ndarray, low: int, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """An IndexFile's items (IndexFile.items) as columns: phyOffset int64, keyHash and timeDiff
    int32, and how many items point outside [low, limit)."""
    n = len(items)
    phy, key_hash, time_diff = np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int32)
    outside = _index_check.item_columns(items, low, limit, phy, key_hash, time_diff)
    return phy, key_hash, time_diff, outside


def records_match(segment: np.ndarray, end: int, base: int, strict: bool,
                  runs: list[tuple[np.ndarray, int, bool]]) -> bool:
    """Whether the items pointing into a segment (``segment``, its bytes, at offset ``base``) are
    its message records' keys in [0, end), in order: each item's phyOffset and keyHash one key's, its
    timeDiff its record's STORETIMESTAMP less its file's beginTimestamp (but for a file's first item,
    measured from the file before); ``strict`` (the index covers the store): every key with its
    item. ``runs``: (items, beginTimestamp, first) in file order, items a run of an IndexFile's
    items (IndexFile.items), first whether it starts with its file's first item. False says only
    that something differs: the numpy checks tell."""
    return bool(_index_check.records_match(segment, end, base, strict, runs))


def chain_faults(f: IndexFile, key_hash: int) -> list[IndexFault]:
    """The chain a lookup of ``key_hash`` walks: every item on it belongs to its slot and points
    further back."""
    h = f.read_header()
    slot = key_hash % f.max_hash_slot_num
    pos = int(f.slots()[slot])
    out = _Faults(f.path.name)
    for _ in range(max(h.index_count, 0)):
        if pos <= INDEX_INVALID_INDEX or pos >= h.index_count:
            break
        item = f.items()[pos - 1]
        item_slot = int(item["key_hash"]) % f.max_hash_slot_num
        prev = int(item["prev_index"])
        if item_slot != slot or prev >= pos or prev < INDEX_INVALID_INDEX:
            out.add("indexChain", int(item["phy_offset"]), f"item {pos} on the chain of hash slot {slot} belongs "
                                                           f"to slot {item_slot} or points forward (prevIndex {prev})")
            break
        pos = prev
    return out.faults


def settled(f: IndexFile, check: Callable[[IndexFile], list[IndexFault]], live: bool) -> list[IndexFault]:
    """``check(f)``; for a file a writer may be filling (``live``), only faults that remain once its
    header holds still between two reads."""
    faults = check(f)
    for _ in range(_SETTLE_TRIES if live else 0):
        if not faults:
            break
        before = f.read_header()
        time.sleep(_SETTLE_PAUSE_S)
        again = check(f)
        if f.read_header() == before:
            return again
        faults = again
    return faults


def lookup_damage(service: IndexService, key_hash: int) -> IndexFault | None:
    """What makes a lookup of ``key_hash`` untrustworthy: the first fault of the cheap checks and of
    the chain it walks, in any file (None: none)."""
    for i, f in enumerate(service.files):
        live = i == len(service.files) - 1
        faults = settled(f, lambda g: header_faults(g) or chain_faults(g, key_hash), live)
        if faults:
            return faults[0]
    return None


def order_faults(headers: list[tuple[str, IndexHeader]]) -> list[IndexFault]:
    """Files in creation order cover the commit log in order: none starts before the one before ends."""
    out = []
    filled = [(name, h) for name, h in headers if h.index_count > 1]
    for (_, a), (name, b) in zip(filled, filled[1:]):
        if b.begin_phy_offset < a.end_phy_offset:
            out.append(IndexFault("indexHeader", name, b.begin_phy_offset,
                                  f"beginPhyOffset {b.begin_phy_offset} is below the file before's endPhyOffset "
                                  f"{a.end_phy_offset}"))
    return out


class _Faults:
    def __init__(self, name: str, faults: list[IndexFault] | None = None) -> None:
        self.name = name
        self.faults = list(faults or [])

    def add(self, kind: str, offset: int, detail: str) -> None:
        self.faults.append(IndexFault(kind, self.name, offset, detail))

    def more(self, kind: str, total: int, what: str) -> None:
        if total > LISTED:
            self.add(kind, 0, f"{total} {what} in all")
