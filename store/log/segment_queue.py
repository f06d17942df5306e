"""The ordered segments of a commit log directory (RocketMQ's MappedFileQueue).

Segments are contiguous: segment i starts at ``first_base + i * size``, so the segment of an
offset is found by arithmetic, with a scan as fallback should the list ever have a gap.
The next segment is created, with its first pages faulted in, by a background thread as soon as
the writer is in the current one (RocketMQ's AllocateMappedFileService prepares the next file when
one is created), so that a roll never waits for it: preparing once the current one was a quarter
full left a fast writer waiting at the roll. The exception is a store's first segment, whose
successor is prepared only once it is a quarter full (PREALLOCATE_FIRST_AT): the job is starting
then, and a store that never gets that far (a short replay, a test) never pays for it. Within
the last segment, store.log.warm_ahead keeps a window ahead of the writer faulted in: faulting costs
kernel time on the cores the writer and Spark run on (BENCHMARKS.md, "Segment roll"), so only pages
about to be written are worth it. ``warm_first`` faults a new store's whole first segment at once.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

from store.errors import SegmentSizeError
from store.log.segment import Segment, fsync_dir, parse_segment_name, read_ahead, segment_name
from store.log.warm_ahead import WarmAhead

log = logging.getLogger(__name__)

PREALLOCATE_FIRST_AT = 0.25   # the fill of a store's only segment at which its successor is prepared


class SegmentQueue:
    def __init__(self, directory: Path, segment_size: int, *, read_only: bool = False,
                 preallocate: bool = True, warm_first: bool = False, mlock: bool = False) -> None:
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.read_only = read_only
        self.preallocate = preallocate and not read_only
        self.warm_first = warm_first
        self.mlock = mlock
        self.segments: list[Segment] = []
        # Guards the list: the flush thread snapshots it while the writer rolls.
        self.lock = threading.Lock()
        self._next: Future[Segment] | None = None
        self._next_thread: threading.Thread | None = None
        self._next_cancel = threading.Event()
        self._warm_ahead = WarmAhead(self)

    # --- loading ---------------------------------------------------------------------------
    def load(self, listing: Sequence[tuple[int, Path]] | None = None) -> None:
        """Map every segment of the directory (past the ones already mapped: a reader calls
        this again to follow a writer, with the (base offset, path) ``listing`` its
        store.read.view made). A zero-length last file (a creation cut short by a crash in an
        older writer) is removed; any other size mismatch is an error naming the file, since
        guessing would corrupt offsets."""
        if not self.read_only:
            self.directory.mkdir(parents=True, exist_ok=True)
            for tmp in self.directory.glob("*.tmp"):
                log.warning("removing unfinished segment file %s", tmp)
                tmp.unlink()
        if not self.directory.is_dir():
            return
        after = self.segments[-1].base_offset if self.segments else -1
        if listing is None:
            listing = [(b, p) for p in self.directory.iterdir() if (b := parse_segment_name(p.name)) is not None]
        named = sorted((b, p) for b, p in listing if b > after and p.is_file())
        for i, (base, path) in enumerate(named):
            try:
                actual = path.stat().st_size
            except FileNotFoundError:  # a reader racing retention: the oldest file just went
                continue
            if actual == 0 and i == len(named) - 1:
                if not self.read_only:
                    log.warning("removing empty last segment file %s", path)
                    path.unlink()
                continue
            if actual != self.segment_size:
                raise SegmentSizeError(
                    f"segment {path} is {actual} bytes, the store's segments are {self.segment_size}: "
                    f"{'it is damaged (cut short?)' if actual < self.segment_size else 'it is not of this store'};"
                    f" restore it from a backup, or move it away")
            if base % self.segment_size != 0:
                raise SegmentSizeError(
                    f"segment {path} starts at {base}, not a multiple of segment_size "
                    f"{self.segment_size}")
            if self.segments and base != self.segments[-1].base_offset + self.segment_size:
                raise SegmentSizeError(
                    f"segment {path} does not follow {self.segments[-1].path.name}: a segment is missing "
                    f"between them, the one at offset {self.segments[-1].base_offset + self.segment_size}")
            try:
                seg = Segment(path, base, self.segment_size, read_only=self.read_only)
            except FileNotFoundError:
                continue
            self.segments.append(seg)
        if not self.read_only and self.segments:
            self.segments[-1].reserve()     # the one the writer goes on with

    # --- lookup ----------------------------------------------------------------------------
    @property
    def first_base(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    def first(self) -> Segment | None:
        return self.segments[0] if self.segments else None

    def last(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def find(self, offset: int) -> Segment | None:
        """The segment holding global offset ``offset``, or None."""
        segs = self.segments
        if not segs:
            return None
        i = (offset - segs[0].base_offset) // self.segment_size
        if 0 <= i < len(segs):
            s = segs[i]
            if s.base_offset <= offset < s.base_offset + self.segment_size:
                return s
        for s in segs:  # only reached if the list has a gap
            if s.base_offset <= offset < s.base_offset + self.segment_size:
                return s
        return None

    def index_of(self, seg: Segment) -> int:
        return (seg.base_offset - self.first_base) // self.segment_size

    def snapshot(self) -> list[Segment]:
        with self.lock:
            return list(self.segments)

    @property
    def min_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    @property
    def max_offset(self) -> int:
        """Global write end: the last segment's base plus its wrote position."""
        last = self.last()
        return last.base_offset + last.wrote if last else 0

    # --- growth ----------------------------------------------------------------------------
    def create_first(self, base_offset: int = 0) -> Segment:
        base = base_offset - base_offset % self.segment_size
        seg = Segment.create(self.directory, base, self.segment_size, warm=self.warm_first, mlock=self.mlock)
        with self.lock:
            self.segments.append(seg)
        return seg

    def next_segment(self) -> Segment:
        """Create (or take the preallocated) segment after the last one and append it."""
        last = self.last()
        base = last.base_offset + self.segment_size if last else 0
        seg = self._take_preallocated(base)
        if seg is None:
            seg = Segment.create(self.directory, base, self.segment_size, warm=not self.preallocate, mlock=self.mlock)
        with self.lock:
            self.segments.append(seg)
        return seg

    def _take_preallocated(self, base: int) -> Segment | None:
        fut, self._next = self._next, None
        if fut is None:
            return None
        try:
            seg = fut.result()  # normally long done; a failure is retried synchronously
        except OSError as e:    # the caller creates it now, and says so if that fails too
            log.debug("background creation of segment %s failed: %s", segment_name(base), e)
            return None
        if seg.base_offset != base:
            seg.destroy()
            return None
        return seg

    def warm_ahead(self, batch_bytes: int = 0) -> None:
        """Fault in the pages just ahead of the writer, in the background (store.log.warm_ahead),
        a window sized to the last batch (``batch_bytes``)."""
        if self.preallocate:
            self._warm_ahead.nudge(batch_bytes)

    def preallocate_next(self, batch_bytes: int = 0) -> None:
        """Keep the pages ahead of the writer faulted in, and start preparing the segment after the
        last one (after the first, once it is PREALLOCATE_FIRST_AT full). The writer calls this after
        each append (of ``batch_bytes``); cheap when there is nothing to do."""
        self.warm_ahead(batch_bytes)
        if not self.preallocate or self._next is not None:
            return
        last = self.last()
        if last is None or (len(self.segments) == 1 and last.wrote < self.segment_size * PREALLOCATE_FIRST_AT):
            return
        base = last.base_offset + self.segment_size
        path = self.directory / segment_name(base)
        fut: Future[Segment] = Future()
        if path.exists():
            # Left behind by an earlier run (recovery deletes them; be safe anyway).
            fut.set_exception(FileExistsError(str(path)))
            self._next = fut
            return

        cancel = self._next_cancel = threading.Event()

        def run() -> None:
            try:
                seg = Segment.create(self.directory, base, self.segment_size, warm=False, mlock=self.mlock)
                seg.warm(cancel, until=self._warm_ahead.window)   # the rest as the writer gets there
                fut.set_result(seg)
            except BaseException as e:  # handed to the roller through the future
                fut.set_exception(e)

        self._next = fut
        t = threading.Thread(target=run, name=f"segment-prealloc-{base}", daemon=True)
        self._next_thread = t
        t.start()

    def cancel_preallocation(self) -> None:
        """Wait for the background creation and delete its file: a segment nobody wrote into
        must not outlive the writer (recovery would only delete it again)."""
        fut, self._next = self._next, None
        if fut is None:
            return
        self._next_cancel.set()   # stop pre-faulting pages nobody will write
        try:
            seg = fut.result()
        except BaseException:  # noqa: BLE001 - a failed preallocation has nothing to undo
            return
        seg.destroy()
        fsync_dir(self.directory)

    # --- shrinking (recovery) ----------------------------------------------------------------
    def delete_after(self, offset: int) -> list[Path]:
        """Delete every segment that starts after ``offset``; the segment ``offset`` falls in
        (or starts at) stays. Returns the deleted paths."""
        with self.lock:
            gone = [s for s in self.segments if s.base_offset > offset]
            self.segments = [s for s in self.segments if s.base_offset <= offset]
        for s in gone:
            s.destroy()
        if gone:
            fsync_dir(self.directory)
        return [s.path for s in gone]

    def delete_segment_files_after(self, offset: int) -> list[Path]:
        """Files named past ``offset`` that are not loaded (e.g. preallocated ones)."""
        removed = []
        for p in self.directory.iterdir():
            b = parse_segment_name(p.name)
            if b is not None and b > offset and all(s.path != p for s in self.segments):
                p.unlink()
                removed.append(p)
        if removed:
            fsync_dir(self.directory)
        return removed

    def close(self) -> None:
        self._warm_ahead.close()
        if not self.read_only:
            self.cancel_preallocation()
        with self.lock:
            segs, self.segments = self.segments, []
        for s in segs:
            s.close()

    def __iter__(self):
        return iter(self.segments)

    def __len__(self) -> int:
        return len(self.segments)


