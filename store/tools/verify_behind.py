"""verify's record checks behind a writer: each stretch of the commit log a writer commits is checked
(store.tools.verify_segment) on a thread of its own, while the writer goes on with the next batches,
so that a closing `commitlog verify` (verify_source's ``checked``) need not read those records again.

A stretch is checked only once the writer has committed it: its records and their consume-queue units
are durable and no writer changes them again. The check of a segment goes on from where the last one
ended, as verify's pieces do (the queue offsets continue across stretches); the closing verify takes a
segment's result when it checks that segment up to the same end. A stretch whose check finds anything,
or cannot read it, is not kept: the closing verify checks that segment again whole, and reports what
it finds as a verify of the whole store does. Each stretch's pages are handed back once checked (the
writer handed back its own when it committed them): the check reads them from disk into pages just
freed, not into memory the system has not used yet.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreError
from store.format.codec import CodecConfig
from store.format.constants import COMMITLOG_DIR
from store.log.segment import hand_back
from store.read.view import list_segments, store_segment_size
from store.tools.queues import QueueUnits
from store.tools.verify_segment import SegmentResult, SegmentTask, append_result, verify_segment

log = logging.getLogger(__name__)


@dataclass
class CheckedSegment:
    """A segment's records checked from its start up to ``end`` (an offset in the segment)."""

    end: int
    result: SegmentResult


class VerifyBehind:
    """Checks what a writer of the store at ``root`` commits, a stretch at a time (``committed``);
    ``close`` waits for the checks and returns what they found clean, by segment file name."""

    def __init__(self, root: str | os.PathLike[str], config: CodecConfig | None = None) -> None:
        self.root = Path(root)
        self.config = config or CodecConfig()
        self._units = QueueUnits(self.root)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="verify-behind")
        self._checked: dict[str, CheckedSegment] = {}
        self._spoiled: set[str] = set()          # a stretch of it was not clean: the closing verify checks it
        self._pending: list[Future[None]] = []

    def committed(self, offset: int) -> None:
        """The writer's commit point is now ``offset``: check the records below it not checked yet."""
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._thread.submit(self._check_below, offset))

    def close(self) -> dict[str, CheckedSegment]:
        self._thread.shutdown(wait=True)
        for f in self._pending:
            f.result()
        self._pending = []
        return dict(self._checked)

    def abandon(self) -> None:
        """Stop checking (the writer failed, or the caller is done): what is queued is dropped."""
        self._thread.shutdown(wait=True, cancel_futures=True)
        self._pending = []

    def _check_below(self, offset: int) -> None:
        segments = list_segments(self.root / COMMITLOG_DIR)
        expected = store_segment_size(s.size for s in segments)
        for seg in segments:
            if seg.base_offset >= offset:
                break
            done = self._checked.get(seg.name)
            start = done.end if done is not None else 0
            end = min(offset - seg.base_offset, seg.size)
            if seg.name in self._spoiled or end <= start:
                continue
            task = SegmentTask(seg, end, expected, False, self._units, self.config)
            try:
                res = verify_segment(task, start=start, probe_only_range=True)
            except (OSError, StoreError) as exc:
                log.debug("checking %s [%d, %d) behind the writer failed: %s", seg.name, start, end, exc)
                res = None
            if res is None or res.problems or res.broken or res.paused_at is not None:
                self._spoiled.add(seg.name)
                self._checked.pop(seg.name, None)
                continue
            if done is None:
                self._checked[seg.name] = CheckedSegment(end, res)
            else:
                append_result(done.result, res)
                done.end = end
            hand_back_pages(seg.path, start, end)


def hand_back_pages(path: Path, start: int, end: int) -> None:
    """The page-cache pages of [start, end) of ``path`` go back to the kernel (store.log.segment.hand_back):
    for a reader of what a writer has just handed back its pages of, so that the next reads take those
    pages again rather than memory not used yet (on a VM, several times the cost)."""
    try:
        with open(path, "rb") as f:
            hand_back(f.fileno(), start, end)
    except OSError as exc:       # advice only: the pages stay cached
        log.debug("handing back the pages of %s refused: %s", path, exc)
