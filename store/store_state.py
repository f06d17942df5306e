"""What a MessageStore tells its callers and watchers about itself, a mixin of
store.message_store.MessageStore: its offsets and commit point, whether it still takes writes, and
what monitoring reads from any thread (usage, what the open found, the index's share of the time)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass

from store.errors import StoreError, StoreIOError, StoreReadOnlyError
from store.failed_call import describe_failure
from store.format.codec import DecodedMessage
from store.format.constants import MAX_MSGS_NUM_BATCH
from store.index.lookup import FOREVER_MS
from store.log.commit_point import CommitPoint
from store.index.writer import IndexWriter
from store.log.commitlog import CommitLog
from store.log.flush import FlushService
from store.log.segment_queue import SegmentQueue
from store.read.records import RecordReads
from store.usage import OpenReport, StoreUsage, measure


@dataclass
class StoreFailure:
    """Why a MessageStore refuses writes (``writes``), and a clean close too (``close``: a failed
    write or sync is never retried as if the pages it left were good, store.log.flush)."""

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


class StoreState:
    """The state views of a MessageStore (whose fields it reads)."""

    root: Path
    _log: CommitLog
    _last_commit: CommitPoint
    _put_lock: threading.Lock
    _failed: StoreFailure
    _flusher: FlushService
    _closed: bool
    _index: IndexWriter | None
    _segments: SegmentQueue
    _reads: RecordReads
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
            self._failed.refuse(e, close_too=True)
            raise StoreIOError(e, step, self.root) from e

    def _dispatch_failed(self, e: BaseException, what: str = "writing the consume queues") -> StoreReadOnlyError:
        """A batch's consume-queue dispatch failed: the store refuses writes until reopened."""
        self._failed.refuse(e)
        return StoreReadOnlyError(
            f"{what} of {self.root} failed ({describe_failure(e)}); appended batches are in "
            f"the commit log but not committed. The store refuses writes now; reopen it to "
            f"recover from the last commit point")

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
        return self._failed.writes is not None or self._flusher.failed

    @property
    def can_close_cleanly(self) -> bool:
        """No flush has failed: what was committed is durable, and what an append left after the
        commit point is cut by the next open's normal recovery."""
        return self._failed.close is None and not self._flusher.failed

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
