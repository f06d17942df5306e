"""The files of a store's consume queues and what is known of each queue: consumequeue/<topic>/<queueId>/
<20-digit byte offset> files of 20-byte units (FORMAT.md §12), found and scanned (RocketMQ's
ConsumeQueue.load and its min/max offsets). The reads (store.queue.read), the trimming
(store.queue.trim) and the writing (store.queue.consume_queue) are built on it, in that order."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from store.errors import ConsumeQueueError
from store.format.constants import CONSUMEQUEUE_DIR, CQ_STORE_UNIT_SIZE, DEFAULT_CONSUME_QUEUE_UNITS
from store.queue.sync import QueueSync
from store.queue.units import UNIT_DTYPE, file_name, list_unit_files, prefix_counts, written_count

# The writer's open queue files at most (descriptors, each with its page-cache state): a store
# of more queues than this closes the least recently written ones and opens them again when
# written, as the broker maps its queue files on demand.
DEFAULT_MAX_OPEN_QUEUE_FILES = 1024


@dataclass
class _Queue:
    topic: str
    queue_id: int
    path: Path
    files: list[int] = field(default_factory=list)   # start byte offsets, ascending
    min_offset: int = 0                                # first real (non-blank) queue offset
    max_offset: int = 0                                # next queue offset
    fd: int | None = None                              # writer: the last file, open
    fd_start: int = -1
    dirty: bool = False
    reserved: int = 0                                  # bytes of the file at fd_start with their blocks
    fresh: bool = False                                # writer: files made for a batch, nothing written yet


class ConsumeQueueFiles:
    """Every consume queue of one store, as found on disk: the state the reads, the trimming and
    the writing share, owned here."""

    def __init__(self, root: Path, units_per_file: int = DEFAULT_CONSUME_QUEUE_UNITS,
                 read_only: bool = False, max_open_files: int = DEFAULT_MAX_OPEN_QUEUE_FILES) -> None:
        if units_per_file <= 0:
            raise ValueError(f"units_per_file must be positive, got {units_per_file}")
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be at least 1, got {max_open_files}")
        self.root = Path(root)
        self.dir = self.root / CONSUMEQUEUE_DIR
        self.units_per_file = units_per_file
        self.read_only = read_only
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._lock = threading.RLock()
        self._loaded = False
        self._dirs_to_sync: set[Path] = set()
        # completed files written since the last flush, still open: flush() fsyncs and closes
        # them, so filling a file costs the append no fsync of its own
        self._filled_fds: list[int] = []
        self.max_open_files = max_open_files
        self._open: OrderedDict[tuple[str, int], _Queue] = OrderedDict()   # queues with a file open, LRU first
        self._dirty: dict[tuple[str, int], _Queue] = {}                    # written since the last flush
        self._sync = QueueSync(self.dir)
        # A reader sets this to the commit log's first offset, so queue minimums skip units whose
        # records retention deleted (the writer corrects its own in delete_below).
        self.commitlog_min_offset = 0
        self._scratch = np.empty(0, dtype=UNIT_DTYPE)

    @property
    def file_size(self) -> int:
        return self.units_per_file * CQ_STORE_UNIT_SIZE

    # --- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read every queue's files: the next queue offset from the last file's first zero unit."""
        with self._lock:
            self._close_fds()
            self._queues = {}
            for topic, qid, qdir in self._queue_dirs():
                q = _Queue(topic, qid, qdir)
                try:
                    self._scan(q)
                except FileNotFoundError:
                    self._scan(q)   # retention removed a file between listing and reading
                if q.files:
                    self._queues[(topic, qid)] = q
            self._loaded = True

    def _queue_dirs(self) -> Iterator[tuple[str, int, Path]]:
        if not self.dir.is_dir():
            return
        for tdir in sorted(self.dir.iterdir()):
            if not tdir.is_dir():
                continue
            for qdir in sorted(tdir.iterdir()):
                if qdir.is_dir() and qdir.name.lstrip("-").isdigit():
                    yield tdir.name, int(qdir.name), qdir

    def _scan(self, q: _Queue) -> None:
        q.files = list_unit_files(q.path)
        if not q.files:
            q.min_offset = q.max_offset = 0
            return
        first_path, last_path = q.path / file_name(q.files[0]), q.path / file_name(q.files[-1])
        base = q.files[0] // CQ_STORE_UNIT_SIZE
        if self.read_only:
            # a reader looks at few units of a writer's files, and takes their size as it is
            self._adopt_file_size(first_path)
            q.max_offset = q.files[-1] // CQ_STORE_UNIT_SIZE + prefix_counts(last_path)[0]
            written, skipped = prefix_counts(first_path, self.commitlog_min_offset)
            q.min_offset = base + skipped if skipped < written or len(q.files) == 1 else \
                q.files[1] // CQ_STORE_UNIT_SIZE
            return
        for start in q.files:
            path = q.path / file_name(start)
            size = path.stat().st_size
            if size != self.file_size or start % self.file_size:
                raise ConsumeQueueError(
                    f"consume-queue file {path} is {size} bytes, expected {self.file_size} "
                    f"({self.units_per_file} units of {CQ_STORE_UNIT_SIZE}) at a multiple of that; set "
                    f"consume_queue_units to match, or delete the queue directory to rebuild it")
        # the end: RocketMQ's rule, the first unit that is not (offset >= 0, size > 0) in the last
        # file, read whole; the head: the blank filler, a prefix written in one go, found by search
        q.max_offset = q.files[-1] // CQ_STORE_UNIT_SIZE + written_count(last_path)
        written, blanks = prefix_counts(first_path)
        if len(q.files) == 1:
            written = q.max_offset - base
        q.min_offset = base + min(blanks, written) if blanks < written or len(q.files) == 1 else \
            q.files[1] // CQ_STORE_UNIT_SIZE

    def _adopt_file_size(self, path: Path) -> None:
        """A reader takes the unit count of the files it finds (a store may use any size)."""
        size = path.stat().st_size
        if size and size % CQ_STORE_UNIT_SIZE == 0 and size != self.file_size:
            self.units_per_file = size // CQ_STORE_UNIT_SIZE

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def _close_fds(self) -> None:
        """Close every file without making its writes durable (a flush first does that)."""
        while self._filled_fds:
            os.close(self._filled_fds.pop())
        for q in self._open.values():
            if q.fd is not None:
                os.close(q.fd)
                q.fd, q.fd_start, q.dirty = None, -1, False
        self._open.clear()
        self._dirty.clear()
        self._sync.close()

    def _close_queue_file(self, q: _Queue) -> None:
        """Close ``q``'s open file; what was written to it stays for the next flush."""
        if q.fd is None:
            return
        fd, dirty = q.fd, q.dirty
        q.fd, q.fd_start, q.dirty, q.reserved = None, -1, False, 0
        self._open.pop((q.topic, q.queue_id), None)
        self._dirty.pop((q.topic, q.queue_id), None)
        self._sync.close_file(fd, dirty)

    def _drop_queue_file(self, q: _Queue) -> None:
        """Close ``q``'s open file whose writes no longer matter (it is being deleted)."""
        if q.fd is not None:
            os.close(q.fd)
            q.fd, q.fd_start, q.dirty, q.reserved = None, -1, False, 0
        self._open.pop((q.topic, q.queue_id), None)
        self._dirty.pop((q.topic, q.queue_id), None)

    def _room_for_one_more(self) -> None:
        """Keep the open files under ``max_open_files`` with one more: filled files first, then
        the queue written least recently."""
        while len(self._open) + len(self._filled_fds) >= self.max_open_files:
            if self._filled_fds:
                self._sync.close_file(self._filled_fds.pop(0), True)
            else:
                _, q = next(iter(self._open.items()))
                self._close_queue_file(q)

