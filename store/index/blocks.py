"""The disk blocks an IndexFile's writer has reserved, and reserving more before a put lands there.

Keys land anywhere in the slot table (20 MB at the default geometry); items follow in order. A store
of thousands of queues with a message each puts a few thousand keys into its first file, and
RocketMQ's broker, whose mapping is sparse, pays for the pages those keys touched, not for the
table. So a new file starts *sparse*: a page of the slot table is reserved when a key is first
about to land in it (``for_slots``; the C pass stops before such a key: ``reserve_units``), and the
items in steps ahead of the puts (store.space). Once most of the table is reserved the file turns
*dense* (so does one whose items take as much disk as its table: keys that cluster can leave
pages untouched for good): the rest of the table reserved at once, the items to 2 MiB boundaries,
and the mapping asked for 2 MiB pages (keys at random in 4 KiB pages are a TLB miss each, and a
flush cleans the table ten pages at a time, not 4,883; BENCHMARKS.md, "Sizing").

A write through the mapping dirties the whole folio the kernel faulted in, and writing it back takes
blocks for all of it: past what was reserved, which on a full disk is a SIGBUS, not an error. Linux
faults a file in large folios where it reads ahead (ext4 and xfs, 6.x), so a sparse file's mapping is
advised MADV_RANDOM, which keeps its faults to a page; a dense one's reserved ranges end on 2 MiB
boundaries. Turning dense, the pages the file has cached are written and dropped, so that the
kernel maps it again in 2 MiB pages (it keeps a small folio cached once it has one).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from store.format.constants import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_ITEM_SIZE
from store.space import MOST_STEP, data_extents, next_reserved, reserve

UNIT = mmap.PAGESIZE          # a fault's page: the grain of the slot table's reservation
UNIT_SHIFT = UNIT.bit_length() - 1
HUGE_PAGE = 2 << 20
DENSE_SHARE = 7 / 8           # of the table's pages reserved, when the file turns dense
# The items are reserved ahead of the puts in steps from this size (about 3,000 items) doubling up
# to a MiB (store.space) while the file is sparse.
FIRST_ITEMS_STEP = 64 << 10
_MADV_POPULATE_WRITE = 23
_WHAT = "index file"


def _runs(units: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unit numbers as (first, end) runs of consecutive ones."""
    if not len(units):
        return []
    breaks = np.flatnonzero(np.diff(units) != 1) + 1
    starts, ends = units[np.r_[0, breaks]], units[np.r_[breaks - 1, len(units) - 1]] + 1
    return list(zip(starts.tolist(), ends.tolist()))


