"""The store's read-only view: what the read-only commands, retention, reindex and StoreReader look
at, a store, a commit-log directory or one segment file (a loose record file too, with --base).

One object lists the segments (tolerating retention deleting files meanwhile), holds the segment-size
rule, the commit point, the checkpoint and the committed end, names the holes in the commit log's
files, and maps a segment read-only with the guard against pages the disk cannot give.

Reading never takes the writer's lock, so it is safe while a writer runs. A view ends at the
store's last commit (commitpoint.json); the valid records past it (another writer's appends, or
an unfinished batch) are found by store.read.past_commit, and the commands show them marked as
such. A store without a commit point (a RocketMQ store) is read up to its last valid record.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from store.errors import StoreError, UnreadablePageError
from store.format.constants import CHECKPOINT_FILE, COMMITLOG_DIR, CONSUMEQUEUE_DIR
from store.log.segment import first_unreadable_data
from store.queue.units import is_file_name

if TYPE_CHECKING:
    from store.format.codec import CodecConfig
    from store.log.checkpoint import StoreCheckpoint
    from store.log.commit_point import CommitPoint
    from store.log.segment_queue import SegmentQueue
    from store.queue.consume_queue import ConsumeQueueStore


class SourceError(StoreError):
    """The path given to a command is not a store, a commit-log directory or a segment file."""


@dataclass
class SegmentFile:
    path: Path
    base_offset: int
    size: int
    check_physical_offset: bool = True   # False for a loose record file whose start is unknown
    mtime: float = 0.0                   # its last write (retention's age), epoch seconds

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass(frozen=True)
class LayoutProblem:
    """A hole in the commit log's files: a segment missing between two others, one of the wrong
    size (bytes that cannot be read where the next segment says they are), one misnamed."""

    offset: int
    kind: str            # "missingSegment" | "segmentSize" | "segmentName"
    detail: str


@dataclass
class StoreView:
    kind: str                           # "store" | "commitlog" | "segment"
    path: Path
    segments: list[SegmentFile]
    root: Path | None = None            # the store root, when kind == "store"
    committed_offset: int | None = None  # the commit point; None: read every valid record
    commit_point: CommitPoint | None = None
    checkpoint: StoreCheckpoint | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of_store(cls, root: str | Path) -> StoreView:
        """The view of the store at ``root``, taken as a store whatever is there yet (a reader may
        open one before its writer made the first segment)."""
        view = cls("store", Path(root), [], root=Path(root))
        view.refresh()
        return view

    def refresh(self) -> None:
        """List the segments again and re-read the commit point (a running writer moves both on)."""
        if self.root is None:
            return
        from store.log.checkpoint import read_checkpoint
        from store.log.commit_point import read_commit_point

        self.segments = list_segments(self.root / COMMITLOG_DIR)
        self.commit_point = read_commit_point(self.root)
        self.committed_offset = self.commit_point.offset if self.commit_point is not None else None
        self.checkpoint = read_checkpoint(self.root / CHECKPOINT_FILE)

    @property
    def limit(self) -> int | None:
        return self.committed_offset

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def segment_size(self) -> int:
        """The segment size of the commit log: store_segment_size over its segments."""
        return store_segment_size(s.size for s in self.segments)

    def segment_at(self, offset: int) -> SegmentFile | None:
        for s in self.segments:
            if s.base_offset <= offset < s.end_offset:
                return s
        return None

    def segment_end(self, seg: SegmentFile) -> int:
        """Where reading this segment stops: its size, or the commit point inside it."""
        end = seg.size
        if self.committed_offset is not None:
            end = max(0, min(end, self.committed_offset - seg.base_offset))
        return end

    def committed_end(self, config: CodecConfig | None = None) -> int:
        """The offset nothing at or after is committed: the commit point, or for a store without
        one (a RocketMQ store) the end of the valid data, found by scanning the newest segment (an
        empty file after it, a creation a crash cut short, holds nothing)."""
        if self.committed_offset is not None:
            return self.committed_offset
        written = [s for s in self.segments if s.size]
        if not written:
            return 0
        from store.scan.record_check import scan_segment_fast

        last = written[-1]
        with mapped(last) as mv:
            scan = scan_segment_fast(mv, last.base_offset, config=config)
        if scan.stop.kind == "blank":
            return last.end_offset
        return scan.end_offset

    def segment_queue(self) -> SegmentQueue:
        """The listed segments mapped read-only as a segment queue (StoreReader's)."""
        from store.log.segment_queue import SegmentQueue

        queue = SegmentQueue(self.path / COMMITLOG_DIR if self.kind == "store" else self.path,
                             self.segment_size or 4096, read_only=True, preallocate=False)
        self.load_into(queue)
        return queue

    def load_into(self, queue: SegmentQueue) -> None:
        """Map the listed segments ``queue`` does not hold yet."""
        if self.segment_size:
            queue.load([(s.base_offset, s.path) for s in self.segments])

    def consume_queues(self) -> ConsumeQueueStore | None:
        if self.root is None or not (self.root / CONSUMEQUEUE_DIR).is_dir():
            return None
        from store.queue.consume_queue import ConsumeQueueStore

        cq = ConsumeQueueStore(self.root, read_only=True)
        cq.commitlog_min_offset = self.segments[0].base_offset if self.segments else 0
        cq.load()
        return cq

    def layout_problems(self) -> list[LayoutProblem]:
        """Every segment the size of the others, named by its start, each starting where the one
        before ends. The newest segment of a writer may be shorter than its size only if nothing
        after it exists (it is not: RocketMQ creates segments whole), so it is held to the rule too."""
        problems: list[LayoutProblem] = []
        if self.kind == "segment" or not self.segments:
            return problems
        expected = self.segment_size
        segs = self.segments
        for i, s in enumerate(segs):
            if s.size != expected:
                lost = f": bytes {s.base_offset + s.size}..{s.base_offset + expected} cannot be read" \
                    if s.size < expected else ""
                problems.append(LayoutProblem(s.base_offset, "segmentSize",
                                              f"segment {s.name} is {s.size} bytes, the others {expected}{lost}"))
            if expected and s.base_offset % expected:
                problems.append(LayoutProblem(s.base_offset, "segmentName",
                                              f"segment {s.name} does not start at a multiple of the segment "
                                              f"size {expected}"))
            if i + 1 < len(segs):
                want = s.base_offset + expected
                got = segs[i + 1].base_offset
                if got != want:
                    problems.append(LayoutProblem(want, "missingSegment",
                                                  f"no segment at {want}: after {s.name} comes "
                                                  f"{segs[i + 1].name} ({got - want} bytes missing)"))
        return problems


def list_segments(cdir: str | os.PathLike[str]) -> list[SegmentFile]:
    """The segment files of a commit-log directory, oldest first (none when it does not exist)."""
    cdir = Path(cdir)
    try:
        names = sorted(n for n in os.listdir(cdir) if is_file_name(n))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        try:
            st = (cdir / name).stat()
        except FileNotFoundError:
            continue    # retention deleted it while we listed
        out.append(SegmentFile(cdir / name, int(name), st.st_size, mtime=st.st_mtime))
    return out


def store_segment_size(sizes: Iterable[int]) -> int:
    """The segment size of a store whose segment files have ``sizes``: the size most of them have,
    the larger on a tie (a damaged file is cut short, never longer), so that one cut short is named
    as the odd one; empty files do not count (0: none). The one rule the writer, the readers and the
    tools take a store's segment size by."""
    counts: dict[int, int] = {}
    for size in sizes:
        if size:
            counts[size] = counts.get(size, 0) + 1
    return max(counts, key=lambda size: (counts[size], size)) if counts else 0


def segment_size_on_disk(directory: str | os.PathLike[str]) -> int:
    """The size of a commit log's segments, as its files have it (0: no segment yet): see
    store_segment_size. A store keeps the segment size it was made with."""
    return store_segment_size(s.size for s in list_segments(directory))


def open_view(path: str | Path, base: int | None = None) -> StoreView:
    """Work out what ``path`` is. ``base`` overrides the start offset of a single segment file
    (default: its 20-digit name, else 0)."""
    p = Path(path)
    if not p.exists():
        raise SourceError(f"{p} does not exist")
    if p.is_file():
        known = base is not None or is_file_name(p.name)
        if not known:
            _check_loose_records(p)
        b = base if base is not None else (int(p.name) if is_file_name(p.name) else 0)
        return StoreView("segment", p, [SegmentFile(p, b, p.stat().st_size, check_physical_offset=known)])
    if (p / COMMITLOG_DIR).is_dir():
        return StoreView.of_store(p)
    segs = list_segments(p)
    if segs:
        return StoreView("commitlog", p, segs)
    what = "an empty directory" if not any(p.iterdir()) else "a directory"
    raise SourceError(f"{p} is {what}, not a store (no {COMMITLOG_DIR}/ inside), a commit-log directory "
                      f"(no 20-digit segment files) or a segment file")


def _check_loose_records(p: Path) -> None:
    """A file not named as a segment is read as records only if it starts with one (a message or a
    BLANK), so that a text file is not taken for a damaged segment. An empty file holds zero records
    (a vector whose every message was refused), as RocketMQ's decoder reads it."""
    from store.format.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2

    with open(p, "rb") as f:
        head = f.read(8)
    if not head:
        return
    magic = int.from_bytes(head[4:8], "big") if len(head) == 8 else None
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE):
        raise SourceError(f"{p} is not a segment file (it starts with {head[:8]!r}, not a record's TOTALSIZE and "
                          f"MAGICCODE); a segment is named by its 20-digit start offset, "
                          f"or give --base OFFSET to read a file of records")


@contextmanager
def mapped(seg: SegmentFile, probe: tuple[int, int] | None = None) -> Iterator[memoryview]:
    """The segment's bytes, memory-mapped read-only (zero-copy). ``probe``: the only part the caller
    reads (default: all of it)."""
    with open(seg.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # a page the disk cannot give (EIO) would arrive as SIGBUS while it is read, and end the process
    lo, hi = (0, size) if probe is None else (max(probe[0], 0), min(probe[1], size))
    bad = first_unreadable_data(mm, seg.path, lo, hi)
    if bad >= 0:
        mm.close()
        raise UnreadablePageError(seg.base_offset + bad, seg.path.name)
    try:
        mv = memoryview(mm)
        try:
            yield mv
        finally:
            mv.release()
    finally:
        try:
            mm.close()
        except BufferError:
            pass   # a view still held by a caller; the map goes with it
