"""Why a MessageStore refuses writes, and a clean close too: the first failure of a write, a flush,
a commit point or the work behind the appends, and the errors that tell the caller so (an open's too)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreError, StoreIOError, StoreReadOnlyError
from store.failed_call import describe_failure


@dataclass
class StoreFailure:
    """Why the store at ``root`` refuses writes (``writes``), and a clean close too (``close``: a
    failed write or sync is never retried as if the pages it left were good, store.log.flush)."""

    root: Path
    writes: BaseException | None = None
    close: BaseException | None = None

    def refuse(self, e: BaseException, close_too: bool = False) -> None:
        """Writes are refused from now on (the first failure stays the one named)."""
        self.writes = self.writes or e
        if close_too:
            self.close = self.close or e

    def broke(self, e: BaseException) -> None:
        """A flush or a commit point failed: ``e`` is the one named, for writes and the close."""
        self.writes = self.close = e

    @contextmanager
    def io_step(self, step: str) -> Iterator[None]:
        """A system call that fails inside ``step`` with no error of ours around it: the store
        refuses writes and its close syncs nothing more (a failed write or sync is never retried
        as if the pages it left were good), and the caller gets a StoreError naming the call."""
        try:
            yield
        except StoreError:
            raise
        except OSError as e:
            self.refuse(e, close_too=True)
            raise StoreIOError(e, step, self.root) from e

    def dispatch_failed(self, e: BaseException, what: str = "writing the consume queues") -> StoreReadOnlyError:
        """Work behind the appends failed: the store refuses writes until reopened."""
        self.refuse(e)
        return StoreReadOnlyError(
            f"{what} of {self.root} failed ({describe_failure(e)}); appended batches are in "
            f"the commit log but not committed. The store refuses writes now; reopen it to "
            f"recover from the last commit point")


def open_failure(e: OSError, root: str | os.PathLike[str]) -> StoreError:
    """The error of an open that failed with ``e`` (``e`` itself when it is ours): a store that cannot be
    written names the commands that read it as it is."""
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StoreReadOnlyError(f"store {root} cannot be written ({describe_failure(e)}): a writer "
                                  f"needs it writable; the read-only commands (dump, verify, stat, get) "
                                  f"work as they are")
    return e if isinstance(e, StoreError) else StoreIOError(e, "opening", root)
