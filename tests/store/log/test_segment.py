"""Segments and the segment queue: naming, sizes, lookup, background preallocation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from store import Message, MessageStore, SegmentSizeError, StoreConfig
from store.log.segment import Segment, parse_segment_name, segment_name
from store.log.segment_queue import SegmentQueue, zero_range
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def test_segment_files_are_named_by_their_20_digit_start_offset() -> None:
    assert segment_name(1073741824) == "00000000001073741824"
    assert parse_segment_name("00000000001073741824") == 1073741824
    assert parse_segment_name("00000000001073741824.tmp") is None


def test_a_created_segment_has_its_full_size_and_is_zero(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 3 * SEG, SEG)
    try:
        assert seg.path.name == segment_name(3 * SEG)
        assert seg.path.stat().st_size == SEG and seg.path.stat().st_blocks * 512 >= SEG  # blocks reserved
        assert not seg.buf.any() and (seg.wrote, seg.flushed) == (0, 0)
        assert not list(tmp_path.glob("*.tmp"))
    finally:
        seg.close()


def test_the_segment_of_an_offset_is_found_by_arithmetic(tmp_path: Path) -> None:
    q = SegmentQueue(tmp_path, SEG, preallocate=False)
    q.create_first(10 * SEG + 5)
    for _ in range(3):
        q.next_segment()
    try:
        assert [s.base_offset for s in q] == [10 * SEG, 11 * SEG, 12 * SEG, 13 * SEG]
        assert q.find(12 * SEG + 100).base_offset == 12 * SEG
        assert q.find(13 * SEG + SEG - 1).base_offset == 13 * SEG
        assert q.find(10 * SEG - 1) is None and q.find(14 * SEG) is None
    finally:
        q.close()


def test_loading_refuses_a_segment_of_another_size_and_a_gap(tmp_path: Path) -> None:
    (tmp_path / segment_name(0)).write_bytes(bytes(SEG))
    (tmp_path / segment_name(2 * SEG)).write_bytes(bytes(SEG))
    with pytest.raises(SegmentSizeError, match="missing"):
        SegmentQueue(tmp_path, SEG).load()
    (tmp_path / segment_name(SEG)).write_bytes(bytes(SEG - 4096))
    with pytest.raises(SegmentSizeError, match=segment_name(SEG) + " is 61440 bytes, the store.s segments are 65536"):
        SegmentQueue(tmp_path, SEG).load()


def test_the_next_segment_is_created_ahead_and_a_roll_takes_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[int] = []
    create = Segment.create.__func__

    def recorded(cls: type[Segment], directory: Path, base_offset: int, *args: object, **kwargs: object) -> Segment:
        created.append(base_offset)
        return create(cls, directory, base_offset, *args, **kwargs)

    monkeypatch.setattr(Segment, "create", classmethod(recorded))
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=True)) as s:
        nxt = root / "commitlog" / segment_name(SEG)
        s.append([Message(topic="P", body=bytes(SEG // 8))])
        s.flush()
        # the append decides whether to prepare the next segment and starts that thread before it
        # returns: once no such thread is left running, what it created is in ``created``
        for t in threading.enumerate():
            if t.name.startswith("segment-prealloc-"):
                t.join()
        assert created == [0] and not nxt.exists()             # an eighth full: not yet
        s.append([Message(topic="P", body=bytes(SEG // 8))])   # a quarter full: now
        wait_until(nxt.exists, 10, f"{nxt.name} prepared")     # before anyone needed it
        inode = nxt.stat().st_ino
        r = s.append([Message(topic="P", body=bytes(20_000)) for _ in range(3)])
        assert int(r.physical_offsets[-1]) >= SEG
        assert nxt.stat().st_ino == inode                      # the roll used the prepared file
        # past the store's first segment, the next one is prepared as soon as the writer is in one
        wait_until((root / "commitlog" / segment_name(2 * SEG)).exists, 10, f"{segment_name(2 * SEG)} prepared")
    # an unused prepared segment does not outlive the writer
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == [segment_name(0), segment_name(SEG)]


def test_zero_range_only_writes_where_bytes_are_not_zero(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(bytes(10_000) + b"\x01" * 10 + bytes(10_000))
    import os

    fd = os.open(p, os.O_RDWR)
    try:
        assert zero_range(fd, 0, 20_010, chunk=4096) == 10_010    # data reached 10 bytes past 10,000
        assert zero_range(fd, 0, 20_010, chunk=4096) == 0
    finally:
        os.close(fd)
    assert p.read_bytes() == bytes(20_010)


def test_zero_range_skips_holes_but_still_wipes_data_after_them(tmp_path: Path) -> None:
    import os

    p = tmp_path / "sparse"
    fd = os.open(p, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, 64 << 20)                          # a 64 MiB hole ...
        os.pwrite(fd, b"\x07" * 100, (48 << 20) + 5)        # ... with stale bytes far inside
        assert zero_range(fd, 1 << 20, 64 << 20) == (48 << 20) + 105 - (1 << 20)   # up to the last stale byte
        assert zero_range(fd, 1 << 20, 64 << 20) == 0
        assert os.pread(fd, 200, 48 << 20) == bytes(200)
    finally:
        os.close(fd)


def test_reading_ahead_is_only_a_hint(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, 0, 8 << 20, warm=False)
    try:
        seg.buf[(5 << 20):(5 << 20) + 3] = [1, 2, 3]
        with seg.read_ahead(0, seg.size):
            assert bytes(seg.view[(5 << 20):(5 << 20) + 4]) == b"\x01\x02\x03\x00"
        with seg.read_ahead(seg.size, seg.size):            # an empty range is fine too
            pass
    finally:
        seg.close()


def test_pre_faulting_stops_between_steps_when_the_writer_closes(tmp_path: Path) -> None:
    import threading

    seg = Segment.create(tmp_path, 0, 8 << 20, warm=False)
    try:
        stop = threading.Event()
        assert seg.warm(stop, step=1 << 20)          # not cancelled: every step done
        stop.set()
        assert not seg.warm(stop, step=1 << 20)      # cancelled: returns before the first step
        assert bytes(seg.view[:16]) == bytes(16)     # and a warmed segment is still all zeros
    finally:
        seg.close()


def test_a_window_ahead_of_the_writer_is_faulted_in_and_written_bytes_are_left_alone(tmp_path: Path) -> None:
    from store.log.warm_ahead import WarmAhead

    q = SegmentQueue(tmp_path, 8 << 20, preallocate=False)
    seg = q.create_first(0)
    warm = WarmAhead(q, window=1 << 20, step=256 << 10)
    try:
        seg.buf[:5000] = 7
        seg.wrote = 5000

        def settled(expected: int) -> bool:
            return wait_until(lambda: warm.warmed_to == expected, 10, f"the window warmed to {expected}")

        warm.nudge()
        assert settled(5000 + (1 << 20))                   # one window past the write position, no more
        seg.wrote = (8 << 20) - 100
        warm.nudge()
        assert settled(8 << 20)                            # never past the segment's end
        assert bytes(seg.view[:5000]) == b"\x07" * 5000 and bytes(seg.view[5000:5100]) == bytes(100)
    finally:
        warm.close()
        q.close()
    assert not warm.running                                # joined: it cannot touch an unmapped segment


def test_the_window_ahead_grows_to_two_of_the_last_batch(tmp_path: Path) -> None:
    from store.log.warm_ahead import BATCHES_AHEAD, WarmAhead

    q = SegmentQueue(tmp_path, 16 << 20, preallocate=False)
    seg = q.create_first(0)
    warm = WarmAhead(q, window=1 << 20, step=256 << 10)
    try:
        seg.wrote = 4096
        warm.nudge(3 << 20)                                # a batch of 3 MiB was just written
        want = 4096 + BATCHES_AHEAD * (3 << 20)
        wait_until(lambda: warm.warmed_to == want, 10, f"the window warmed to {want}")
        warm.nudge(1000)                                   # small batches: the window's least size
        assert warm.window == 1 << 20
    finally:
        warm.close()
        q.close()


def test_the_window_moves_on_from_where_the_last_one_ended_between_pages(tmp_path: Path) -> None:
    """The window's end is rarely a page boundary: the next step starts there all the same (madvise
    refused such a start, and the thread took that for a kernel without MADV_POPULATE_WRITE)."""
    from store.log.warm_ahead import WarmAhead

    q = SegmentQueue(tmp_path, 8 << 20, preallocate=False)
    seg = q.create_first(0)
    warm = WarmAhead(q, window=1 << 20, step=256 << 10)
    try:
        def settled(expected: int) -> bool:
            return wait_until(lambda: warm.warmed_to == expected, 10, f"the window warmed to {expected}")

        seg.wrote = 5000
        warm.nudge()
        assert settled(5000 + (1 << 20))
        seg.wrote = 5000 + (600 << 10)                     # still inside the window warmed
        warm.nudge()
        assert settled(seg.wrote + (1 << 20)) and warm.running
    finally:
        warm.close()
        q.close()
