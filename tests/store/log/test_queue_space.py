"""Consume-queue files and IndexFiles take disk as they fill (issue 64, items 1 and 3): full length,
sparse, their blocks reserved ahead of the writes in steps, every queue of a batch before any of
its units is written; the flush covers only the queues written since the last one; the writer
keeps at most ``max_open_files`` queue files open."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from store.errors import FileSpaceError
from store.queue.consume_queue import ConsumeQueueStore
from store.space import FIRST_STEP, MOST_STEP, next_reserved
from tests.store.log.test_consume_queue import dispatch_list

pytestmark = pytest.mark.unit

PAGE = 4096
UNITS = 300_000           # RocketMQ's default file: 6,000,000 bytes


def blocks(path: Path) -> int:
    return path.stat().st_blocks * 512


def cq_file(root: Path, topic: str, qid: int, start: int = 0) -> Path:
    return root / "consumequeue" / topic / str(qid) / str(start).zfill(20)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_step_doubles_from_a_page_to_a_mib_in_whole_pages_up_to_the_file() -> None:
    assert next_reserved(0, 20, 6_000_000) == FIRST_STEP
    assert next_reserved(FIRST_STEP, FIRST_STEP, 6_000_000) == FIRST_STEP          # fits: nothing more
    assert next_reserved(FIRST_STEP, FIRST_STEP + 1, 6_000_000) == 2 * FIRST_STEP
    assert next_reserved(64 << 10, (64 << 10) + 1, 6_000_000) == 128 << 10
    assert next_reserved(4 << 20, (4 << 20) + 1, 6_000_000) == (4 << 20) + MOST_STEP
    assert next_reserved(0, 3 * FIRST_STEP + 1, 6_000_000) == 4 * FIRST_STEP       # a big write: what it needs
    assert next_reserved(5_999_000, 5_999_990, 6_000_000) == 6_000_000


def test_a_queue_of_a_few_units_takes_a_page_and_grows_by_steps(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    dispatch_list(cq, [("T", q, 0, q * 100, 100, 0) for q in range(20)])
    cq.flush()
    for q in range(20):
        f = cq_file(tmp_path, "T", q)
        assert f.stat().st_size == UNITS * 20 and blocks(f) == PAGE
    # 2,000 units (40,000 bytes) more in queue 0: reserved ahead by at most what is written
    dispatch_list(cq, [("T", 0, i, 10_000 + i * 100, 100, 0) for i in range(1, 2001)])
    cq.flush()
    written = 2001 * 20
    assert written <= blocks(cq_file(tmp_path, "T", 0)) <= 2 * written + PAGE
    assert [u[0] for u in cq.find("T", 0, 1999, 3)] == [10_000 + i * 100 for i in (1999, 2000)]
    cq.close()


def test_a_reopened_queue_reserves_on_from_what_its_file_holds(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    dispatch_list(cq, [("T", 0, i, i * 100, 100, 0) for i in range(200)])    # 4,000 bytes: one page
    cq.abandon()                                                               # as a killed writer leaves it
    cq = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    assert cq.queue_range("T", 0) == (0, 200)
    dispatch_list(cq, [("T", 0, i, i * 100, 100, 0) for i in range(200, 400)])
    cq.close()
    f = cq_file(tmp_path, "T", 0)
    assert 400 * 20 <= blocks(f) <= 4 * PAGE
    units = ConsumeQueueStore(tmp_path, read_only=True).find("T", 0, 0, 1000)
    assert [u[0] for u in units] == [i * 100 for i in range(400)]


def test_a_full_disk_at_any_queue_of_a_batch_writes_no_unit_of_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import store.queue.consume_queue as cq_module

    cq = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    dispatch_list(cq, [("T", q, 0, q * 100, 100, 0) for q in range(3)])
    real = cq_module.reserve
    calls: list[Path] = []

    def full_at_the_third(fd: int, size: int, path: Path, what: str, start: int = 0) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise FileSpaceError(28, f"cannot reserve {size - start} bytes on disk for {what} {path}", str(path))
        real(fd, size, path, what, start)

    monkeypatch.setattr(cq_module, "reserve", full_at_the_third)
    # 300 units each (6,000 bytes): every queue's file needs a second page
    with pytest.raises(FileSpaceError, match="cannot reserve"):
        dispatch_list(cq, [("T", q, i, 10_000 + i, 1, 0) for q in range(3) for i in range(1, 301)])
    assert len(calls) == 3
    assert all(cq.queue_range("T", q) == (0, 1) for q in range(3))
    monkeypatch.setattr(cq_module, "reserve", real)
    cq.close()
    reread = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    assert all(reread.queue_range("T", q) == (0, 1) for q in range(3))


def test_the_flush_syncs_only_the_queues_written_since_the_last_one(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import store.queue.sync as sync_module

    cq = ConsumeQueueStore(tmp_path, units_per_file=UNITS)
    dispatch_list(cq, [("T", q, 0, q * 100, 100, 0) for q in range(100)])
    cq.flush()
    fsyncs: list[int] = []
    monkeypatch.setattr(sync_module.os, "fsync", lambda fd: fsyncs.append(fd))
    cq.flush()
    assert fsyncs == []                                        # nothing written: nothing synced
    dispatch_list(cq, [("T", 7, 1, 50_000, 100, 0)])
    cq.flush()
    assert len(fsyncs) == 1                                    # one queue file, no directory is new
    if cq._sync.syncs_filesystem:                              # many dirty queues: one syncfs, no fsync
        called: list[int] = []
        monkeypatch.setattr(cq._sync, "_syncfs", lambda fd: called.append(fd) or 0)
        dispatch_list(cq, [("T", q, 1, 60_000 + q, 100, 0) for q in range(8, 100)])
        cq.flush()
        assert len(called) == 1 and len(fsyncs) == 1
    monkeypatch.undo()
    cq.close()


def test_more_queues_than_the_open_file_bound_are_written_read_and_flushed(tmp_path: Path) -> None:
    before = open_fds()
    cq = ConsumeQueueStore(tmp_path, units_per_file=50, max_open_files=8)
    most = 0
    for round_ in range(6):                      # 60 queues, 6 units each, a file rolling every 50
        rows = [("T", q, round_ * 10 + i, (round_ * 10 + i) * 1000 + q, 100, q)
                for q in range(60) for i in range(10)]
        dispatch_list(cq, rows)
        most = max(most, open_fds() - before)
        if round_ % 2:
            cq.flush()
    assert most <= 8 + 1                         # the bound, and the directory the flush syncs
    cq.close()
    assert open_fds() == before
    reread = ConsumeQueueStore(tmp_path, units_per_file=50, read_only=True)
    for q in range(60):
        units = np.array(reread.find_units("T", q, 0, 100)["phys"])
        assert list(units) == [i * 1000 + q for i in range(60)]


def test_verify_is_clean_over_more_queues_than_the_bound(tmp_path: Path) -> None:
    from store import Message, MessageStore, StoreConfig

    root = tmp_path / "store"
    config = StoreConfig(segment_size=1 << 20, preallocate=False, consume_queue_units=100, max_open_queue_files=4)
    for round_ in range(2):
        with MessageStore.open(root, config) as store:
            store.append([Message(f"T{t}", f"{round_}-{t}-{q}".encode(), queue_id=q)
                          for t in range(5) for q in range(8)])
            store.commit()
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(root)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_bad_open_file_bound_is_refused() -> None:
    from store import StoreConfig

    with pytest.raises(ValueError, match="max_open_queue_files is 0"):
        StoreConfig(max_open_queue_files=0)


def test_an_index_file_takes_its_slot_table_s_pages_and_its_items_as_they_come(tmp_path: Path) -> None:
    from store.index.file import IndexFile, IndexHeader, index_file_size

    slots, items = 50_000, 2_000_000                    # 40 MB of items
    head = 40 + 4 * slots
    f = IndexFile(tmp_path / "20260101000000000", slots, items, create=True, start=IndexHeader())
    assert f.path.stat().st_size == index_file_size(slots, items)
    assert PAGE <= blocks(f.path) <= 2 * PAGE + (64 << 10)      # the header's page, the first items
    f.put(np.arange(3, dtype=np.int32) * 40_000, np.arange(3, dtype=np.int64), np.full(3, 1_700_000_000_000))
    f.flush()
    assert blocks(f.path) <= 5 * PAGE + (64 << 10)              # and the pages three keys landed in
    n = 100_000                                         # 2 MB of items, every slot: the file is dense
    f.put(np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int64) * 100, np.full(n, 1_700_000_000_000))
    f.flush()
    assert head + n * 20 <= blocks(f.path) <= (4 << 20) + 4 * PAGE     # items to a 2 MiB boundary
    f.close()
    again = IndexFile(tmp_path / "20260101000000000", slots, items)
    again.reserve()
    again.put(np.arange(10, dtype=np.int32), np.arange(n, n + 10, dtype=np.int64) * 100,
              np.full(10, 1_700_000_000_000))
    assert again.header.index_count == n + 14
    assert again.query(5, 0, 2**62, 10) == [(n + 5) * 100, 500]     # newest first
    again.close()
