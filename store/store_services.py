"""The work behind a MessageStore's appends, as RocketMQ's DefaultMessageStore runs it in services:
the flush service (store.log.flush), the consume-queue dispatch (store.log.dispatch), the index
writer (store.index.writer) and retention (store.retention). Built with the store's parts, started
once recovery is done, stopped before the files they write are closed."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from store.compaction.service import CompactionService
from store.config import StoreConfig
from store.errors import StoreError, StoreReadOnlyError
from store.index.service import IndexService
from store.index.writer import IndexWriter
from store.log.commitlog import CommitLog
from store.log.dispatch import DispatchService
from store.log.flush import FlushService
from store.queue.consume_queue import ConsumeQueueStore
from store.retention import RetentionService
from store.store_failure import StoreFailure
from store.topics import compaction_topics


class StoreServices:
    """The services of the store at ``root`` writing behind its commit log ``log`` into ``cq`` and
    the index; a failure of theirs makes ``failure`` refuse writes."""

    def __init__(self, root: Path, config: StoreConfig, log: CommitLog, cq: ConsumeQueueStore,
                 failure: StoreFailure) -> None:
        self.root, self.config = root, config
        self._log, self._cq, self._failure = log, cq, failure
        # held by the index while it puts keys, by the flush while it starts writeback: a
        # page cleaned while another CPU runs a thread of ours costs that CPU an interrupt
        gate = threading.Lock()
        self.flusher = FlushService(log, mode=config.flush_mode, gate=gate, interval_ms=config.flush_interval_ms,
                                    least_pages=config.flush_least_pages,
                                    thorough_interval_ms=config.flush_thorough_interval_ms)
        self.index = IndexWriter(root, config.index, gate, warm_first=config.warm_first_segment) \
            if config.index.enabled else None
        self.dispatcher: DispatchService | None = None
        # a topic once made a compaction topic stays one: a 5.x broker serves it from its log only
        compaction = dataclasses.replace(config.compaction, topics=config.compaction.topics | compaction_topics(root))
        self.compaction = CompactionService(root, compaction, cq, self._record_at) if compaction.topics else None
        self.retention: RetentionService | None = None
        # time the writer spent on index/ since the open (MessageStore.index_seconds)
        self.index_seconds = 0.0

    def start(self, put_lock: threading.Lock, committed_offset: Callable[[], int],
              min_offset: Callable[[], int]) -> None:
        """Start the services once recovery is done; retention deletes a segment under ``put_lock``."""
        executor = self._log.writer.executor
        compaction = self.compaction
        if compaction is not None:
            compaction.recover()        # level with the consume queues recovery left

        def dispatch(**units: Any) -> None:
            self._cq.dispatch(**units)
            if compaction is not None:
                compaction.dispatched(**units)

        self.dispatcher = DispatchService(dispatch, self.root.name, executor)
        if self.index is not None:
            self.index.start(self._log.queue, executor)
        self.flusher.start()
        self._log.queue.warm_ahead()   # the first appends' pages, faulted in while the job starts
        if self.config.retention is not None:
            def delete_segment(path: Path) -> None:
                self._delete_oldest_segment(path, put_lock, min_offset)

            self.retention = RetentionService(self.root, self.config.retention, committed_offset=committed_offset,
                                              consume_queues=self._cq, delete_segment=delete_segment).start()

    def _record_at(self, physical_offset: int, size: int) -> memoryview:
        seg = self._log.queue.find(physical_offset)
        if seg is None:
            raise StoreError(f"no segment holds offset {physical_offset}")
        pos = physical_offset - seg.base_offset
        seg.check_readable(pos, pos + size)      # a page the disk cannot give: an error, not SIGBUS
        return seg.view[pos:pos + size]

    def _delete_oldest_segment(self, path: Path, put_lock: threading.Lock, min_offset: Callable[[], int]) -> None:
        q = self._log.queue
        with put_lock, q.lock:
            segs = q.segments
            if len(segs) < 2 or segs[0].path != Path(path):
                raise StoreError(f"retention may only delete the oldest segment, not {path}")
            if self.index is not None:
                self.index.settle()    # the thread behind the appends is done with every segment
            seg = segs.pop(0)
        seg.destroy()
        if self.index is not None:
            with put_lock:
                self.index.delete_below(min_offset())

    def check_writable(self) -> None:
        """Refuse a write after a failure, of the store or of the work behind its appends, and while
        retention finds the disk too full (store.retention)."""
        for behind in (self.dispatcher, self.index):
            if behind is not None and behind.failure is not None:
                self._failure.refuse(behind.failure)
        if self._failure.writes is not None or self.flusher.failed:
            cause = self._failure.writes or self.flusher.failure
            raise StoreReadOnlyError(
                f"store {self.root} refuses writes after a failure ({cause}); reopen it to "
                f"recover from the last commit point")
        if self.retention is not None:
            self.retention.check_writable()

    @contextmanager
    def index_time(self) -> Iterator[None]:
        """Counts the time inside toward index_seconds (not when it fails)."""
        started = time.perf_counter()
        yield
        self.index_seconds += time.perf_counter() - started

    def submit_dispatch(self, **units: Any) -> None:
        assert self.dispatcher is not None
        try:
            self.dispatcher.submit(**units)
        except (StoreError, OSError) as e:     # an earlier batch's dispatch failed just now
            raise self._failure.dispatch_failed(e) from e

    def settle_queues(self) -> None:
        """Wait until the consume queues hold every appended batch (they are written behind
        the appends). A failed dispatch makes the store refuse writes: the commit log has
        batches the consume queues lack, which only a reopen (redispatching) repairs."""
        if self.dispatcher is None:
            return
        try:
            self.dispatcher.drain()
        except (StoreError, OSError) as e:
            raise self._failure.dispatch_failed(e) from e

    def settle_index(self) -> None:
        """Wait until the index holds every appended record (it is built behind the appends)."""
        if self.index is not None:
            self.index.settle()

    def index_lookup(self) -> IndexService | None:
        self.settle_index()         # a lookup sees every append
        return self.index.service if self.index is not None else None

    def stop(self, index_too: bool = False) -> None:
        """Stop the threads behind the appends (a killed writer's: the index's too, nothing flushed)."""
        if self.retention is not None:
            self.retention.stop()
        # the work behind the appends ends first: a consume-queue unit or an index item still being
        # written must not land in a file unmapped under it
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self.compaction is not None:
            self.compaction.close()
        if index_too and self.index is not None:
            self.index.close(flush=False)
        self.flusher.stop()
