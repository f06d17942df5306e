"""An IndexFile takes disk for the pages its keys touch (store/index/blocks.py), as RocketMQ's
sparse mapping does, whichever way its keys are put, and holds the bytes the numpy oracle puts;
most of the table touched, it turns dense: reserved whole and mapped in 2 MiB pages. A writer's
mapping is advised, a reader's is not, and a flush writes only what was put."""

from __future__ import annotations

import errno
import mmap
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from store.errors import FileSpaceError
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.format.constants import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_ITEM_SIZE
from store.index import blocks as index_blocks
from store.index.build import record_keys
from store.index.file import IndexFile, IndexHeader
from store.index.service import IndexService
from store.index.settings import IndexConfig
from tests.oracles import index_put

pytestmark = pytest.mark.unit

CONFIG = IndexConfig()          # RocketMQ's geometry: a 20 MB slot table, 4,883 pages
PAGE = mmap.PAGESIZE
TABLE_END = INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * CONFIG.max_hash_slot_num


def records(n: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records with a unique key each, as a store appends them."""
    msgs = [replace(Message(f"wide-{i % 500}", b"x" * 100, properties=f"UNIQ_KEY\x01{i:032X}\x02"),
                    store_timestamp=1_700_000_000_000 + i) for i in range(first, first + n)]
    batch = encode_messages(msgs, CodecConfig())
    return np.array(batch.data, dtype=np.uint8), np.asarray(batch.offsets, dtype=np.int64)


def put(service: IndexService, way: str, arr: np.ndarray, starts: np.ndarray) -> None:
    if way == "records":
        service.put_records(arr, starts, 0)
        return
    keys = record_keys(arr, starts, 0)
    if way == "shipped":
        counts = np.bincount(keys.record, minlength=len(starts)).astype(np.int32)
        service.put_shipped(keys.key_hash, counts, starts, 1_700_000_000_000)
    else:
        service.put_hashes(keys.key_hash, keys.phy_offset, keys.store_timestamp)


def the_oracle_s(tmp_path: Path, way: str, arr: np.ndarray, starts: np.ndarray,
                 monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(IndexFile, "put", index_put.put)
        m.setattr(IndexService, "put_records", index_put.put_records)
        m.setattr(IndexService, "put_shipped", index_put.put_shipped)
        service = IndexService(tmp_path / "oracle", CONFIG)
        put(service, way, arr, starts)
        service.flush()
        data = in_use(service.files[0])
        service.close()
    return data


def in_use(f: IndexFile) -> bytes:
    return bytes(f._mm[:TABLE_END + INDEX_ITEM_SIZE * f.header.index_count])


def pages_touched(f: IndexFile) -> set[int]:
    slots = np.flatnonzero(f.slots())
    return set(((INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * slots) // PAGE).tolist())


def data_pages(path: Path, end: int) -> set[int]:
    """The pages of bytes [0, end) the file holds data in (SEEK_DATA)."""
    out: set[int] = set()
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while pos < end:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            stop = min(os.lseek(fd, start, os.SEEK_HOLE), end)
            out.update(range(start // PAGE, -(-stop // PAGE)))
            pos = stop
    finally:
        os.close(fd)
    return out


@pytest.mark.parametrize("way", ["records", "records-c-stops", "shipped", "hashes"])
def test_six_thousand_keys_take_the_pages_they_touch_and_the_oracle_s_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    arr, starts = records(6_000)
    service = IndexService(tmp_path / "index", CONFIG)
    if way == "records-c-stops":      # no pages reserved ahead: the C pass stops before each new one
        way = "records"
        stops: list[int] = []
        reserve_units = index_blocks.IndexBlocks.reserve_units
        with monkeypatch.context() as m:
            m.setattr(index_blocks.IndexBlocks, "for_key_hashes", lambda self, hashes: None)
            m.setattr(index_blocks.IndexBlocks, "reserve_units",
                      lambda self, units: stops.append(len(units)) or reserve_units(self, units))
            put(service, way, arr, starts)
        assert len(stops) > 3_000 and set(stops) == {1}
    else:
        put(service, way, arr, starts)
    service.flush()
    (f,) = service.files
    touched = pages_touched(f)
    assert 3_000 < len(touched) < 0.8 * TABLE_END / PAGE        # about 71% of the table's pages
    assert in_use(f) == the_oracle_s(tmp_path, way, arr, starts, monkeypatch)
    allocated = f.path.stat().st_blocks * 512
    items = f.reserved_end - TABLE_END + PAGE
    # and the filesystem's map of so many extents: a block per few hundred
    assert len(touched) * PAGE <= allocated <= (len(touched) + 1) * PAGE * 1.01 + items, (allocated, len(touched))
    assert allocated < 0.8 * TABLE_END
    assert not f._blocks.dense
    service.close()


def test_most_of_the_table_touched_the_file_turns_dense_and_mapped_in_huge_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, starts = records(40_000)
    service = IndexService(tmp_path / "index", CONFIG)
    put(service, "records", arr, starts)
    service.flush()
    (f,) = service.files
    assert f._blocks.dense and f._blocks.held.all()
    assert f.path.stat().st_blocks * 512 >= TABLE_END
    assert f.reserved_end % (2 << 20) == 0, "a dense file's items end on a huge page"
    lines = Path("/proc/self/smaps").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith(str(f.path)))
    assert "hg" in next(line for line in lines[at:] if line.startswith("VmFlags:")).split()
    assert in_use(f) == the_oracle_s(tmp_path, "records", arr, starts, monkeypatch)
    service.close()


def test_keys_that_cluster_turn_the_file_dense_once_its_items_take_as_much_disk_as_its_table(
        tmp_path: Path) -> None:
    slots = 50_000                                      # a table of 200,040 bytes: 10,002 items
    f = IndexFile(tmp_path / "f", slots, 100_000, create=True, start=IndexHeader())
    clustered = np.arange(10_000, dtype=np.int32) % 1_000      # the table's first page alone
    f.put(clustered, np.arange(10_000, dtype=np.int64), np.full(10_000, 1_700_000_000_000))
    assert not f._blocks.dense and int(f._blocks.held.sum()) == 2     # and the page the items start in
    f.put(clustered[:10], np.arange(10, dtype=np.int64), np.full(10, 1_700_000_000_000))
    assert f._blocks.dense and f._blocks.held.all()
    f.close()


def test_a_sparse_file_opened_again_stays_sparse_with_the_pages_it_holds_reserved(tmp_path: Path) -> None:
    service = IndexService(tmp_path / "index", CONFIG)
    put(service, "records", *records(3_000))
    service.flush()
    service.close()
    (name,) = os.listdir(tmp_path / "index")
    f = IndexFile(tmp_path / "index" / name, CONFIG.max_hash_slot_num, CONFIG.max_index_num)
    f.reserve()
    assert not f._blocks.dense
    assert pages_touched(f) <= set(np.flatnonzero(f._blocks.held).tolist())
    before = f.path.stat().st_blocks * 512
    arr, starts = records(100, first=3_000)
    f.put_records(arr, starts, 0, 0, 1 << 20)
    f.flush()
    assert f.path.stat().st_blocks * 512 - before <= 101 * PAGE
    f.close()


def test_a_full_disk_at_a_slot_s_page_is_one_error_and_nothing_lands_where_no_block_is_reserved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = IndexService(tmp_path / "index", CONFIG)
    put(service, "records", *records(10))
    (f,) = service.files
    calls = []
    real = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        calls.append(offset)
        if len(calls) > 50:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(index_blocks.os, "posix_fallocate", fallocate, raising=False)
    monkeypatch.setattr("store.space.os.posix_fallocate", fallocate)
    with pytest.raises(FileSpaceError, match=f"cannot reserve 4,096 bytes on disk for index file {f.path}"):
        put(service, "records", *records(2_000, first=10))
    monkeypatch.undo()
    assert 10 < f.header.index_count < 2_011
    f.flush()
    held = set(np.flatnonzero(f._blocks.held).tolist())
    assert data_pages(f.path, TABLE_END) <= held
    assert pages_touched(f) <= held
    service.close()


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE") or not Path("/proc/self/smaps").exists(),
                    reason="no MADV_HUGEPAGE here")
def test_a_writer_maps_its_index_files_asking_for_huge_pages_and_a_reader_does_not(tmp_path: Path) -> None:
    def advised(path: Path) -> bool:
        lines = Path("/proc/self/smaps").read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.endswith(str(path)))
        flags = next(line for line in lines[at:] if line.startswith("VmFlags:"))
        return "hg" in flags.split()

    writer = IndexFile(tmp_path / "w", 1024, 4096, create=True)
    assert advised(tmp_path / "w")
    writer.close()
    reader = IndexFile(tmp_path / "w", 1024, 4096, read_only=True)
    assert not advised(tmp_path / "w")
    reader.close()


def test_warm_first_faults_the_first_index_file_in_and_a_flush_writes_only_what_was_put(tmp_path: Path) -> None:
    """warm_first_segment: the first IndexFile's reserved items are faulted in when it is made, as
    the first segment is at open (the items past them take no page and no block until reserved);
    the flushes still write only the header, the slots and the items put (the zeros faulted in
    ahead are not theirs to write)."""
    from tests.helpers.stores import resident_pages

    class Flushes:
        def __init__(self, mm: mmap.mmap) -> None:
            self.mm, self.calls = mm, []

        def __len__(self) -> int:
            return len(self.mm)

        def flush(self, *args: int) -> None:
            self.calls.append(args)
            self.mm.flush(*args)

    config = IndexConfig(max_hash_slot_num=1024, max_index_num=1_000_000)    # 20 MB of items
    service = IndexService(tmp_path / "index", config, warm_first=True)
    phy = np.arange(10, dtype=np.int64) * 100
    service.put_hashes(np.arange(10, dtype=np.int32), phy, np.full(10, 1_700_000_000_000, dtype=np.int64))
    (first,) = service.files
    size = first.path.stat().st_size
    pages = resident_pages(first.path, size)
    reserved = -(-first.reserved_end // mmap.PAGESIZE)
    assert reserved < len(pages) // 8
    assert pages[:reserved].all(), f"{int((pages[:reserved] == 0).sum())} of {reserved} pages not faulted in"
    first.flush()
    # on disk: what is reserved (to a huge page's end: the faults take one whole)
    assert first.path.stat().st_blocks * 512 <= first.reserved_end
    spy = Flushes(first._mm)
    first._mm = spy  # type: ignore[assignment]
    first.flush()
    items_end = 40 + 4 * 1024 + 20 * 11
    assert spy.calls == [(0, -(-items_end // mmap.PAGESIZE) * mmap.PAGESIZE)]
    first._mm = spy.mm
    second = service._new_file()        # not the directory's first: left to its puts
    assert resident_pages(second.path, size).sum() < len(pages) // 2
    service.close()


def test_a_repaired_index_file_flushes_whole(tmp_path: Path) -> None:
    """repair() zeroes the items a crash left past the count: those pages are written too."""
    f = IndexFile(tmp_path / "f", 16, 5000, create=True, start=IndexHeader())
    f.put(np.arange(3000, dtype=np.int32), np.arange(3000, dtype=np.int64), np.full(3000, 1, dtype=np.int64))
    f.header.index_count = 3
    f.repair()
    calls: list[tuple[int, ...]] = []

    class Spy:
        def __len__(self) -> int:
            return len(real)

        def flush(self, *args: int) -> None:
            calls.append(args)

    real = f._mm
    f._mm = Spy()  # type: ignore[assignment]
    f.flush()
    f.flush()
    f._mm = real
    assert calls == [(0, len(real)), (0, -(-(40 + 4 * 16 + 20 * 3) // mmap.PAGESIZE) * mmap.PAGESIZE)]
    f.close()
