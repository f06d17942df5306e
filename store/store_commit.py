"""The commit point of a MessageStore, the exactly-once boundary: a flush of the commit log, the
consume queues and the index, then one atomic replace of commitpoint.json (store.log.commit_point)
and the checkpoint's confirmPhyOffset (store.log.checkpoint)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from store.config import StoreConfig
from store.errors import FlushError, StoreError
from store.failed_call import describe_failure
from store.format.constants import CHECKPOINT_FILE
from store.log.checkpoint import CheckpointKeeper, StoreCheckpoint
from store.log.commit_point import CommitPoint, commit_failure, write_commit_point
from store.log.commitlog import CommitLog
from store.queue.consume_queue import ConsumeQueueStore
from store.store_failure import StoreFailure
from store.store_open import now_ms
from store.store_services import StoreServices
from store.topics import TopicsPublisher


class StoreCommit:
    """The last commit point of the store at ``root`` and its checkpoint, and what writes them;
    a failure makes ``failure`` refuse writes."""

    def __init__(self, root: Path, config: StoreConfig, log: CommitLog, cq: ConsumeQueueStore,
                 services: StoreServices, failure: StoreFailure, topics: TopicsPublisher) -> None:
        self.root, self.config = root, config
        self._log, self._cq, self._services, self._failed, self._topics = log, cq, services, failure, topics
        self.checkpoint = CheckpointKeeper(root / CHECKPOINT_FILE)
        self.last = CommitPoint(0)

    def opened(self, commit_point: CommitPoint, checkpoint: StoreCheckpoint) -> None:
        """Take what recovery left (store.store_open), and write the checkpoint."""
        self.last, self.checkpoint.fields = commit_point, checkpoint
        self.checkpoint.write()

    def flush_files(self, index: bool = True) -> int:
        """Flush the commit log, the consume queues and (with ``index``) the index; the flushed offset."""
        off = self._services.flusher.flush()     # the index catches up behind the appends meanwhile
        idx = self._services.index if index else None
        if idx is not None:
            try:
                with self._services.index_time():
                    idx.settle()
            except (StoreError, OSError, ValueError) as e:   # a new IndexFile without room, say
                # nothing was flushed: the store refuses writes but can still close cleanly
                self._failed.refuse(e)
                raise FlushError(f"building the index of {self.root} failed: {describe_failure(e)}; what was appended "
                                 f"since the last commit point is not committed, the store refuses writes until "
                                 f"reopened") from e
        try:
            self._cq.flush()
            if idx is not None:
                with self._services.index_time():
                    idx.flush()
        except OSError as e:
            self._failed.broke(e)
            raise FlushError(f"flushing the consume queues or the index of {self.root} failed: {describe_failure(e)}"
                             f"; the store refuses writes until reopened") from e
        self.checkpoint.flushed(off, self._log.flushed_store_timestamp,
                                 idx.end_timestamp if idx is not None else None)
        return off

    def write(self, end: int, queue_offsets: dict[tuple[str, int], int], last_record: int,
              metadata: Mapping[str, Any] | None) -> CommitPoint:
        """Make ``end`` (flushed) the commit point with the caller's ``metadata`` (None keeps the
        previous metadata), and confirm it in the checkpoint."""
        if self._log.flushed_offset < end:
            raise FlushError(f"commit at {end} but only {self._log.flushed_offset} is flushed")
        meta = dict(self.last.metadata if metadata is None else metadata)
        cp = CommitPoint(end, queue_offsets, meta, now_ms(), last_record)
        step = "before"
        try:
            self._topics.cover(queue_offsets)   # config/topics.json before the point that needs it
            step = "writing"
            write_commit_point(self.root, cp)
            step = "written"
            self.checkpoint.fields.confirm_phy_offset = end
            self.checkpoint.write()
        except OSError as e:
            self._failed.broke(e)
            raise FlushError(f"{commit_failure(self.root, step, cp, self.last.offset)}: "
                             f"{describe_failure(e)}; the store refuses writes until reopened") from e
        self.last = cp
        if self.config.drop_cache_behind:
            # everything below the commit point is durable and indexed: nothing here reads it again
            self._log.drop_behind(end)
        return cp

    def confirm(self) -> None:
        """The checkpoint confirms the last commit point (a clean close)."""
        self.checkpoint.fields.confirm_phy_offset = self.last.offset
        self.checkpoint.write()
