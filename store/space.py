"""Disk space for the files written in place: commit-log segments, consume-queue files, IndexFiles.

Each is created at its full size and then written into (through a mapping, or pwrite at a
position). A sparse file takes its blocks only when a page is first written: on a full disk a
store into a mapping then ends the process with SIGBUS, and a pwrite fails in the middle of a
batch. Reserving blocks (posix_fallocate) before anything is written there turns a full disk into
an OSError at the reservation, before a byte of the batch goes into the file, which the caller
reports and survives.

A commit-log segment is reserved whole when it is created. Consume-queue files and an IndexFile's
items are written in order from their start, so they are created sparse at their full length (a
broker checks the length) and reserved ahead of the writes in steps (``next_reserved``): a store
of thousands of queues with few units each then takes a page or so per queue, as RocketMQ's own
sparse files do, not each file's full size (an IndexFile's slot table, written at random, a page
as keys first reach it: store.index.blocks). A file the writer goes on writing that it did not
create (RocketMQ's, or one from before this rule) is reserved from what it holds when it is
opened for writing: a no-op for the blocks it already has.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from store.errors import FileSpaceError
from store.failed_call import remedy

log = logging.getLogger(__name__)

# posix_fallocate's answers for a filesystem that cannot reserve (glibc emulates it almost
# everywhere; these remain for the few where it cannot): the file stays sparse.
_NOT_SUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)


# The first step a file is reserved ahead by (one page: a queue with a few units costs what the
# broker's mapped page costs it), and the most one step adds (a queue written fast reserves a MiB
# at a time: about 50,000 units, so a 6 MB file takes a few fallocate calls, not thousands, while
# what is reserved and not yet written stays under a MiB per file). Between the two each step
# doubles what is reserved, so what is ahead is never more than what is written.
FIRST_STEP = 4096
MOST_STEP = 1 << 20


def next_reserved(reserved: int, need: int, limit: int, first: int = FIRST_STEP, most: int = MOST_STEP) -> int:
    """How far a file reserved up to ``reserved`` bytes is to be reserved so that ``need`` bytes
    fit: at least ``need``, ahead by a step that doubles from ``first`` up to ``most``, in whole
    pages of ``first``, never past ``limit`` (the file's length). ``reserved`` when it holds."""
    if need <= reserved:
        return reserved
    step = min(max(reserved, first), most)
    end = max(need, reserved + step)
    return min(-(-end // first) * first, limit)


def reserve(fd: int, size: int, path: Path, what: str, start: int = 0) -> None:
    """Give bytes [start, size) of the open file ``fd`` their disk blocks, growing it to ``size``.
    A full disk, a quota or a file size limit raises FileSpaceError naming the file (``path``)."""
    if size <= start:
        return
    try:
        os.posix_fallocate(fd, start, size - start)
    except OSError as e:
        if e.errno in _NOT_SUPPORTED:
            log.debug("%s %s: the filesystem cannot reserve blocks (%s); left sparse", what, path, e.strerror)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            return
        raise FileSpaceError(e.errno, f"cannot reserve {size - start:,} bytes on disk for {what} {path} (fallocate): "
                                      f"{e.strerror}; {remedy(e.errno)}", str(path)) from e


def create_reserved(path: Path, size: int, what: str, named: Path | None = None,
                    reserved: int | None = None) -> int:
    """Create ``path`` (it must not exist) at ``size`` bytes with the blocks of its first
    ``reserved`` bytes reserved (all of them by default), the rest sparse; its fd, open read-write.
    On failure nothing is left behind. ``named``: the file's name in messages, when ``path`` is a
    temporary name it is renamed from."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if reserved is not None and reserved < size:
            os.ftruncate(fd, size)
        reserve(fd, size if reserved is None else min(reserved, size), named or path, what)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return fd


def reserve_path(path: Path, size: int, what: str, start: int = 0) -> None:
    """Reserve the blocks of bytes [start, size) of an existing file the writer is about to go on
    writing."""
    fd = os.open(path, os.O_RDWR)
    try:
        reserve(fd, size, path, what, start)
    finally:
        os.close(fd)


def data_extents(path: Path, start: int, end: int) -> list[tuple[int, int]] | None:
    """The (start, end) byte ranges of [start, end) where ``path`` holds data (SEEK_DATA): a
    sparse file's written or reserved ranges, its holes left out; None where the system cannot say."""
    if not hasattr(os, "SEEK_DATA"):
        return None
    out: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = start
        while pos < end:
            try:
                first = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:                 # ENXIO: no data past pos
                break
            if first >= end:
                break
            stop = min(os.lseek(fd, first, os.SEEK_HOLE), end)
            out.append((first, stop))
            pos = stop
    finally:
        os.close(fd)
    return out
