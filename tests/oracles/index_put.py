"""The test oracle of the index's putKey (store/index/_index_put.h, IndexFile.put): the same items,
slots and header with numpy, a batch's chains linked at once. Called as put(index_file, ...), or
patched over IndexFile.put to build a whole store's index the numpy way."""

from __future__ import annotations

import numpy as np

from store.format.constants import INDEX_INVALID_INDEX
from store.index.file import IndexFile
from store.index.service import IndexService
from tests.oracles import index_keys

_INT_MAX = 0x7FFFFFFF


def put(self: IndexFile, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
    """IndexFile.put with numpy: the chains of the batch linked at once (each key's previous item is
    the one before it in its slot, within the batch or from the slot)."""
    key_hashes = np.asarray(key_hashes, dtype=np.int64)
    phy = np.asarray(phy_offsets, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    n = len(key_hashes)
    if n == 0:
        return
    if n > self.room:
        raise ValueError(f"{n} keys do not fit index file {self.path.name} ({self.room} items left)")
    h = self.header
    first_item = h.index_count
    numbers = np.arange(first_item, first_item + n, dtype=np.int64)
    slots = key_hashes % self.max_hash_slot_num
    # timeDiff against the begin timestamp in force at each put: the first put of a file sees
    # the previous file's (0 for the very first file), the later ones the first put's.
    begin = np.full(n, h.begin_timestamp if first_item > 1 else ts[0], dtype=np.int64)
    if first_item == 1:
        begin[0] = h.begin_timestamp
    diff = np.where(begin > 0, (ts - begin) // 1000, 0)
    diff = np.where(ts - begin < 0, 0, diff)           # Java's long division truncates; clamp at 0
    diff = np.minimum(diff, _INT_MAX)
    # prevIndex: the item before in the same slot, from this batch or from the slot
    order = np.lexsort((numbers, slots))
    sorted_slots = slots[order]
    starts_group = np.ones(n, dtype=bool)
    starts_group[1:] = sorted_slots[1:] != sorted_slots[:-1]
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[1:] = numbers[order][:-1]
    current = self._slots[sorted_slots[starts_group]].astype(np.int64)
    current[(current <= INDEX_INVALID_INDEX) | (current > first_item)] = INDEX_INVALID_INDEX
    prev_sorted[starts_group] = current
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted
    items = self._items[first_item:first_item + n]
    items["key_hash"] = key_hashes
    items["phy_offset"] = phy
    items["time_diff"] = diff
    items["prev_index"] = prev
    if first_item == 1:
        h.begin_phy_offset, h.begin_timestamp = int(phy[0]), int(ts[0])
    h.hash_slot_count += int((current == INDEX_INVALID_INDEX).sum())
    h.index_count += n
    h.end_phy_offset, h.end_timestamp = int(phy[-1]), int(ts[-1])
    # The header before the slots: a process killed between the two leaves slots that point at
    # counted items only. (The other way round, a slot past the count reads as empty to a
    # RocketMQ broker, which keeps the file after a crash: the chain's older keys would be lost.)
    self._write_header()
    ends_group = np.ones(n, dtype=bool)
    ends_group[:-1] = sorted_slots[1:] != sorted_slots[:-1]
    self._slots[sorted_slots[ends_group]] = numbers[order][ends_group]


def put_records(self: IndexService, buf: np.ndarray, starts: np.ndarray, base: int) -> int:
    """IndexService.put_records the numpy way: the keys found by the oracle, put in order."""
    keys = index_keys.record_keys(buf, starts, base)
    self.put_hashes(keys.key_hash, keys.phy_offset, keys.store_timestamp)
    return len(keys)


def put_shipped(self: IndexService, key_hashes: np.ndarray, key_counts: np.ndarray, phy_offsets: np.ndarray,
                store_timestamp: int) -> int:
    """IndexService.put_shipped the numpy way: record i's keys at its offset, all at one timestamp."""
    counts = np.asarray(key_counts, dtype=np.int64)
    if len(counts) and (not self.files or self.files[-1].is_full):
        self._new_file()        # as the C way: a batch of records has a file, keys or none
        self._dirty.add(len(self.files) - 1)
    self.put_hashes(key_hashes, np.repeat(np.asarray(phy_offsets, dtype=np.int64), counts),
                    np.full(len(key_hashes), store_timestamp, dtype=np.int64))
    return len(key_hashes)