class IndexBlocks:
    """What of one IndexFile has its blocks: a flag per page of the header and slots (``held``),
    the items from the table's end to ``items_end``; and the mapping's advice to match."""

    def __init__(self, path: Path, max_hash_slot_num: int, size: int, named: Path | None = None) -> None:
        self.path = path            # where it is opened: a new file's temporary name until renamed
        self.named = named or path  # the file's name in messages
        self.slot_num = max_hash_slot_num
        self.size = size
        self.table_end = INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * max_hash_slot_num
        self.held = np.ones(-(-self.table_end // UNIT), dtype=np.uint8)
        self.items_end = size
        self.dense = True
        self.warm_items = False
        self._mm: mmap.mmap | None = None

    @property
    def items_start(self) -> int:
        """Where the items' reservation starts: the page the table ends in."""
        return self.table_end - self.table_end % UNIT

    def held_share(self) -> float:
        return float(self.held.mean())

    # --- a file made, opened again, mapped -----------------------------------------------------
    def start_new(self, fd: int) -> None:
        """A file just created sparse: its header's page and its first items reserved."""
        self.dense = False
        self.held[:] = 0
        self.held[0] = 1
        reserve(fd, min(UNIT, self.size), self.named, _WHAT)
        self.items_end = self.items_start
        self._grow_items(fd, 1)

    def reopen(self, index_count: int) -> None:
        """A file this writer goes on filling and did not just create (RocketMQ's, or one from before
        a restart): the pages of the table holding data (SEEK_DATA) are reserved, or the whole table
        when most do; the items it counts and a step past them. Until this call a file it did not
        make counts as reserved whole, and its mapping has no advice."""
        held = self._pages_with_data()
        fd = os.open(self.path, os.O_RDWR)
        try:
            self.held[:] = 0
            self.held[0] = 1
            self.items_end = self.items_start
            self.dense = False
            if held is None or held.mean() >= DENSE_SHARE:
                reserve(fd, self.table_end, self.named, _WHAT)
                self.held[:] = 1
            else:
                self.held[held] = 1
                for first, end in _runs(np.flatnonzero(self.held)):
                    reserve(fd, min(end * UNIT, self.size), self.named, _WHAT, first * UNIT)
            self._grow_items(fd, index_count)
            if self._mm is not None and not self.held.all():
                # what this process has cached of the file may be in large folios (read through an
                # unadvised mapping): they go, or a write into one takes blocks for all of it
                _drop_cached(self._mm, fd, self.size)
                _advise(self._mm, mmap.MADV_RANDOM)
        finally:
            os.close(fd)
        if self.held.all():
            self._turn_dense()

    def map(self, mm: mmap.mmap) -> None:
        """The writer's mapping of the file, advised as the file stands (the module's docstring)."""
        self._mm = mm
        if self.dense:              # a file it did not make: left as it is until ``reopen``
            return
        if self.held_share() >= DENSE_SHARE:    # a small table: held whole from the start
            self._turn_dense()
        else:
            _advise(mm, mmap.MADV_RANDOM)

    def start_warm(self) -> bool:
        """Fault the reserved items in now, and each step as it is reserved; False where the kernel
        cannot (before Linux 5.14)."""
        self.warm_items = True
        return self._mm is None or _populate(self._mm, self.table_end, self.items_end)

    # --- before the puts -----------------------------------------------------------------------
    def for_slots(self, slots: np.ndarray) -> None:
        """Reserve the pages of these slot numbers that are not yet: before keys land in them."""
        if self.dense or not len(slots):
            return
        wanted = np.zeros(len(self.held), dtype=bool)
        wanted[(INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * slots.astype(np.int64)) >> UNIT_SHIFT] = True
        self.reserve_units(np.flatnonzero(wanted & (self.held == 0)))

    def for_key_hashes(self, key_hashes: np.ndarray) -> None:
        """``for_slots`` of the slots these key hashes go to (as the C pass takes them: unsigned)."""
        if not self.dense and len(key_hashes):
            self.for_slots(key_hashes.astype(np.int64) % (1 << 32) % self.slot_num)

    def reserve_units(self, units: np.ndarray) -> None:
        """Reserve these pages of the table (sorted), fault them in for writing; dense once most are."""
        if not len(units):
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            for first, end in _runs(units):
                reserve(fd, min(end * UNIT, self.size), self.named, _WHAT, first * UNIT)
                self.held[first:end] = 1
                if self._mm is not None:
                    _populate(self._mm, first * UNIT, min(end * UNIT, self.size))
        finally:
            os.close(fd)
        if self.held_share() >= DENSE_SHARE:
            self._turn_dense()

    def for_items(self, count: int) -> int:
        """Reserve the blocks items 0 .. ``count`` need (and a step ahead) before they are put: a full
        disk is a FileSpaceError here, never SIGBUS in the C pass. Returns the item count the
        reserved blocks hold, the bound the C pass is given."""
        need = self.table_end + INDEX_ITEM_SIZE * max(count, 1)
        if not self.dense and INDEX_ITEM_SIZE * count >= self.table_end:
            # keys that cluster may leave pages of the table untouched for good: once the items
            # take as much disk as the table, what sparse pages save is small against the file
            self._turn_dense()
        if need > self.items_end:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._grow_items(fd, count)
            finally:
                os.close(fd)
        return (self.items_end - self.table_end) // INDEX_ITEM_SIZE

    def _grow_items(self, fd: int, count: int) -> None:
        old = self.items_end
        need = self.table_end + INDEX_ITEM_SIZE * max(count, 1)
        if self.dense:
            grown = min(-(-max(need, old + 1) // HUGE_PAGE) * HUGE_PAGE, self.size)
        else:
            have = max(old - self.table_end, 0)
            grown = self.table_end + next_reserved(have, need - self.table_end, self.size - self.table_end,
                                                   first=FIRST_ITEMS_STEP, most=MOST_STEP)
        if grown <= old:
            return
        reserve(fd, grown, self.named, _WHAT, old)
        self.items_end = grown
        if self.table_end % UNIT:       # the table's last page is the items' first
            self.held[-1] = 1
        if self.warm_items and self._mm is not None:
            _populate(self._mm, old, grown)

    # --- sparse to dense -----------------------------------------------------------------------
    def _turn_dense(self) -> None:
        fd = os.open(self.path, os.O_RDWR)
        try:
            first_time = not self.dense
            self.dense = True
            if not self.held.all():
                reserve(fd, self.table_end, self.named, _WHAT)
                self.held[:] = 1
            self._grow_items(fd, (self.items_end - self.table_end) // INDEX_ITEM_SIZE)
            mm = self._mm
            if mm is None:
                return
            table = mm[:self.table_end] if first_time else b""
            if first_time:
                _drop_cached(mm, fd, self.size)
                _advise(mm, mmap.MADV_NORMAL)
            _advise(mm, mmap.MADV_HUGEPAGE)
            if table:
                # the table back into the cache by write(), not faulted in from the disk: it takes
                # whole pages, which need no read (the next flush writes it, which random keys
                # would have it do anyway)
                os.pwrite(fd, table, 0)
            # keys reach the slots in random order: page by page as the batches come they would
            # cost a fault each, scattered; in one sweep the kernel does them in a row
            _populate(mm, 0, self.table_end)
            if self.warm_items:
                _populate(mm, self.table_end, self.items_end)
        finally:
            os.close(fd)

    def _pages_with_data(self) -> np.ndarray | None:
        """The pages of the table with data in the file; None where it cannot be asked."""
        extents = data_extents(self.path, 0, self.table_end)
        if extents is None:
            return None
        has = np.zeros(len(self.held), dtype=bool)
        for start, stop in extents:
            has[start // UNIT:-(-stop // UNIT)] = True
        return has


def _drop_cached(mm: mmap.mmap, fd: int, size: int) -> None:
    """Write the file's dirty pages and drop what the page cache holds of it, so that its next
    faults come in the folios the mapping's advice asks for (the index is derived from the log: a
    write ahead of the commit is what the kernel's own writeback may do at any time)."""
    mm.flush()
    _advise(mm, mmap.MADV_DONTNEED)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)


def _advise(mm: mmap.mmap, advice: int) -> None:
    """Advice the kernel may take as a hint or refuse (no THP, not Linux): nothing changes then."""
    try:
        mm.madvise(advice)
    except (AttributeError, OSError):
        pass


def _populate(mm: mmap.mmap, start: int, end: int) -> bool:
    """Write-fault the pages of bytes [start, end) in, in one call; False where the kernel cannot
    (MADV_POPULATE_WRITE: Linux 5.14)."""
    start -= start % UNIT
    if end <= start:
        return True
    try:
        mm.madvise(_MADV_POPULATE_WRITE, start, end - start)
    except (OSError, ValueError):
        return False
    return True