def zero_range(fd: int, start: int, end: int, chunk: int = 8 << 20) -> int:
    """Overwrite bytes [start, end) of a file with zeros where they are not zero already
    (stale records after a truncation point must not look valid to a later scan). Reads
    before writing so untouched, never-written space costs no writes; holes and unwritten
    extents (SEEK_DATA) are not read at all (after a crash this range is often most of a GiB
    segment). Returns how far past ``start`` data reached: the bytes truncated (0: nothing was
    there)."""
    reached = start
    zeros = bytes(chunk)
    pos = _next_data(fd, start, end)
    with read_ahead(fd, pos, end):
        while pos < end:
            n = min(chunk, end - pos)
            data = os.pread(fd, n, pos)
            if data != zeros[:len(data)]:
                os.pwrite(fd, zeros[:len(data)], pos)
                reached = pos + len(data.rstrip(b"\0"))
            if len(data) < n:
                break
            pos = _next_data(fd, pos + n, end)
    return reached - start


def _next_data(fd: int, pos: int, end: int) -> int:
    """The first position at or after ``pos`` that may hold data (``end`` if none): a hole
    reads as zeros, so it needs neither reading nor zeroing."""
    if pos >= end or not hasattr(os, "SEEK_DATA"):
        return pos
    try:
        return min(os.lseek(fd, pos, os.SEEK_DATA), end)
    except OSError as e:
        return end if e.errno == errno.ENXIO else pos    # ENXIO: only a hole from here on
