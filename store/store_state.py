"""What a MessageStore tells its callers and watchers about itself, a mixin of
store.message_store.MessageStore: its offsets and commit point, whether it still takes writes, and
what monitoring reads from any thread (usage, what the open found, the index's share of the time)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.errors import StoreError, StoreIOError, StoreReadOnlyError
from store.failed_call import said
from store.log.commit_point import CommitPoint
from store.log.commitlog import CommitLog
from store.usage import OpenReport, StoreUsage, measure


class StoreState:
    """The state views of a MessageStore (whose fields it reads)."""

    root: Path
    _log: CommitLog
    _last_commit: CommitPoint
    _put_lock: threading.Lock
    _failure: BaseException | None
    _flush_failure: BaseException | None
    _flusher: Any
    _closed: bool
    _index: Any
    _segments: Any
    _index_seconds: float
    _open_report: OpenReport

    @contextmanager
    def _io_step(self, step: str) -> Iterator[None]:
        """A system call that fails inside ``step`` with no error of ours around it: the store
        refuses writes and its close syncs nothing more (a failed write or sync is never retried
        as if the pages it left were good), and the caller gets a StoreError naming the call."""
        try:
            yield
        except StoreError:
            raise
        except OSError as e:
            self._failure = self._failure or e
            self._flush_failure = self._flush_failure or e
            raise StoreIOError(e, step, self.root) from e

    def _dispatch_failed(self, e: BaseException, what: str = "writing the consume queues") -> StoreReadOnlyError:
        """A batch's consume-queue dispatch failed: the store refuses writes until reopened."""
        self._failure = self._failure or e
        return StoreReadOnlyError(
            f"{what} of {self.root} failed ({said(e)}); appended batches are in "
            f"the commit log but not committed. The store refuses writes now; reopen it to "
            f"recover from the last commit point")

    def _read_limit(self) -> int:
        return self._log.max_offset

    @property
    def last_commit(self) -> CommitPoint:
        return self._last_commit

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        with self._put_lock:
            return dict(self._log.queue_offsets)

    @property
    def max_offset(self) -> int:
        return self._log.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._log.flushed_offset

    @property
    def committed_offset(self) -> int:
        return self._last_commit.offset

    @property
    def read_only(self) -> bool:
        return self._failure is not None or self._flusher.failed

    @property
    def can_close_cleanly(self) -> bool:
        """No flush has failed: what was committed is durable, and what an append left after the
        commit point is cut by the next open's normal recovery."""
        return self._flush_failure is None and not self._flusher.failed

    @property
    def commit_log(self) -> CommitLog:
        """The commit log (RocketMQ's getCommitLog()): its segment queue and its record writer."""
        return self._log

    @property
    def index_seconds(self) -> float:
        """Time the writer spent on index/ since the open: handing batches to the index behind it, waiting
        for it before a commit point, and flushing the index (part of append and flush)."""
        return self._index_seconds

    @property
    def open_report(self) -> OpenReport:
        """What recovery found when this writer opened the store."""
        return self._open_report

    def usage(self) -> StoreUsage:
        """Size and position now, for monitoring; safe to call from another thread (store.usage)."""
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        cp = self._last_commit
        return measure(self.root, cp.offset, self.min_offset, cp.timestamp, len(self._segments.snapshot()),
                       self._index.service if self._index is not None else None)

    @property
    def flush_count(self) -> int:
        """msync rounds the flush service has run (group commit shares one among waiting commits)."""
        return self._flusher.flush_count
