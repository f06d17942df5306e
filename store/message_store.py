"""MessageStore: the single writer of one store (RocketMQ's DefaultMessageStore).

open = lock, recover, create ``abort``; append = commit log + consume-queue dispatch;
commit = flush, then one atomic replace of commitpoint.json (the exactly-once boundary) and the
checkpoint; close = flush, checkpoint, remove ``abort``, unlock.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from store.config import StoreConfig
from store.errors import FlushError, StoreError, StoreIOError, StoreReadOnlyError
from store.failed_call import describe_failure
from store.format.batch_codec import EncodedBatch, encode_batch, encode_messages
from store.format.codec import Message
from store.format.constants import ABORT_FILE, CHECKPOINT_FILE, COMMITLOG_DIR
from store.index.writer import IndexWriter
from store.log.append_intent import AppendIntentLog
from store.log.checkpoint import StoreCheckpoint, write_checkpoint
from store.log.commit_point import CommitPoint, commit_failure, queue_offsets_before, write_commit_point
from store.log.commitlog import CommitLog
from store.log.flush import FlushService
from store.log.lock import StoreLock
from store.log.segment import fsync_dir
from store.read.view import segment_size_on_disk
from store.queue.consume_queue import ConsumeQueueStore, check_topic_name
from store.log.dispatch import DispatchService
from store.index.service import IndexService
from store.read.records import RecordReads
from store.store_open import StoreOpening, now_ms
from store.store_state import StoreFailure, StoreState
from store.topics import TopicsPublisher
from store.usage import OpenReport

if TYPE_CHECKING:
    from store.retention import RetentionService

log = logging.getLogger(__name__)


@dataclass
class AppendResult:
    physical_offsets: np.ndarray    # int64, one per message
    sizes: np.ndarray               # int32 TOTALSIZE
    queue_offsets: np.ndarray       # int64 (0 for PREPARED/ROLLBACK)
    end_offset: int                 # commit-log write end after the batch
    store_timestamp: int            # STORETIMESTAMP written into every record of the batch


class MessageStore(StoreOpening, StoreState):
    """One writer per store (lock file). Use :meth:`open`; thread-safe for appends/commits."""

    def __init__(self, root: Path, config: StoreConfig, lock: StoreLock) -> None:
        self.root = root
        self.config = config
        self._lock = lock
        self._put_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._closed = False
        self.closed_cleanly = False
        # committed records whose content failed its CRC at open (kept): for logs and metrics
        self.damaged_records: tuple[int, ...] = ()
        self._failed = StoreFailure()
        self._last_ts = 0
        self._log = CommitLog(root / COMMITLOG_DIR, config.segment_size, config.codec,
                              preallocate=config.preallocate, warm_first=config.warm_first_segment,
                              mlock=config.mlock)
        self._segments = self._log.queue
        self._cq: ConsumeQueueStore = ConsumeQueueStore(root, units_per_file=config.consume_queue_units)
        self._reads = RecordReads(root, self._segments, self._cq, read_limit=lambda: self._log.max_offset,
                                  index_lookup=self._index_lookup, settle_queues=self.settle_queues)
        # held by the index while it puts keys, by the flush while it starts writeback: a
        # page cleaned while another CPU runs a thread of ours costs that CPU an interrupt
        self._writeback_gate = threading.Lock()
        self._flusher = FlushService(self._log, mode=config.flush_mode, gate=self._writeback_gate,
                                     interval_ms=config.flush_interval_ms,
                                     least_pages=config.flush_least_pages,
                                     thorough_interval_ms=config.flush_thorough_interval_ms)
        self._checkpoint = StoreCheckpoint()
        self._checkpoint_lock = threading.Lock()      # each write holds the newest fields
        self._last_commit = CommitPoint(0)
        self._retention: RetentionService | None = None
        self._dispatcher: DispatchService | None = None
        self._topics = TopicsPublisher(root)
        self._index = IndexWriter(root, config.index, self._writeback_gate, warm_first=config.warm_first_segment) \
            if config.index.enabled else None
        self._index_seconds = 0.0
        self._open_report = OpenReport(False, "empty", 0, 0, 0, 0)
        self._intent = AppendIntentLog(root)     # before an append: which records past the commit point are ours

    # --- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike[str], config: StoreConfig | None = None, *,
             truncate_on_corruption: bool = False) -> MessageStore:
        try:
            return cls._open_at(Path(root), config or StoreConfig(), truncate_on_corruption)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise StoreReadOnlyError(f"store {root} cannot be written ({describe_failure(e)}): a writer "
                                         f"needs it writable; the read-only commands (dump, verify, stat, get) "
                                         f"work as they are") from e
            if isinstance(e, StoreError):
                raise
            raise StoreIOError(e, "opening", root) from e

    @classmethod
    def _open_at(cls, root: Path, config: StoreConfig, truncate_on_corruption: bool) -> MessageStore:
        root.mkdir(parents=True, exist_ok=True)
        on_disk = segment_size_on_disk(root / COMMITLOG_DIR)
        if on_disk and on_disk != config.segment_size:
            log.warning("store %s has segments of %d bytes: kept (a store keeps its segment size; %d asked)",
                        root, on_disk, config.segment_size)
            config = dataclasses.replace(config, segment_size=on_disk)
        lock = StoreLock(root)
        lock.acquire()
        store = cls(root, config, lock)
        try:
            store._open(truncate_on_corruption)
        except BaseException:
            store._release_after_failed_open()
            raise
        return store

    # --- writing -------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        for behind in (self._dispatcher, self._index):      # the work behind the appends
            if behind is not None and behind.failure is not None:
                self._failed.refuse(behind.failure)
        if self._failed.writes is not None or self._flusher.failed:
            cause = self._failed.writes or self._flusher.failure
            raise StoreReadOnlyError(
                f"store {self.root} refuses writes after a failure ({cause}); reopen it to "
                f"recover from the last commit point")
        if self._retention is not None:
            self._retention.check_writable()

    def append(self, messages: Sequence[Message]) -> AppendResult:
        """Encode and append ``messages`` (queue offsets assigned by the store)."""
        return self.append_encoded(encode_messages(messages, self.config.codec))

    def append_table(self, table: Any) -> AppendResult:
        return self.append_encoded(encode_batch(table, self.config.codec))

    def append_encoded(self, batch: EncodedBatch, store_timestamp: int | None = None) -> AppendResult:
        with self._io_step("appending a batch"):
            return self._append_encoded(batch, store_timestamp)

    def _append_encoded(self, batch: EncodedBatch, store_timestamp: int | None = None) -> AppendResult:
        """Append a pre-encoded batch. Topics are checked before anything is written; a batch
        carrying queue offsets must continue its queues exactly (QueueOffsetMismatchError).
        The consume-queue units are written behind (store.log.dispatch), so the batch's columns
        must stay as they are until the next flush; the index too (its keys, when the batch brings
        them, else the commit log's bytes)."""
        self._check_writable()
        for topic in batch.topic_names:
            check_topic_name(topic)
        with self._put_lock:
            self._check_writable()
            ts = store_timestamp if store_timestamp is not None else max(now_ms(), self._last_ts)
            self._last_ts = max(self._last_ts, ts)
            if len(batch):
                self._intent.cover(self._last_commit.offset, ts)
            out = self._log.append(batch, ts)
            if self._index is not None:
                started = time.perf_counter()
                self._cover_index(ts)
                try:
                    # indexed behind: the keys the batch brought, else found in the commit log
                    self._index.submit(out.physical_offsets, ts, batch.key_hashes, batch.key_counts)
                except (StoreError, OSError, ValueError) as e:   # an earlier batch's index failed
                    raise self._dispatch_failed(e, "building the index") from e
                self._index_seconds += time.perf_counter() - started
            m = out.dispatch_mask
            everyone = bool(m.all())   # the usual case: no masked copies of seven columns

            def pick(a: np.ndarray) -> np.ndarray:
                return a if everyone else np.asarray(a)[m]

            if m.any():
                # written behind the commit log by the dispatch thread; flush() waits for it
                self._submit_dispatch(
                    topic_names=batch.topic_names, topic_index=pick(batch.topic_index),
                    queue_ids=pick(batch.queue_ids), queue_offsets=pick(out.queue_offsets),
                    physical_offsets=pick(out.physical_offsets), sizes=pick(out.sizes),
                    tags_codes=pick(batch.tags_codes), delay_levels=pick(batch.delay_levels),
                    store_timestamp=ts, groups=out.groups, queue_bases=out.queue_bases)
        if self.config.flush_mode == "sync" and len(batch):
            self._flusher.wait_durable(out.end_offset)
        return AppendResult(out.physical_offsets, out.sizes, out.queue_offsets, out.end_offset, ts)

    def flush(self) -> int:
        """Flush commit log and consume queues; returns the flushed commit-log offset."""
        with self._io_step("flushing"):
            return self._flush()

    def _flush(self) -> int:
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        if self._failed.writes is not None:
            raise FlushError(f"store {self.root} failed earlier ({self._failed.writes}); reopen it")
        self.settle_queues()
        return self._flush_files()

    def _flush_files(self, index: bool = True) -> int:
        off = self._flusher.flush()     # the index catches up behind the appends meanwhile
        idx = self._index if index else None
        if idx is not None:
            started = time.perf_counter()
            try:
                idx.settle()
            except (StoreError, OSError, ValueError) as e:   # a new IndexFile without room, say
                # nothing was flushed: the store refuses writes but can still close cleanly
                self._failed.refuse(e)
                raise FlushError(f"building the index of {self.root} failed: {describe_failure(e)}; what was appended "
                                 f"since the last commit point is not committed, the store refuses writes until "
                                 f"reopened") from e
            self._index_seconds += time.perf_counter() - started
        try:
            self._cq.flush()
            if idx is not None:
                started = time.perf_counter()
                idx.flush()
                self._index_seconds += time.perf_counter() - started
                self._checkpoint.index_msg_timestamp = max(self._checkpoint.index_msg_timestamp, idx.end_timestamp)
        except OSError as e:
            self._failed.broke(e)
            raise FlushError(f"flushing the consume queues or the index of {self.root} failed: {describe_failure(e)}"
                             f"; the store refuses writes until reopened") from e
        self._checkpoint.physic_msg_timestamp = self._log.flushed_store_timestamp
        self._checkpoint.logics_msg_timestamp = self._log.flushed_store_timestamp
        self._checkpoint.master_flushed_offset = off
        return off

    def _write_checkpoint(self, sync: bool = True) -> None:
        with self._checkpoint_lock:
            write_checkpoint(self.root / CHECKPOINT_FILE, self._checkpoint, sync)

    def _cover_index(self, store_timestamp: int) -> None:
        """Before the index takes keys stored at ``store_timestamp``, indexMsgTimestamp covers them:
        a RocketMQ broker opening the store after a crash destroys every index file that ends past it
        (IndexService.load) and re-indexes only the segments it re-dispatches, losing the other keys.
        Our index is whole up to its last item at every moment a process can die (our own recovery
        trims what the commit point does not cover), so the broker may keep it all. Not synced: a
        killed process leaves the write in the page cache, and each commit syncs the checkpoint."""
        if store_timestamp > self._checkpoint.index_msg_timestamp:
            self._checkpoint.index_msg_timestamp = store_timestamp
            self._write_checkpoint(sync=False)

    def _submit_dispatch(self, **args: Any) -> None:
        assert self._dispatcher is not None
        try:
            self._dispatcher.submit(**args)
        except (StoreError, OSError) as e:     # an earlier batch's dispatch failed just now
            raise self._dispatch_failed(e) from e

    def settle_queues(self) -> None:
        """Wait until the consume queues hold every appended batch (they are written behind
        the appends). A failed dispatch makes the store refuse writes: the commit log has
        batches the consume queues lack, which only a reopen (redispatching) repairs."""
        if self._dispatcher is None:
            return
        try:
            self._dispatcher.drain()
        except (StoreError, OSError) as e:
            raise self._dispatch_failed(e) from e

    def commit(self, offset: int | None = None, metadata: Mapping[str, Any] | None = None) -> CommitPoint:
        """Flush, then make ``offset`` (default: everything appended) the commit point with the
        caller's ``metadata`` (None keeps the previous metadata) in one atomic file replace."""
        with self._io_step("committing"):
            return self._commit(offset, metadata)

    def _commit(self, offset: int | None, metadata: Mapping[str, Any] | None) -> CommitPoint:
        with self._commit_lock:
            with self._put_lock:
                end = self._log.max_offset
                queue_offsets = dict(self._log.queue_offsets)
                last_record = self._log.last_record_offset
            if offset is not None and offset != end:
                queue_offsets, last_record = queue_offsets_before(self, self._last_commit, offset, end, queue_offsets)
                end = offset
            self._flush()
            if self._log.flushed_offset < end:
                raise FlushError(f"commit at {end} but only {self._log.flushed_offset} is flushed")
            meta = dict(self._last_commit.metadata if metadata is None else metadata)
            cp = CommitPoint(end, queue_offsets, meta, now_ms(), last_record)
            step = "before"
            try:
                self._topics.cover(queue_offsets)   # config/topics.json before the point that needs it
                step = "writing"
                write_commit_point(self.root, cp)
                step = "written"
                self._checkpoint.confirm_phy_offset = end
                self._write_checkpoint()
            except OSError as e:
                self._failed.broke(e)
                raise FlushError(f"{commit_failure(self.root, step, cp, self._last_commit.offset)}: "
                                 f"{describe_failure(e)}; the store refuses writes until reopened") from e
            self._last_commit = cp
            if self.config.drop_cache_behind:
                # everything below the commit point is durable and indexed: nothing here reads it again
                self._log.drop_behind(end)
            return cp

    # --- closing -------------------------------------------------------------------------------
    def abandon(self) -> None:
        """Let go of the store as a killed writer does: nothing more flushed, no checkpoint, ``abort``
        left in place, the lock released; the next open recovers. For a supervisor that must hand the
        store on after a failure it cannot trust, and for recovery tests."""
        if self._closed:
            return
        self._closed = True
        if self._retention is not None:
            self._retention.stop()
        # the work behind the appends ends first: a consume-queue unit or an index item still being
        # written must not land in a file unmapped under it (a killed writer's writes are in the
        # page cache too)
        if self._dispatcher is not None:
            self._dispatcher.stop()
        if self._index is not None:
            self._index.close(flush=False)
        self._flusher.stop()
        self._cq.abandon()
        for seg in self._segments.segments:
            seg.close()
        self._intent.close()
        self._lock.release()

    def close(self) -> None:
        """Flush, write the checkpoint, remove ``abort``, release the lock. Appended but
        uncommitted data is flushed but not kept by the next open (it is after the commit
        point): so also after an append that failed part way (a file that could not be
        created), which only makes the store refuse further writes. After a failed flush
        ``abort`` stays, so the next open re-validates."""
        if self._closed:
            return
        with self._io_step("closing"):
            self._close()

    def _close(self) -> None:
        if self._retention is not None:
            self._retention.stop()
        if self._dispatcher is not None:
            self._dispatcher.stop()
        self._flusher.stop()
        clean = False
        settled = self._log.max_offset == self._last_commit.offset
        index_ok = self._index is None or self._index.failure is None
        try:
            if self.can_close_cleanly:
                # the dispatcher, stopped above, has written what it was given; an index whose
                # thread failed (a new IndexFile without room) keeps what its files hold, and the
                # next open cuts its items past the commit point
                self._flush_files(index=index_ok)
                self._checkpoint.confirm_phy_offset = self._last_commit.offset
                self._write_checkpoint()
                clean = True
        finally:
            self._closed = True
            self.closed_cleanly = clean
            try:
                self._cq.close(flush=clean)     # a failed fsync is never retried as if it could succeed
                if self._index is not None:
                    self._index.close(flush=clean and index_ok)
            finally:
                self._log.close()
                if clean and settled:               # nothing uncommitted: what comes past the point is not ours
                    self._intent.clear()
                self._intent.close()
                if clean:
                    (self.root / ABORT_FILE).unlink(missing_ok=True)
                    fsync_dir(self.root)
                self._lock.release()

    def settle_index(self) -> None:
        """Wait until the index holds every appended record (it is built behind the appends)."""
        if self._index is not None:
            self._index.settle()

    def _index_lookup(self) -> IndexService | None:
        self.settle_index()         # a lookup sees every append
        return self._index.service if self._index is not None else None

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
