"""What the read-only commands look at: a store, a commit-log directory or one segment file.

Reading never takes the writer's lock, so it is safe while a writer runs. A Source ends at the
store's last commit (commitpoint.json); the valid records past it (another writer's appends, or
an unfinished batch) are found by store.log.past_commit, and the commands show them marked as
such. A store without a commit point (a RocketMQ store) is read up to its last valid record.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import StoreError, UnreadablePageError
from store.format.constants import CHECKPOINT_FILE, COMMITLOG_DIR, CONSUMEQUEUE_DIR
from store.log.segment import first_unreadable
from store.log.segment_queue import store_segment_size
from store.queue.units import is_file_name


class SourceError(StoreError):
    """The path given to a command is not a store, a commit-log directory or a segment file."""


@dataclass
class SegmentFile:
    path: Path
    base_offset: int
    size: int
    check_physical_offset: bool = True   # False for a loose record file whose start is unknown

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


@dataclass
class Source:
    kind: str                           # "store" | "commitlog" | "segment"
    path: Path
    segments: list[SegmentFile]
    root: Path | None = None            # the store root, when kind == "store"
    committed_offset: int | None = None  # the commit point; None: read every valid record
    commit_point: object | None = None  # store.log.commit_point.CommitPoint
    checkpoint: object | None = None    # store.log.checkpoint.StoreCheckpoint
    notes: list[str] = field(default_factory=list)

    @property
    def limit(self) -> int | None:
        return self.committed_offset

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.segments)

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

    def consume_queues(self) -> "object | None":
        if self.root is None or not (self.root / CONSUMEQUEUE_DIR).is_dir():
            return None
        from store.queue.consume_queue import ConsumeQueueStore

        cq = ConsumeQueueStore(self.root, read_only=True)
        cq.commitlog_min_offset = self.segments[0].base_offset if self.segments else 0
        cq.load()
        return cq


def _list_segments(cdir: Path) -> list[SegmentFile]:
    out = []
    for name in sorted(n for n in os.listdir(cdir) if is_file_name(n)):
        try:
            out.append(SegmentFile(cdir / name, int(name), (cdir / name).stat().st_size))
        except FileNotFoundError:
            continue    # retention deleted it while we listed
    return out


def open_source(path: str | Path, base: int | None = None) -> Source:
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
        return Source("segment", p, [SegmentFile(p, b, p.stat().st_size, check_physical_offset=known)])
    if (p / COMMITLOG_DIR).is_dir():
        from store.log.checkpoint import read_checkpoint
        from store.log.commit_point import read_commit_point

        cp = read_commit_point(p)
        return Source("store", p, _list_segments(p / COMMITLOG_DIR), root=p,
                      committed_offset=cp.offset if cp is not None else None, commit_point=cp,
                      checkpoint=read_checkpoint(p / CHECKPOINT_FILE))
    segs = _list_segments(p)
    if segs:
        return Source("commitlog", p, segs)
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
def mapped(seg: SegmentFile) -> Iterator[memoryview]:
    """The segment's bytes, memory-mapped read-only (zero-copy)."""
    with open(seg.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # a page the disk cannot give (EIO) would arrive as SIGBUS while it is read, and end the process
    bad = first_unreadable(mm, 0, size)
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


def committed_end(src: Source) -> int:
    """The offset nothing at or after is committed: the commit point, or for a store without
    one (a RocketMQ store) the end of the valid data, found by scanning the newest segment."""
    if src.committed_offset is not None:
        return src.committed_offset
    if not src.segments:
        return 0
    from store.scan.record_check import scan_segment_fast

    last = src.segments[-1]
    with mapped(last) as mv:
        scan = scan_segment_fast(mv, last.base_offset)
    if scan.stop.kind == "blank":
        return last.end_offset
    return scan.end_offset


@dataclass(frozen=True)
class LayoutProblem:
    """A hole in the commit log's files: a segment missing between two others, one of the wrong
    size (bytes that cannot be read where the next segment says they are), one misnamed."""

    offset: int
    kind: str            # "missingSegment" | "segmentSize" | "segmentName"
    detail: str


def segment_size_of(src: Source) -> int:
    """The segment size of a store: segment_queue.store_segment_size over its segments."""
    return store_segment_size(s.size for s in src.segments)


def layout_problems(src: Source) -> list[LayoutProblem]:
    """Every segment the size of the others, named by its start, each starting where the one
    before ends. The newest segment of a writer may be shorter than its size only if nothing
    after it exists (it is not: RocketMQ creates segments whole), so it is held to the rule too."""
    problems: list[LayoutProblem] = []
    if src.kind == "segment" or not src.segments:
        return problems
    expected = segment_size_of(src)
    for i, s in enumerate(src.segments):
        if s.size != expected:
            lost = f": bytes {s.base_offset + s.size}..{s.base_offset + expected} cannot be read" \
                if s.size < expected else ""
            problems.append(LayoutProblem(s.base_offset, "segmentSize",
                                          f"segment {s.name} is {s.size} bytes, the others {expected}{lost}"))
        if expected and s.base_offset % expected:
            problems.append(LayoutProblem(s.base_offset, "segmentName",
                                          f"segment {s.name} does not start at a multiple of the segment size "
                                          f"{expected}"))
        if i + 1 < len(src.segments):
            want = s.base_offset + expected
            got = src.segments[i + 1].base_offset
            if got != want:
                problems.append(LayoutProblem(want, "missingSegment",
                                              f"no segment at {want}: after {s.name} comes "
                                              f"{src.segments[i + 1].name} ({got - want} bytes missing)"))
    return problems
