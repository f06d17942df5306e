"""The test oracles of verify's C checks of a healthy index (store/index/_index_check.c): whether an
IndexFile's chains hold, and its items as columns, with numpy. NumpyAlone stands in for the C module
so that a test can run verify's numpy checks on everything (monkeypatched over
store.index.check._index_check): the report must not change."""

from __future__ import annotations

import numpy as np

from store.format.constants import INDEX_INVALID_INDEX


def chains_hold(items: np.ndarray, slots: np.ndarray, max_hash_slot_num: int) -> bool:
    """_index_check.chains_hold: key hashes non-negative, phyOffsets ascending, and the chains whole."""
    hashes = items["key_hash"].astype(np.int64)
    phy = items["phy_offset"].astype(np.int64)
    if np.any(hashes < 0) or np.any(np.diff(phy) < 0):
        return False
    return _chains_hold(hashes % max_hash_slot_num, items["prev_index"].astype(np.int64), slots.astype(np.int64))


def _chains_hold(slot_of: np.ndarray, prev: np.ndarray, slots: np.ndarray) -> bool:
    """Every slot's items are one chain, newest first, headed by the slot, without sorting: each
    prevIndex points back to an item of the same slot, no item is pointed at twice, and there are as
    many chain ends (prevIndex 0) as slots in use. Chains are then disjoint runs going back, one per
    slot, through all of its items: each slot's items in put order. Their heads (items nothing
    points at) must be what the slots hold."""
    n = len(prev)
    if np.any((prev < INDEX_INVALID_INDEX) | (prev >= np.arange(1, n + 1))):
        return False
    linked = prev > INDEX_INVALID_INDEX
    back = prev[linked]
    if np.any(slot_of[back - 1] != slot_of[linked]):
        return False
    pointed = np.bincount(back, minlength=n + 1)
    if pointed.max(initial=0) > 1:
        return False
    if n - len(back) != np.count_nonzero(np.bincount(slot_of, minlength=len(slots))):
        return False
    heads = np.flatnonzero(pointed[1:] == 0) + 1
    want = np.zeros(len(slots), dtype=np.int64)
    want[slot_of[heads - 1]] = heads
    return bool(np.array_equal(want, slots))


def item_columns(items: np.ndarray, low: int, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """store.index.check.item_columns with numpy."""
    phy = items["phy_offset"].astype(np.int64)
    return (phy, items["key_hash"].astype(np.int32), items["time_diff"].astype(np.int32),
            int(np.count_nonzero((phy < low) | (phy >= limit))))


class NumpyAlone:
    """In place of the _index_check module: nothing is told healthy in C, columns come from numpy."""

    @staticmethod
    def chains_hold(*_: object) -> bool:
        return False

    @staticmethod
    def records_match(*_: object) -> bool:
        return False

    @staticmethod
    def item_columns(items: np.ndarray, low: int, limit: int, phy: np.ndarray, key_hash: np.ndarray,
                     time_diff: np.ndarray) -> int:
        cols = item_columns(items, low, limit)
        phy[:], key_hash[:], time_diff[:] = cols[:3]
        return cols[3]
