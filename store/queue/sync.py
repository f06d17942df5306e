"""Making the consume-queue files written since the last flush durable, in one pass.

A store of thousands of queues dirties thousands of files a batch. An fsync each costs a
journal commit each (about 1 ms on ext4 here, so 6 to 9 s for 6,000 queues); one syncfs(2)
writes them all and commits the journal once (0.1 to 0.3 s: bench/cq_flush.py). It covers
files whose descriptors were closed since they were written (the open-file bound evicts them)
and the new directory entries. Since Linux 5.8 syncfs reports a writeback error of any file of
the filesystem since the descriptor it is called on was opened: that descriptor is opened
before the first write it is to cover and held. An error on another file of the same
filesystem then fails the flush too: a false alarm, never a lost one.

Where syncfs cannot report errors (an older kernel, another system) each file is fsynced, and
a dirty file is fsynced before its descriptor is closed. A flush of a few files fsyncs them:
syncfs also writes whatever else on the filesystem is dirty, which a few fsyncs do not wait on.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

# Up to this many dirty files a flush fsyncs each, past it one syncfs: about where the two cost
# the same on this machine's ext4 (bench/cq_flush.py).
FEW_FILES = 32
_SYNCFS_REPORTS_ERRORS = (5, 8)


def _syncfs_call() -> "ctypes._CFuncPtr | None":
    if platform.system() != "Linux":
        return None
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < _SYNCFS_REPORTS_ERRORS:
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:       # removed since (a queue trimmed away)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class QueueSync:
    """The flush of one store's consume-queue files: which files it must cover and how."""

    def __init__(self, directory: Path, use_syncfs: bool = True) -> None:
        self.directory = directory
        self._syncfs = _syncfs_call() if use_syncfs else None
        self._held: int | None = None           # the descriptor syncfs is called on
        self._closed_dirty = False              # a file closed with writes the next flush must cover

    @property
    def syncs_filesystem(self) -> bool:
        return self._syncfs is not None

    def prepare(self) -> None:
        """Before the first write the next flush covers (the directory exists by then)."""
        if self._syncfs is not None and self._held is None:
            self._held = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)

    def close_file(self, fd: int, dirty: bool) -> None:
        """Close a queue file's descriptor; its writes, if any, are still made durable by the next
        flush."""
        try:
            if dirty:
                if self._syncfs is None:
                    os.fsync(fd)
                else:
                    self._closed_dirty = True
        finally:
            os.close(fd)

    def flush(self, dirty_fds: list[int], dirs: set[Path]) -> None:
        """Make durable the writes to ``dirty_fds``, to files closed dirty since the last flush,
        and the entries of ``dirs``."""
        if self._syncfs is not None and (self._closed_dirty or len(dirty_fds) > FEW_FILES):
            self.prepare()
            if self._syncfs(self._held) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs of {self.directory}: {os.strerror(err)}")
            self._closed_dirty = False
            return
        for fd in dirty_fds:
            os.fsync(fd)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            _fsync_dir(d)

    def close(self) -> None:
        if self._held is not None:
            os.close(self._held)
            self._held = None
