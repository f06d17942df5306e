"""Flushing the commit log to disk (RocketMQ's FlushRealTimeService and GroupCommitService).

ASYNC_FLUSH: a background thread msyncs every ``flush_interval_ms`` once at least
``flush_least_pages`` pages are dirty, and everything every ``flush_thorough_interval_ms``.
SYNC_FLUSH: an append returns only once its bytes are durable; appends that wait at the same
time share one msync (group commit: whoever finds no flush running leads the next one).

A failed msync is final: Linux may mark the failed pages clean, so a retry can "succeed"
without the data ever reaching the disk. The first failure is kept, raised as FlushError, and
the store refuses writes until it is reopened (and recovered).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from store.errors import FlushError
from store.failed_call import describe_failure
from store.log.commitlog import CommitLog

log = logging.getLogger(__name__)


class FlushService:
    def __init__(self, commitlog: CommitLog, *, mode: str = "async", interval_ms: int = 500,
                 least_pages: int = 4, thorough_interval_ms: int = 10_000,
                 gate: AbstractContextManager[Any] | None = None) -> None:
        self.commitlog = commitlog
        self.gate = gate            # held by the store's background threads: Segment.flush
        self.mode = mode
        self.interval_s = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval_s = thorough_interval_ms / 1000
        self.failure: BaseException | None = None
        self.flush_count = 0            # msync rounds done (group commit shares them)
        self._cond = threading.Condition()
        self._flushing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- control -------------------------------------------------------------------------------
    def start(self) -> None:
        if self.mode == "async" and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="commitlog-flush", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def check(self) -> None:
        """Raise FlushError if an earlier flush failed."""
        if self.failure is not None:
            raise FlushError(self._failure_message()) from self.failure

    def _failure_message(self) -> str:
        return (f"flushing the commit log in {self.commitlog.queue.directory} failed: "
                f"{describe_failure(self.failure)}; data after offset {self.commitlog.flushed_offset} may not be "
                f"on disk. The store refuses writes now; reopen it to recover from the last "
                f"commit point")

    # --- flushing ------------------------------------------------------------------------------
    def _flush_once(self, least_pages: int) -> int:
        """One msync round; the first OSError marks the service failed for good."""
        self.check()
        try:
            before = self.commitlog.flushed_offset
            done = self.commitlog.flush(least_pages, self.gate)
            if done != before:
                self.flush_count += 1
            return done
        except OSError as e:
            self.failure = e
            log.error("commit-log flush failed: %s", e)
            raise FlushError(self._failure_message()) from e

    def flush(self) -> int:
        """Flush everything written so far; returns the flushed offset."""
        return self.wait_durable(self.commitlog.max_offset)

    def wait_durable(self, offset: int) -> int:
        """Block until the commit log is flushed to at least ``offset``. Callers arriving
        while a flush runs wait for it and then share the next one."""
        while True:
            with self._cond:
                while True:
                    self.check()
                    if self.commitlog.flushed_offset >= offset:
                        return self.commitlog.flushed_offset
                    if not self._flushing:
                        self._flushing = True
                        break
                    self._cond.wait()
            try:
                self._flush_once(0)
            finally:
                with self._cond:
                    self._flushing = False
                    self._cond.notify_all()

    def _run(self) -> None:
        last_thorough = time.monotonic()
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            thorough = now - last_thorough >= self.thorough_interval_s
            with self._cond:
                if self._flushing:
                    continue
                self._flushing = True
            try:
                self._flush_once(0 if thorough else self.least_pages)
            except FlushError:
                return  # kept in self.failure; writers see it on their next call
            except Exception as e:  # noqa: BLE001 - a dead flush thread must not go unnoticed
                log.exception("commit-log flush thread failed")
                self.failure = e
                return
            finally:
                with self._cond:
                    self._flushing = False
                    self._cond.notify_all()
            if thorough:
                last_thorough = now
