"""Single-writer lock: ``<root>/lock`` held with flock while a writer is open, holding its pid, and
with a POSIX record lock on its first byte, the lock a RocketMQ broker takes on the same file
(DefaultMessageStore: FileChannel.tryLock(0, 1, false)): a broker and our writer never hold one
store at once. (A POSIX lock goes when its process closes any descriptor of the file: nothing in a
writer's process opens ``lock`` but this class.)"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from store.errors import FileSpaceError, StoreLockedError
from store.failed_call import remedy
from store.format.constants import LOCK_FILE


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_FILE
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock or raise StoreLockedError naming the holder's pid. flock dies with
        its process, so a SIGKILLed writer never leaves the store locked."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                raw = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            raise StoreLockedError(str(self.path.parent), int(raw) if raw.isdigit() else None)
        except BaseException:
            os.close(fd)
            raise
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(str(self.path.parent), None, "a RocketMQ broker (it holds the lock file's "
                                       "record lock); stop the broker first") from None
            raise
        call = "ftruncate"
        try:
            os.ftruncate(fd, 0)
            call = "pwrite"
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:    # a full disk meets the store here first when its lock file is empty
            os.close(fd)
            raise FileSpaceError(e.errno, f"writing the pid to the lock file {self.path} failed ({call}): "
                                          f"{e.strerror}; {remedy(e.errno)}") from e
        self._fd = fd

    def release(self) -> None:
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0


def holder_pid(root: Path) -> int | None:
    """The pid written by the current lock holder, if any (for messages and tools)."""
    try:
        raw = (Path(root) / LOCK_FILE).read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return int(raw) if raw.isdigit() else None
