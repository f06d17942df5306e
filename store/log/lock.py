"""Single-writer lock: ``<root>/lock`` held with flock while a writer is open, holding its pid."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from store.errors import StoreLockedError
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
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
