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
from store.log.segment import fsync_dir
from store.space import create_reserved, reserve_path

_HEADER = struct.Struct(">qqqqii")
_ITEM = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
CREATING_SUFFIX = ".tmp"      # a file being created; IndexService removes one a crash left
_MADV_POPULATE_WRITE = 23


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


def _ask_for_huge_pages(mm: mmap.mmap) -> None:
    """Ask for a writer's mapping in 2 MiB pages where the kernel maps files so (ext4 and xfs with
    large folios, Linux 6.x): keys land anywhere in the 20 MB slot table, which in 4 KiB pages is
    a TLB miss and a page walk per put, and each new page of items a fault of its own; and a flush
    cleans the slot table ten pages at a time, not 4,883. The price: after a flush, a put into a
    2 MiB page splits its mapping and ext4 dirties it again 4 KiB at a time, dearer than in small
    pages, which the flush's saving outweighs (BENCHMARKS.md, "Sizing"); and a flush writes a dirty
    item page whole, at most 2 MiB past the last item. Elsewhere the advice is taken as a hint or
    refused, and nothing changes."""
    try:
        mm.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):   # no MADV_HUGEPAGE (not Linux), or a kernel without THP
        pass


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
        if creating is not None:
            # every block reserved now: a full disk is an OSError here, not SIGBUS on a put; under
            # a name of its own until it has its size and header, so that a writer killed in
            # between leaves no short file behind that the next open would refuse
            creating.unlink(missing_ok=True)
            fd = create_reserved(creating, size, "index file", named=self.path)
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
            _ask_for_huge_pages(self._mm)
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
            fsync_dir(self.path.parent)

    # --- writing -----------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.header.index_count >= self.max_index_num

    @property
    def room(self) -> int:
        return max(self.max_index_num - self.header.index_count, 0)

    def put(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """Append items for these keys, in order (at most ``room`` of them)."""
        n = len(key_hashes)
        if n == 0:
            return
        if n > self.room:
            raise ValueError(f"{n} keys do not fit index file {self.path.name} ({self.room} items left)")
        h = self.header
        header, _ = _index_build.put_items(
            self._mm, self.max_hash_slot_num, self.max_index_num,
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
        header, *stop = _index_build.put_shipped(
            self._mm, self.max_hash_slot_num, self.max_index_num,
            (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count,
             h.index_count), key_hashes, key_counts, phy_offsets, store_timestamp, *start, most)
        self.header = IndexHeader(*header)
        self._write_header()
        return tuple(stop)  # type: ignore[return-value]

    def warm_slots(self) -> None:
        """Fault the hash slots in, once, when the file is new: keys reach them in random order, so
        page by page as the first batches come they would cost a fault each, scattered; in one
        sweep the kernel does them in a row. Write faults (MADV_POPULATE_WRITE): a page faulted in
        for reading takes a second fault at its first put, to be marked dirty, which costs the puts
        about as much as the first. The price: the file's first flush writes the whole slot table
        (20 MB at the default geometry), which random keys dirty within the first batches anyway.
        Before Linux 5.14, a byte read per page."""
        if not self._populate(INDEX_HEADER_SIZE, self._items_offset):    # before Linux 5.14
            int(self._slots.view(np.uint8)[::mmap.PAGESIZE].sum())

    def warm_items(self) -> bool:
        """Fault every item page in now, as ``warm_first_segment`` does a new store's first segment
        (a fault per page later, on the puts, is the cost moved here); False where the kernel
        cannot (before Linux 5.14), which leaves the puts to fault their own pages. The pages stay
        out of the flushes until items are put in them (``flush``)."""
        return self._populate(self._items_offset, len(self._mm))

    def _populate(self, start: int, end: int) -> bool:
        """Write-fault the pages of bytes [start, end) in, in one call; False where the kernel
        cannot (MADV_POPULATE_WRITE: Linux 5.14)."""
        start -= start % mmap.PAGESIZE
        try:
            self._mm.madvise(_MADV_POPULATE_WRITE, start, end - start)
        except (OSError, ValueError):
            return False
        return True

    def put_records(self, buf: np.ndarray, starts: np.ndarray, first: int, skip: int, base: int
                    ) -> tuple[int, int, int]:
        """Put the keys of the records at ``starts[first:]`` of ``buf`` (``base``: the offset of
        buf[0]), the first ``skip`` keys of the first one being in already, in C
        (_index_build.index_records): (status, next record, its keys already in), status 0 when
        every record is in, 1 when the file filled up, 2 when the C pass left record ``next`` to
        the caller (store.index.build decodes it)."""
        h = self.header
        header, status, nxt, skip = _index_build.index_records(
            buf, starts, first, skip, base, self._mm, self.max_hash_slot_num, self.max_index_num,
            (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, h.end_phy_offset, h.hash_slot_count, h.index_count))
        self.header = IndexHeader(*header)
        self._write_header()
        return status, nxt, skip

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
        self._slots[:] = slots
        self._items[n:] = np.zeros(1, dtype=_ITEM)
        self._flush_whole = True        # the zeroed items past the count too
        self.header.hash_slot_count = int(np.count_nonzero(slots))
        self._write_header()

    def reserve(self) -> None:
        """Reserve the disk blocks of a file this writer did not create and goes on filling
        (store.space)."""
        reserve_path(self.path, index_file_size(self.max_hash_slot_num, self.max_index_num), "index file")

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
