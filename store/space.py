"""Disk space for the files written in place: commit-log segments, consume-queue files, IndexFiles.

Each is created at its full size and then written into (through a mapping, or pwrite at a
position). A sparse file takes its blocks only when a page is first written: on a full disk a
store into a mapping then ends the process with SIGBUS, and a pwrite fails in the middle of a
batch. Reserving every block when the file is created (posix_fallocate) turns a full disk into
an OSError there, before a byte of the batch goes into the file, which the caller reports and
survives. A file the writer goes on writing that it did not create (RocketMQ's, or one from before
this rule) is reserved when it is opened for writing: a no-op for the blocks it already has.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from store.errors import FileSpaceError

log = logging.getLogger(__name__)

# posix_fallocate's answers for a filesystem that cannot reserve (glibc emulates it almost
# everywhere; these remain for the few where it cannot): the file stays sparse.
_NOT_SUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)


def reserve(fd: int, size: int, path: Path, what: str) -> None:
    """Give bytes [0, size) of the open file ``fd`` their disk blocks, growing it to ``size``.
    A full disk, a quota or a file size limit raises FileSpaceError naming the file (``path``)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in _NOT_SUPPORTED:
            log.debug("%s %s: the filesystem cannot reserve blocks (%s); left sparse", what, path, e.strerror)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            return
        raise FileSpaceError(e.errno, f"cannot reserve {size:,} bytes on disk for {what} {path} (fallocate): "
                                      f"{e.strerror}; free disk space (or raise the quota or file size limit) "
                                      f"and run again", str(path)) from e


def create_reserved(path: Path, size: int, what: str, named: Path | None = None) -> int:
    """Create ``path`` (it must not exist) at ``size`` bytes with every block reserved; its fd,
    open read-write. On failure nothing is left behind. ``named``: the file's name in messages, when
    ``path`` is a temporary name it is renamed from."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        reserve(fd, size, named or path, what)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return fd


def reserve_path(path: Path, size: int, what: str) -> None:
    """Reserve the blocks of an existing file the writer is about to go on writing."""
    fd = os.open(path, os.O_RDWR)
    try:
        reserve(fd, size, path, what)
    finally:
        os.close(fd)
