"""One IndexFile, as RocketMQ's IndexFile/IndexHeader write it (../shared/golden/INDEX_FORMAT_NOTES.md).

A file is 40 header bytes, ``max_hash_slot_num`` 4-byte slots and ``max_index_num`` 20-byte items,
all big-endian. An item is (keyHash, phyOffset, timeDiff, prevIndex); a slot holds the newest item
of its hash chain. Item 0 is never written, so a file holds ``max_index_num - 1`` items.

Keys are put a batch at a time, in C (store/index/_index_build.c: RocketMQ's putKey once per key,
slots asked for ahead); tests hold it to a numpy oracle (tests/oracles/index_put.py).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.errors import IndexFileError
from store.format.constants import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_INVALID_INDEX, INDEX_ITEM_SIZE
from store.index import _index_build
from store.index.blocks import UNIT_SHIFT, IndexBlocks
from store.index.build import record_keys
from store.log.segment import fsync_dir
from store.space import create_reserved, data_extents

_HEADER = struct.Struct(">qqqqii")
_ITEM = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
CREATING_SUFFIX = ".tmp"      # a file being created; IndexService removes one a crash left
_RECORDS_FULL = 1     # index_records' status when the file (or its reserved items) filled up
_RECORDS_UNRESERVED = 3   # index_records' status before a key whose slot's page is not reserved


@dataclass
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1           # the next item number; item 0 is never used

    def pack(self) -> bytes:
        return _HEADER.pack(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                            self.end_phy_offset, self.hash_slot_count, self.index_count)

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> "IndexHeader":
        return cls(*_HEADER.unpack_from(data, 0))


def index_file_names(directory: Path) -> list[str]:
    """The IndexFiles of ``directory``, oldest first (named by creation time: a half-created file,
    ``CREATING_SUFFIX``, is not one)."""
    return sorted(n for n in os.listdir(directory) if n.isdigit()) if directory.is_dir() else []


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    return INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * max_hash_slot_num + INDEX_ITEM_SIZE * max_index_num


class IndexFile:
    """An IndexFile mapped read-write (or read-only); ``put`` appends keys, ``query`` walks a chain."""

    def __init__(self, path: Path, max_hash_slot_num: int, max_index_num: int, *, create: bool = False,
                 read_only: bool = False, start: IndexHeader | None = None) -> None:
        self.path = Path(path)
        self.max_hash_slot_num = max_hash_slot_num
        self.max_index_num = max_index_num
        size = index_file_size(max_hash_slot_num, max_index_num)
        creating = self.path.with_name(self.path.name + CREATING_SUFFIX) if create else None
        self._blocks = IndexBlocks(creating or self.path, max_hash_slot_num, size, named=self.path)
        if creating is not None:
            # sparse, the blocks of its header and first items reserved (store.index.blocks); under
            # a name of its own until it has its size and header, so that a writer killed in
            # between leaves no short file behind that the next open would refuse
            creating.unlink(missing_ok=True)
            fd = create_reserved(creating, size, "index file", named=self.path, reserved=0)
            try:
                self._blocks.start_new(fd)
            except BaseException:
                os.close(fd)
                creating.unlink(missing_ok=True)
                raise
        else:
            fd = os.open(self.path, os.O_RDONLY if read_only else os.O_RDWR)
            actual = os.fstat(fd).st_size
            if actual != size:
                os.close(fd)
                raise IndexFileError(f"index file {self.path} is {actual} bytes, but maxHashSlotNum "
                                     f"{max_hash_slot_num} and maxIndexNum {max_index_num} make {size}: give the "
                                     f"settings it was built with, or rebuild it with `commitlog reindex`")
        try:
            self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE)
            if creating is not None:
                # durable before the file has its name: a power cut must not leave a named file whose
                # header is still zeros (the next open would refuse the index as damaged)
                self.header = start if start is not None else IndexHeader.unpack(self._mm)
                self._write_header()
                os.fsync(fd)
        finally:
            os.close(fd)
        if not read_only:
            self._blocks.map(self._mm)
        self.read_only = read_only
        self._items_offset = INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * max_hash_slot_num
        self._flush_whole = False
        self._slots = np.frombuffer(self._mm, dtype=">i4", count=max_hash_slot_num, offset=INDEX_HEADER_SIZE)
        self._items = np.frombuffer(self._mm, dtype=_ITEM, count=max_index_num, offset=self._items_offset)
        # A new file starts from the previous one's end (RocketMQ: the first put's timeDiff is
        # measured against it) until its own first put.
        if creating is None:
            self.header = IndexHeader.unpack(self._mm)
        else:
            os.rename(creating, self.path)
            self._blocks.path = self.path
            fsync_dir(self.path.parent)

    # --- writing -----------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.max_index_num

    @property
    def room(self) -> int:
        return max(self.max_index_num - self.header.index_count, 0)

    @property
    def reserved_end(self) -> int:
        """The end of the items' reserved blocks (store.index.blocks)."""
        return self._blocks.items_end

    def _reserve_items(self, more: int) -> int:
        """Reserve the blocks of the next ``more`` items (fewer at the end of the file) before they
        are put; the item count the reserved blocks hold, the bound the C pass is given."""
        held = self._blocks.for_items(min(self.header.index_count + more, self.max_index_num))
        return min(held, self.max_index_num)

    def put(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """Append items for these keys, in order (at most ``room`` of them)."""
        n = len(key_hashes)
        if n == 0:
            return
        if n > self.room:
            raise ValueError(f"{n} keys do not fit index file {self.path.name} ({self.room} items left)")
        self._blocks.for_key_hashes(key_hashes)
        h = self.header
        header, _ = _index_build.put_items(
            self._mm, self.max_hash_slot_num, self._reserve_items(n),
            (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count,
             h.index_count), np.ascontiguousarray(key_hashes, dtype=np.int32),
            np.ascontiguousarray(phy_offsets, dtype=np.int64), np.ascontiguousarray(store_timestamps, dtype=np.int64))
        self.header = IndexHeader(*header)
        self._write_header()

    def put_shipped(self, key_hashes: np.ndarray, key_counts: np.ndarray, phy_offsets: np.ndarray,
                    store_timestamp: int, start: tuple[int, int, int], most: int) -> tuple[int, int, int]:
        """Put keys shipped with their records (store.index.shipped), in C: record i's
        ``key_counts[i]`` keys, in order in ``key_hashes``, at ``phy_offsets[i]``, all stored at
        ``store_timestamp``; from ``start`` (record, its keys already in, the key) on, at most
        ``most`` keys while the file has room. Returns where it stopped, the same triple."""
        h = self.header
        limit = self._reserve_items(min(most, len(key_hashes) - start[2]))
        self._blocks.for_key_hashes(key_hashes[start[2]:start[2] + max(min(most, limit - h.index_count), 0)])
        header, *stop = _index_build.put_shipped(
            self._mm, self.max_hash_slot_num, limit,
            (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count,
             h.index_count), key_hashes, key_counts, phy_offsets, store_timestamp, *start, most)
        self.header = IndexHeader(*header)
        self._write_header()
        return tuple(stop)  # type: ignore[return-value]

    def warm_items(self) -> bool:
        """Fault every reserved item page in now, and each as it is reserved, as
        ``warm_first_segment`` does a new store's first segment (a fault per page later, on the
        puts, is the cost moved here); False where the kernel cannot (before Linux 5.14), which
        leaves the puts to fault their own pages. The pages stay out of the flushes until items are
        put in them (``flush``)."""
        return self._blocks.start_warm()

    def put_records(self, buf: np.ndarray, starts: np.ndarray, first: int, skip: int, base: int
                    ) -> tuple[int, int, int]:
        """Put the keys of the records at ``starts[first:]`` of ``buf`` (``base``: the offset of
        buf[0]), the first ``skip`` keys of the first one being in already, in C
        (_index_build.index_records): (status, next record, its keys already in), status 0 when
        every record is in, 1 when the file filled up, 2 when the C pass left record ``next`` to
        the caller (store.index.build decodes it)."""
        # how many keys the records hold is found in the C pass: it is given the items reserved,
        # ahead by at least a key a record, and when it fills them more are reserved
        more = len(starts) - first
        if not self._blocks.dense:
            # the pages the keys land in reserved first, in one pass over their hashes: a stop of
            # the C pass per new page (below) is a round trip each, thousands in a new file
            self._blocks.for_key_hashes(record_keys(buf, starts[first:], base).key_hash)
        while True:
            h = self.header
            limit = self._reserve_items(more)
            blocks = self._blocks
            header, status, nxt, skip, unit = _index_build.index_records(
                buf, starts, first, skip, base, self._mm, self.max_hash_slot_num, limit,
                (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count,
                 h.index_count), b"" if blocks.dense else blocks.held, UNIT_SHIFT)
            self.header = IndexHeader(*header)
            self._write_header()
            if status == _RECORDS_UNRESERVED:
                blocks.reserve_units(np.array([unit]))
                first = nxt
                continue
            if status != _RECORDS_FULL or self.is_full:
                return status, nxt, skip
            first, more = nxt, max(len(starts) - nxt, 1)

    @property
    def covered_end(self) -> int:
        """The offset of the last item the header counts, or the header's endPhyOffset in a file with
        none. After a crash it can be past the header's endPhyOffset: a batch's items are counted as
        they are put, the header's other fields written once the batch is in."""
        n = self.header.index_count
        return int(self._items["phy_offset"][n - 1]) if n > 1 else self.header.end_phy_offset

    def truncate_before(self, end_offset: int, timestamp_of: Callable[[int], int],
                        matches: Callable[[int, int], bool] | None = None) -> int:
        """Keep only the items of records below ``end_offset`` (after a crash, what the commit point
        does not cover goes); ``timestamp_of`` gives a kept record's store timestamp for the header.
        With ``matches`` (offset, key hash -> whether that record has a key of that hash), the items
        a power cut left zeroed or torn go too (trusted_items). Returns how many items are left."""
        n = self.header.index_count
        phy = self._items["phy_offset"][1:n].astype(np.int64)
        if matches is None:
            keep = int(np.searchsorted(phy, end_offset, side="left"))
        else:
            keep = self.trusted_items(end_offset, matches)
        if keep == n - 1 and (not keep or self.header.end_phy_offset == int(phy[-1])):
            return keep
        self.header.index_count = keep + 1
        if keep:
            if self.header.begin_timestamp == 0:        # a file begun by the batch the crash cut short
                self.header.begin_phy_offset = int(phy[0])
                self.header.begin_timestamp = timestamp_of(int(phy[0]))
            self.header.end_phy_offset = int(phy[keep - 1])
            self.header.end_timestamp = timestamp_of(int(phy[keep - 1]))
        self.repair()
        return keep

    def trusted_items(self, end_offset: int, matches: Callable[[int, int], bool]) -> int:
        """How many counted items a power cut left whole: those of records below the commit point
        ``end_offset`` were durable before it and come first, in offset order; after them come items
        of uncommitted records, maybe zeroed or torn (a sector boundary crossing one) to a committed-
        looking offset. So: the ordered run below ``end_offset``, less its end where an item does
        not match its record (``matches(offset, key hash)``)."""
        n = self.header.index_count
        phy = self._items["phy_offset"][1:n].astype(np.int64)
        bad = (phy >= end_offset) | (phy < 0)
        bad[1:] |= phy[1:] < phy[:-1]
        keep = int(np.argmax(bad)) if bad.any() else n - 1
        key_hash = self._items["key_hash"][1:n]
        while keep and not matches(int(phy[keep - 1]), int(key_hash[keep - 1])):
            keep -= 1
        return keep

    def repair(self) -> None:
        """After a crash: the slots rebuilt from the items the header counts, the items past them
        zeroed. A slot written out before its file's header would point past the count, and the
        next put would take it for empty and cut its chain."""
        n = self.header.index_count
        slots = np.zeros(self.max_hash_slot_num, dtype=np.int64)
        if n > 1:
            hashes = self._items["key_hash"][1:n].astype(np.int64)
            np.maximum.at(slots, hashes % self.max_hash_slot_num, np.arange(1, n, dtype=np.int64))
        # only the slots that change are written: writing a page of a sparse table takes its blocks
        changed = np.flatnonzero(self._slots != slots)
        self._blocks.for_slots(changed)
        self._slots[changed] = slots[changed]
        self._zero_items_from(n)
        self._flush_whole = True        # the zeroed items past the count too
        self.header.hash_slot_count = int(np.count_nonzero(slots))
        self._write_header()

    def _zero_items_from(self, n: int) -> None:
        """Zero items ``n`` on where the file holds anything: its data extents (SEEK_DATA), which
        have their blocks; a hole reads as zeros already, and writing it would take blocks that
        were never reserved."""
        raw = np.frombuffer(self._mm, dtype=np.uint8)
        pos = self._items_offset + INDEX_ITEM_SIZE * n
        extents = data_extents(self.path, pos, len(self._mm))
        for start, stop in extents if extents is not None else [(pos, self._blocks.items_end)]:
            raw[start:stop] = 0

    def reserve(self) -> None:
        """Reserve the disk blocks of a file this writer goes on filling and did not just create
        (RocketMQ's, or one from before a restart): the table's pages that hold data, or all of
        them, the items it counts and a step past them (store.index.blocks)."""
        self._blocks.reopen(self.header.index_count)

    def read_header(self) -> IndexHeader:
        """The header as the file holds it now (a reader beside a writer)."""
        return IndexHeader.unpack(self._mm)

    def _write_header(self) -> None:
        self._mm[:INDEX_HEADER_SIZE] = self.header.pack()

    def flush(self) -> None:
        """msync the header, the slots and the items put so far; pages past them hold nothing
        written (zeros faulted in ahead, ``warm_items``) unless a repair zeroed them."""
        if self.read_only:
            return
        end = len(self._mm)
        if not self._flush_whole:
            written = self._items_offset + INDEX_ITEM_SIZE * max(self.header.index_count, 1)
            end = min(end, -(-written // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._mm.flush(0, end)
        self._flush_whole = False

    # --- reading -----------------------------------------------------------------------------
    def query(self, key_hash: int, begin_ms: int, end_ms: int, max_num: int) -> list[int]:
        """Physical offsets of the items in ``key_hash``'s chain (newest first) whose hash matches
        and whose time is within [begin_ms, end_ms]; the key text is not compared (RocketMQ's
        IndexFile.selectPhyOffset)."""
        h = IndexHeader.unpack(self._mm)
        if h.index_count <= 1:
            return []
        out: list[int] = []
        pos = int(self._slots[key_hash % self.max_hash_slot_num])
        if pos <= INDEX_INVALID_INDEX or pos > h.index_count:
            return out
        for _ in range(h.index_count):          # a chain is never longer than the file's items
            if len(out) >= max_num:
                break
            item = self._items[pos]
            when = h.begin_timestamp + int(item["time_diff"]) * 1000
            if int(item["key_hash"]) == key_hash and begin_ms <= when <= end_ms:
                out.append(int(item["phy_offset"]))
            prev = int(item["prev_index"])
            if prev <= INDEX_INVALID_INDEX or prev > h.index_count or prev == pos or when < begin_ms:
                break
            pos = prev
        return out

    def items(self) -> np.ndarray:
        """The written items (1 .. index_count - 1), as a structured array."""
        return self._items[1:IndexHeader.unpack(self._mm).index_count]

    def slots(self) -> np.ndarray:
        return self._slots

    def close(self) -> None:
        self._slots = self._items = None  # type: ignore[assignment]
        self._mm.close()

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
