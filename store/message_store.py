"""MessageStore: the single writer of one store (RocketMQ's DefaultMessageStore), composed of its parts.

open = lock, recover (store_open), create ``abort``, start the services (store_services);
append = commit log + consume-queue dispatch and index behind it; commit = flush, then one atomic
replace of commitpoint.json (the exactly-once boundary) and the checkpoint (store_commit);
close = flush, checkpoint, remove ``abort``, unlock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from store.config import StoreConfig
from store.errors import FlushError, StoreError
from store.format.batch_codec import EncodedBatch, encode_batch, encode_messages
from store.format.codec import DecodedMessage, Message
from store.format.constants import ABORT_FILE, COMMITLOG_DIR, MAX_MSGS_NUM_BATCH
from store.index.lookup import FOREVER_MS
from store.log.append_intent import AppendIntentLog
from store.log.commit_point import CommitPoint, queue_offsets_before
from store.log.commitlog import CommitLog
from store.log.lock import StoreLock
from store.log.segment import fsync_dir
from store.queue.consume_queue import ConsumeQueueStore, check_topic_name
from store.read.records import RecordReads
from store.store_commit import StoreCommit
from store.store_failure import StoreFailure, open_failure
from store.store_open import StoreParts, keep_segment_size, mark_open, now_ms, recover_store
from store.store_services import StoreServices
from store.topics import TopicsPublisher
from store.usage import OpenReport, StoreUsage, measure


@dataclass
class AppendResult:
    physical_offsets: np.ndarray    # int64, one per message
    sizes: np.ndarray               # int32 TOTALSIZE
    queue_offsets: np.ndarray       # int64 (0 for PREPARED/ROLLBACK)
    end_offset: int                 # commit-log write end after the batch
    store_timestamp: int            # STORETIMESTAMP written into every record of the batch


class MessageStore:
    """One writer per store (lock file). Use :meth:`open`; thread-safe for appends/commits. It holds
    its parts (RocketMQ's DefaultMessageStore): the commit log, the consume queues, the services
    behind the appends (store_services), the reads of its own records (store.read.records), the
    checkpoint, and why it refuses writes (store_failure); its views forward to the part that owns
    the fact."""

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
        self._failed = StoreFailure(root)
        self._last_ts = 0
        self._log = CommitLog(root / COMMITLOG_DIR, config.segment_size, config.codec,
                              preallocate=config.preallocate, warm_first=config.warm_first_segment,
                              mlock=config.mlock)
        self._cq = ConsumeQueueStore(root, units_per_file=config.consume_queue_units,
                                     max_open_files=config.max_open_queue_files)
        self._services = StoreServices(root, config, self._log, self._cq, self._failed)
        self._reads = RecordReads(root, self._log.queue, self._cq, read_limit=lambda: self._log.max_offset,
                                  index_lookup=self._services.index_lookup,
                                  settle_queues=self._services.settle_queues)
        self._topics = TopicsPublisher(root, config.compaction.topics)
        self._commits = StoreCommit(root, config, self._log, self._cq, self._services, self._failed, self._topics)
        self._open_report = OpenReport(False, "empty", 0, 0, 0, 0)
        self._intent = AppendIntentLog(root)     # before an append: which records past the commit point are ours

    # --- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike[str], config: StoreConfig | None = None, *,
             truncate_on_corruption: bool = False) -> MessageStore:
        try:
            return cls._open_at(Path(root), config or StoreConfig(), truncate_on_corruption)
        except OSError as e:
            failure = open_failure(e, root)
            if failure is e:
                raise
            raise failure from e

    @classmethod
    def _open_at(cls, root: Path, config: StoreConfig, truncate_on_corruption: bool) -> MessageStore:
        root.mkdir(parents=True, exist_ok=True)
        config = keep_segment_size(root, config)
        lock = StoreLock(root)
        lock.acquire()
        store = cls(root, config, lock)
        try:
            store._open(truncate_on_corruption)
        except BaseException:
            store._release_after_failed_open()
            raise
        return store

    def _open(self, truncate_on_corruption: bool) -> None:
        parts = StoreParts(self.root, self.config, self._log, self._cq, self._services.index, self._intent,
                           self._topics, self._reads)
        r = recover_store(parts, truncate_on_corruption, writable=not self.read_only)
        self._open_report, self.damaged_records = r.report, r.damaged
        self._commits.opened(r.commit_point, r.checkpoint)
        mark_open(self.root, r)
        self._services.start(self._put_lock, committed_offset=lambda: self.committed_offset,
                             min_offset=lambda: self.min_offset)

    def _release_after_failed_open(self) -> None:
        self._services.stop()
        self._intent.close()
        try:
            self._cq.close()
            if self._services.index is not None:
                self._services.index.close(flush=False)
        finally:
            self._log.close()
            self._lock.release()

    # --- writing -------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        self._services.check_writable()

    def append(self, messages: Sequence[Message]) -> AppendResult:
        """Encode and append ``messages`` (queue offsets assigned by the store)."""
        return self.append_encoded(encode_messages(messages, self.config.codec))

    def append_table(self, table: Any) -> AppendResult:
        return self.append_encoded(encode_batch(table, self.config.codec))

    def append_encoded(self, batch: EncodedBatch, store_timestamp: int | None = None) -> AppendResult:
        with self._failed.io_step("appending a batch"):
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
                self._intent.cover(self._commits.last.offset, ts)
            out = self._log.append(batch, ts)
            index = self._services.index
            if index is not None:
                with self._services.index_time():
                    self._commits.checkpoint.cover_index(ts)
                    try:
                        # indexed behind: the keys the batch brought, else found in the commit log
                        index.submit(out.physical_offsets, ts, batch.key_hashes, batch.key_counts)
                    except (StoreError, OSError, ValueError) as e:   # an earlier batch's index failed
                        raise self._failed.dispatch_failed(e, "building the index") from e
            m = out.dispatch_mask
            everyone = bool(m.all())   # the usual case: no masked copies of seven columns

            def pick(a: np.ndarray) -> np.ndarray:
                return a if everyone else np.asarray(a)[m]

            if m.any():
                # written behind the commit log by the dispatch thread; flush() waits for it
                self._services.submit_dispatch(
                    topic_names=batch.topic_names, topic_index=pick(batch.topic_index),
                    queue_ids=pick(batch.queue_ids), queue_offsets=pick(out.queue_offsets),
                    physical_offsets=pick(out.physical_offsets), sizes=pick(out.sizes),
                    tags_codes=pick(batch.tags_codes), delay_levels=pick(batch.delay_levels),
                    store_timestamp=ts, groups=out.groups, queue_bases=out.queue_bases)
        if self.config.flush_mode == "sync" and len(batch):
            self._services.flusher.wait_durable(out.end_offset)
        return AppendResult(out.physical_offsets, out.sizes, out.queue_offsets, out.end_offset, ts)

    def flush(self) -> int:
        """Flush commit log and consume queues; returns the flushed commit-log offset."""
        with self._failed.io_step("flushing"):
            return self._flush()

    def _flush(self) -> int:
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        if self._failed.writes is not None:
            raise FlushError(f"store {self.root} failed earlier ({self._failed.writes}); reopen it")
        self.settle_queues()
        return self._commits.flush_files()

    def settle_queues(self) -> None:
        """Wait until the consume queues hold every appended batch (store_services)."""
        self._services.settle_queues()

    def commit(self, offset: int | None = None, metadata: Mapping[str, Any] | None = None) -> CommitPoint:
        """Flush, then make ``offset`` (default: everything appended) the commit point with the
        caller's ``metadata`` (None keeps the previous metadata) in one atomic file replace."""
        with self._failed.io_step("committing"):
            return self._commit(offset, metadata)

    def _commit(self, offset: int | None, metadata: Mapping[str, Any] | None) -> CommitPoint:
        with self._commit_lock:
            with self._put_lock:
                end = self._log.max_offset
                queue_offsets = dict(self._log.queue_offsets)
                last_record = self._log.last_record_offset
            if offset is not None and offset != end:
                queue_offsets, last_record = queue_offsets_before(self._reads, self._commits.last, offset, end,
                                                                  queue_offsets)
                end = offset
            self._flush()
            return self._commits.write(end, queue_offsets, last_record, metadata)

    # --- closing -------------------------------------------------------------------------------
    def abandon(self) -> None:
        """Let go of the store as a killed writer does: nothing more flushed, no checkpoint, ``abort``
        left in place, the lock released; the next open recovers. For a supervisor that must hand the
        store on after a failure it cannot trust, and for recovery tests."""
        if self._closed:
            return
        self._closed = True
        self._services.stop(index_too=True)     # a killed writer's writes are in the page cache too
        self._cq.abandon()
        for seg in self._log.queue.segments:
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
        with self._failed.io_step("closing"):
            self._close()

    def _close(self) -> None:
        self._services.stop()
        index = self._services.index
        clean = False
        settled = self._log.max_offset == self._commits.last.offset
        index_ok = index is None or index.failure is None
        try:
            if self.can_close_cleanly:
                # the dispatcher, stopped above, has written what it was given; an index whose
                # thread failed (a new IndexFile without room) keeps what its files hold, and the
                # next open cuts its items past the commit point
                self._commits.flush_files(index=index_ok)
                self._commits.confirm()
                clean = True
        finally:
            self._closed = True
            self.closed_cleanly = clean
            try:
                self._cq.close(flush=clean)     # a failed fsync is never retried as if it could succeed
                if index is not None:
                    index.close(flush=clean and index_ok)
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
        self._services.settle_index()

    # --- what it tells its callers and watchers, from the part that owns each fact ------------------
    @property
    def last_commit(self) -> CommitPoint:
        return self._commits.last

    @property
    def committed_offset(self) -> int:
        return self._commits.last.offset

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
    def commit_log(self) -> CommitLog:
        """The commit log (RocketMQ's getCommitLog()): its segment queue and its record writer."""
        return self._log

    @property
    def read_only(self) -> bool:
        return self._failed.writes is not None or self._services.flusher.failed

    @property
    def can_close_cleanly(self) -> bool:
        """No flush has failed: what was committed is durable, and what an append left after the
        commit point is cut by the next open's normal recovery."""
        return self._failed.close is None and not self._services.flusher.failed

    @property
    def flush_count(self) -> int:
        """msync rounds the flush service has run (group commit shares one among waiting commits)."""
        return self._services.flusher.flush_count

    @property
    def index_seconds(self) -> float:
        """Time the writer spent on index/ since the open: handing batches to the index behind it, waiting
        for it before a commit point, and flushing the index (part of append and flush)."""
        return self._services.index_seconds

    @property
    def open_report(self) -> OpenReport:
        """What recovery found when this writer opened the store."""
        return self._open_report

    def usage(self) -> StoreUsage:
        """Size and position now, for monitoring; safe to call from another thread (store.usage)."""
        if self._closed:
            raise StoreError(f"store {self.root} is closed")
        cp, index = self._commits.last, self._services.index
        return measure(self.root, cp.offset, self.min_offset, cp.timestamp, len(self._log.queue.snapshot()),
                       index.service if index is not None else None)

    # --- its own records, up to the write end (store.read.records) -----------------------------
    @property
    def min_offset(self) -> int:
        return self._reads.min_offset

    def read(self, physical_offset: int) -> DecodedMessage:
        return self._reads.read(physical_offset)

    def iter_messages(self, from_offset: int | None = None, to_offset: int | None = None
                      ) -> Iterator[tuple[int, DecodedMessage]]:
        return self._reads.iter_messages(from_offset, to_offset)

    def get_by_queue(self, topic: str, queue_id: int, queue_offset: int, max_n: int = 32) -> list[DecodedMessage]:
        return self._reads.get_by_queue(topic, queue_id, queue_offset, max_n)

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        return self._reads.queue_range(topic, queue_id)

    def topics(self) -> dict[str, list[int]]:
        return self._reads.topics()

    def key_offsets(self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH, begin_ms: int = 0,
                    end_ms: int = FOREVER_MS) -> list[int]:
        return self._reads.key_offsets(topic, key, max_num, begin_ms, end_ms)

    def messages_by_key(self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH, begin_ms: int = 0,
                        end_ms: int = FOREVER_MS, uniq: bool = False) -> list[tuple[int, DecodedMessage]]:
        return self._reads.messages_by_key(topic, key, max_num, begin_ms, end_ms, uniq)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
